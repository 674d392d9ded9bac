/* The control copy of a GPU (control.c) and the names of its files, for table.c, charge.c,
 * peers.c and tasks.c: internal, not part of state.h's API. */
#ifndef GPUFRAC_FENCE_CONTROL_H
#define GPUFRAC_FENCE_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "state.h"

struct gf_control_task {
	uint32_t state;
	uint32_t gen;
	uint64_t cap;
	uint64_t limit;
	uint64_t keep;
	uint64_t grace_ns; /* see gf_task_spec.grace_ns */
	uint64_t stage;    /* see gf_task.stage */
	uint64_t seen;     /* see gf_task.seen */
	uint64_t unheeded; /* see gf_task.unheeded */
	uint64_t sealed;   /* see gf_task.sealed */
	uint64_t unseen;   /* see gf_task.unseen */
	uint8_t token_hash[GF_HASH_LEN];
};

struct gf_control {
	uint64_t magic;
	uint32_t version;
	uint32_t size;
	/* Odd while the enforcer writes: a reader copies between two equal even reads, so it never
	 * acts on half a write. */
	uint64_t seq;
	uint64_t total;
	uint64_t budget;
	uint64_t wait_ns;
	/* What a process's CUDA context takes of the GPU, which no fenced call shows, and what the
	 * GPU holds past the budget (its headroom): a borrow leaves every process's context, on top
	 * of what its task may hold, within the two together, as it leaves the allocations within
	 * the budget (charge.c). */
	uint64_t ctx;
	uint64_t spare;
	uint64_t recoveries; /* writes an enforcer died in the middle of, made whole by the next */
	struct gf_control_task tasks[GF_TASKS];
};

/* gf_split_name splits a GPU's name "<dir>/<uuid>.fence" into dir and file ("<uuid>.fence"). */
int gf_split_name(const char *path, char *dir, size_t dn, char *file, size_t fn);
/* gf_control_path is the control copy of the GPU named path: "<dir>-caps/<file>". */
int gf_control_path(const char *path, char *out, size_t n);
/* gf_account_path is the accounting file of the task whose token hashes to hash:
 * "<dir>/<hex of hash>/<file>"; with file NULL, its directory. */
int gf_account_path(const char *dir, const uint8_t *hash, const char *file, char *out, size_t n);
/* gf_live_path is the lock file of the accounting file whose inode is ino, which holds its owner
 * and liveness bytes: "<dir>-live/<hex of hash>/<uuid>.<ino>.live" for file "<uuid>.fence"; with
 * file NULL, its directory, and with hash NULL too, "<dir>-live". Named for the inode, a lock file
 * pairs with one accounting file alone: a process that opened an earlier placement's accounting
 * file cannot lock the bytes of a later one's (gf_attach). */
int gf_live_path(const char *dir, const uint8_t *hash, const char *file, uint64_t ino, char *out, size_t n);
/* gf_enforcer_path is the file whose lock marks the enforcer of the GPU named path:
 * "<dir>-enforcer/<uuid>.lock"; with dirname set, its directory. */
int gf_enforcer_path(const char *path, int dirname, char *out, size_t n);

/* gf_open_file opens path when it is a regular file, never through a symbolic link, a FIFO or a
 * device: an accounting file lies in a directory its task writes, and the enforcer (root on the
 * host) and the other tasks' processes open it by name. -1 with errno otherwise. */
int gf_open_file(const char *path, int flags);
/* gf_fd_aside moves fd (close-on-exec kept) to a number above those a program picks for its own
 * dup2: fd itself when it cannot. */
int gf_fd_aside(int fd);
/* gf_control_open maps the control copy at cpath read-only for a task process: 0, or -1. */
int gf_control_open(struct gf_map *m, const char *cpath, char *err, size_t errlen);
void gf_control_close(struct gf_map *m);
/* gf_control_create opens or creates the control copy at cpath for the enforcer (0644, its
 * directory 0755): 0, -1, or GF_ERR_CORRUPT for a file of another layout. */
int gf_control_create(struct gf_gpu *g, const char *cpath, char *err, size_t errlen);

/* gf_control_read copies the whole copy between two equal even sequence reads: 0, or -1 when
 * none came within GF_LOCK_WAIT_NS (an enforcer died writing; the next one makes it whole). */
int gf_control_read(const struct gf_control *c, struct gf_control *out);
/* gf_control_task is gf_control_read for one task slot and the budget, wait, context and spare. */
int gf_control_task(const struct gf_control *c, int i, struct gf_control_task *k, uint64_t *budget,
		    uint64_t *wait_ns, uint64_t *ctx, uint64_t *spare);
/* The enforcer's write: everything between begin and end is seen whole or not at all. */
void gf_control_begin(struct gf_control *c);
void gf_control_end(struct gf_control *c);

/* gf_control_restore puts slot m->task of the copy (its guarantee, limit, keep, state and
 * generation) into m's file, under its lock, before the rules read it: what the task wrote
 * there of what only the enforcer writes decides nothing. -1: the copy could not be read. */
int gf_control_restore(struct gf_map *m);

#endif
