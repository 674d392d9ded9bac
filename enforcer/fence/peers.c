/* The other tasks' accounting files of a GPU, as a borrowing allocation reads them: opened
 * read-only (a task may write its own file only), by the control copy's slots, and opened again
 * when a slot gets a new task. Read with pread, never mapped: a task may truncate its own file,
 * and a neighbour that had it mapped would fault (SIGBUS) at its next borrow; a short read only
 * makes the file unreadable. What only the enforcer writes comes from the control copy; what a
 * task's file says of its use is believed up to the task's limit, which the enforcer set, and of
 * its processes as far as gf_counted believes it beside those the enforcer saw. */
#define _GNU_SOURCE
#include "state.h"
#include "control.h"
#include "table.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct gf_peer {
	int fd; /* -1: not open, or not a usable file */
	uint32_t gen;
};

struct gf_peers {
	char dir[4096];
	char file[GF_UUID_MAX + 16];
	struct gf_control c; /* the control copy as the last view read it */
	int have;            /* c holds a whole copy, of sequence c.seq */
	struct gf_peer p[GF_TASKS];
};

void gf_peers_open(struct gf_map *m, const char *dir, const char *file)
{
	struct gf_peers *ps = calloc(1, sizeof *ps);
	if (!ps)
		return; /* gf_peers_view then answers -1: borrowing is refused, guarantees hold */
	snprintf(ps->dir, sizeof ps->dir, "%s", dir);
	snprintf(ps->file, sizeof ps->file, "%s", file);
	for (int i = 0; i < GF_TASKS; i++)
		ps->p[i].fd = -1;
	m->peers = ps;
}

static void drop(struct gf_peer *p)
{
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
	p->gen = 0;
}

void gf_peers_close(struct gf_map *m)
{
	struct gf_peers *ps = m->peers;
	if (!ps)
		return;
	for (int i = 0; i < GF_TASKS; i++)
		drop(&ps->p[i]);
	free(ps);
	m->peers = NULL;
}

/* look opens slot i's file read-only, for the task the control copy places there now. */
static void look(struct gf_peers *ps, int i, const struct gf_control_task *ck)
{
	struct gf_peer *p = &ps->p[i];
	if (p->fd >= 0 && p->gen == ck->gen)
		return;
	drop(p);
	char path[4200];
	if (gf_account_path(ps->dir, ck->token_hash, ps->file, path, sizeof path) != 0)
		return;
	p->fd = gf_open_file(path, O_RDONLY);
	struct gf_header h;
	if (p->fd < 0 || pread(p->fd, &h, sizeof h, 0) != (ssize_t)sizeof h || h.magic != GF_MAGIC ||
	    h.version != GF_VERSION) {
		drop(p);
		return;
	}
	p->gen = ck->gen;
}

int gf_peers_view(struct gf_map *m, struct gf_task *out)
{
	struct gf_peers *ps = m->peers;
	if (!ps || !m->c)
		return -1;
	/* The caller's claim (its own use, written before) is ordered before these reads. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	/* An unchanged sequence is an unchanged copy: the steady state reads one word of it. */
	uint64_t seq = __atomic_load_n(&m->c->seq, __ATOMIC_ACQUIRE);
	if (!ps->have || seq & 1 || seq != ps->c.seq) {
		ps->have = 0;
		if (gf_control_read(m->c, &ps->c) != 0)
			return -1;
		ps->have = 1;
	}
	for (int i = 0; i < GF_TASKS; i++) {
		const struct gf_control_task *ck = &ps->c.tasks[i];
		struct gf_task *k = &out[i];
		if (ck->state != GF_LIVE) {
			k->state = GF_FREE;
			if (ps->p[i].fd >= 0)
				drop(&ps->p[i]);
			continue;
		}
		/* What the rules read (charge.c), nothing more: this runs on every borrowing-on charge. */
		k->state = GF_LIVE;
		k->gen = ck->gen;
		k->cap = ck->cap;
		k->limit = ck->limit > ck->cap ? ck->limit : ck->cap;
		k->keep = ck->keep;
		k->stage = ck->stage;
		if (i == m->task) {
			const struct gf_task *own = &m->t->tasks[i];
			k->used = own->used;
			k->armed = own->armed || ck->sealed;
			k->nwait = own->nwait;
			k->nowed = own->nowed;
			k->ngrace = own->ngrace;
			k->gwant = own->gwant;
			k->bwant = own->bwant;
			k->procs = gf_counted(own->procs, ck->seen);
			continue;
		}
		look(ps, i, ck);
		struct gf_task f;
		off_t at = (off_t)(offsetof(struct gf_table, tasks) + (size_t)i * sizeof f);
		if (ps->p[i].fd < 0 || pread(ps->p[i].fd, &f, sizeof f, at) != (ssize_t)sizeof f) {
			/* A file it cannot read: the task holds all its guarantee, as far as anyone knows,
			 * and borrows nothing, waits for nothing. */
			drop(&ps->p[i]);
			k->used = k->nwait = k->nowed = k->ngrace = k->gwant = k->bwant = 0;
			k->procs = gf_counted(0, ck->seen);
			k->armed = 1;
			k->keep = k->cap;
			continue;
		}
		k->used = f.used < k->limit ? f.used : k->limit;
		k->armed = f.armed != 0 || ck->sealed;
		k->nwait = f.nwait;
		k->nowed = f.nowed;
		k->ngrace = f.ngrace;
		k->gwant = f.gwant;
		k->bwant = f.bwant;
		k->procs = gf_counted(f.procs, ck->seen);
		if (ck->unheeded)
			k->nwait = k->nowed = k->ngrace = k->gwant = k->bwant = 0; /* its waits outlasted every bound */
	}
	/* An unseen task borrows no more than NVML showed its processes hold (gf_task.unseen), but
	 * only while an owner waits, when nobody may borrow more: the enforcer sets the mark then,
	 * and takes it back only at its next pass, while from the moment the wait ends borrowers may
	 * borrow again, and a process the marked task started since would hold what the mark hides. */
	int owed = 0;
	for (int i = 0; i < GF_TASKS; i++)
		owed |= out[i].state == GF_LIVE && out[i].nowed > 0;
	for (int i = 0; owed && i < GF_TASKS; i++) {
		uint64_t most = ps->c.tasks[i].unseen > out[i].cap ? ps->c.tasks[i].unseen : out[i].cap;
		if (i != m->task && out[i].state == GF_LIVE && ps->c.tasks[i].unseen && out[i].used > most)
			out[i].used = most;
	}
	return 0;
}
