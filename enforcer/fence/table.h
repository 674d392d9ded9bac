/* What the fence's C files share among themselves (table.c: a task's file and its slots,
 * charge.c: the allocation rules, peers.c: the other tasks' files, tasks.c: the enforcer's
 * side): internal, not part of state.h's API. */
#ifndef GPUFRAC_FENCE_TABLE_H
#define GPUFRAC_FENCE_TABLE_H

#include <stdint.h>

#include "state.h"

/* gf_add_sat is a + b, or UINT64_MAX where that wraps: sums of what tasks write themselves. */
static inline uint64_t gf_add_sat(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }

/* gf_held is what task k holds of the GPU: its guarantee, or its use where that is more. */
static inline uint64_t gf_held(const struct gf_task *k) { return k->used > k->cap ? k->used : k->cap; }

/* gf_contexts is what procs processes' CUDA contexts take at ctx each (no fenced call shows
 * it); the count is what a task wrote itself, so at most GF_PROCS count. */
static inline uint64_t gf_contexts(uint64_t procs, uint64_t ctx)
{
	uint64_t n = procs < GF_PROCS ? procs : GF_PROCS;
	return ctx > UINT64_MAX / GF_PROCS ? UINT64_MAX : n * ctx;
}

/* gf_past is what a use of used holds past a guarantee of cap: what it borrows. */
static inline uint64_t gf_past(uint64_t used, uint64_t cap) { return used > cap ? used - cap : 0; }

/* gf_counted is how many processes' contexts a task is counted for: what its file says
 * (procs), at least what the enforcer last saw of it on the GPU (seen), at most GF_NEW_PROCS
 * more. A task writes its own file: fewer would leave its contexts to whoever allocates at the
 * GPU's end, more would keep borrowers and new guarantees off memory nobody uses. */
static inline uint64_t gf_counted(uint64_t procs, uint64_t seen)
{
	if (procs <= seen)
		return seen;
	return procs - seen > GF_NEW_PROCS ? seen + GF_NEW_PROCS : procs;
}

/* gf_whole is what a task with guarantee cap, using used through procs processes, may come to
 * hold of the GPU with its contexts at ctx each: its guarantee or its use, whichever is more
 * (its allocations may always reach its guarantee), and a context on top for each process, or
 * for the one it will have where it has none yet. Every cap the fence holds is one of
 * allocations; the contexts lie past it (the watchdog allows for them the same way). */
static inline uint64_t gf_whole(uint64_t used, uint64_t cap, uint64_t procs, uint64_t ctx)
{
	return gf_add_sat(used > cap ? used : cap, gf_contexts(procs > 0 ? procs : 1, ctx));
}

/* gf_takes is what a task that uses used, with guarantee cap and keep, takes of the GPU now: its
 * allocations and the contexts its keep covers, at most what it holds (gf_held). */
static inline uint64_t gf_takes(uint64_t used, uint64_t cap, uint64_t keep)
{
	uint64_t held = used > cap ? used : cap, ctx = gf_add_sat(used, keep);
	return ctx < held ? ctx : held;
}

/* gf_lower takes n from *used, or all it holds when n is more, counting the underflow in t's
 * header (a free of more than was charged: a bug somewhere, counted not hidden). It returns what
 * it took. Called under the lock. */
static inline uint64_t gf_lower(struct gf_table *t, uint64_t *used, uint64_t n)
{
	if (n > *used) {
		t->h.underflows++;
		n = *used;
	}
	*used -= n;
	return n;
}

/* gf_set_waiting changes what process p waits for (GF_WAIT_*) and keeps its task's counts of
 * waiting processes (nwait, nowed, ngrace). Called under the lock. */
void gf_set_waiting(struct gf_table *t, struct gf_proc *p, uint32_t why);

/* gf_set_asking is gf_set_waiting(why) for an allocation of n bytes, kept in its task's sum of
 * what such waits ask for: gwant for GF_WAIT_GRACE, bwant for GF_WAIT_BORROW. Called under the
 * lock. */
void gf_set_asking(struct gf_table *t, struct gf_proc *p, uint32_t why, uint64_t n);

/* gf_find_task is the live task slot whose token hash is hash, or -1. */
int gf_find_task(const struct gf_table *t, const uint8_t *hash);

/* gf_give_back frees process slot i and returns its bytes to its task. Called under the lock. */
void gf_give_back(struct gf_table *t, int i);

/* gf_reset empties m (no file, no slot, no task). */
void gf_reset(struct gf_map *m);
/* gf_map_file maps the accounting file open at fd read-write and gives m an owner index in the
 * lock file open read-write at m->lfd. */
int gf_map_file(int fd, const char *path, struct gf_map *m, char *err, size_t errlen);
/* gf_file_create writes a fresh accounting file "file" of the task whose token hashes to hash,
 * whose slot i is k, and its empty lock file (gf_live_path), and gives the file's inode. The file
 * is written under a temporary name and renamed into place, over any earlier placement's (whose
 * processes keep what they opened): no reader ever maps a half-written header. */
int gf_file_create(const char *dir, const uint8_t *hash, const char *file, const char *uuid, int i,
		   const struct gf_task *k, uint64_t *ino, char *err, size_t errlen);

/* taskfile.c: the enforcer's reading and writing of the tasks' files, none of it through a
 * mapping of them. */
/* gf_file_valid says whether a table's header is this layout's. */
int gf_file_valid(const struct gf_table *t);
/* gf_file_read reads slot i's file into out (its header, its task's slot, its first *nprocs
 * process slots): GF_READ_SETTLED, GF_READ_UNSETTLED (a copy as it was after
 * GF_ENFORCER_WAIT_NS) or GF_READ_BAD (short, or not a table of this layout). */
int gf_file_read(struct gf_gpu *g, int i, struct gf_table *out, int *nprocs);
/* gf_file_used is what slot i's file says its task uses (0 where it cannot be read), armed
 * whether it says the task has allocated (1 where it cannot be read: nothing of it is lent), and
 * procs how many processes it says it has (0 where it cannot be read). */
uint64_t gf_file_used(const struct gf_gpu *g, int i, int *armed, uint64_t *procs);
/* gf_file_view is one reading of slot i's file into out, settled or not (gf_file_read says
 * what it copies): the process slots read, or -1. */
int gf_file_view(const struct gf_gpu *g, int i, struct gf_table *out);
/* gf_file_reap gives back the slots of dead processes in slot i's file; gf_file_rebuild rebuilds
 * its sums. Each runs where it has work in a child that maps the file: the count, or -1. */
int gf_file_reap(struct gf_gpu *g, int i);
int gf_file_rebuild(struct gf_gpu *g, int i);

/* peers.c: the other tasks' files of the GPU, opened read-only and read with pread for the rules of
 * borrowing. */
void gf_peers_open(struct gf_map *m, const char *dir, const char *file);
void gf_peers_close(struct gf_map *m);
/* gf_peers_view fills out[] with every task of the GPU as borrowing judges it: from the control
 * copy what only the enforcer writes, from each other task's file (read-only) its sums, and m's
 * own task from m's file. -1: the control copy could not be read. */
int gf_peers_view(struct gf_map *m, struct gf_task *out);

#endif
