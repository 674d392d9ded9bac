/* The other tasks' accounting files of a GPU, as a borrowing allocation reads them: mapped
 * read-only (a task may write its own file only), by the control copy's slots, and opened again
 * when a slot gets a new task. What only the enforcer writes comes from the control copy; what a
 * task's file says of its use is believed up to the task's limit, which the enforcer set. */
#define _GNU_SOURCE
#include "state.h"
#include "control.h"
#include "table.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct gf_peer {
	int fd;
	const struct gf_table *t;
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
	if (p->t)
		munmap((void *)p->t, sizeof *p->t);
	if (p->fd >= 0)
		close(p->fd);
	p->t = NULL;
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

/* look maps slot i's file read-only, for the task the control copy places there now. */
static void look(struct gf_peers *ps, int i, const struct gf_control_task *ck)
{
	struct gf_peer *p = &ps->p[i];
	if (p->t && p->gen == ck->gen)
		return;
	drop(p);
	char path[4200];
	if (gf_account_path(ps->dir, ck->token_hash, ps->file, path, sizeof path) != 0)
		return;
	p->fd = gf_open_file(path, O_RDONLY);
	struct stat st;
	if (p->fd < 0 || fstat(p->fd, &st) != 0 || (size_t)st.st_size < sizeof *p->t) {
		drop(p);
		return;
	}
	void *a = mmap(NULL, sizeof *p->t, PROT_READ, MAP_SHARED, p->fd, 0);
	if (a == MAP_FAILED) {
		drop(p);
		return;
	}
	p->t = a;
	p->gen = ck->gen;
	if (p->t->h.magic != GF_MAGIC || p->t->h.version != GF_VERSION)
		drop(p);
}

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

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
			if (ps->p[i].t)
				drop(&ps->p[i]);
			continue;
		}
		/* What the rules read (charge.c), nothing more: this runs on every borrowing-on charge. */
		k->state = GF_LIVE;
		k->gen = ck->gen;
		k->cap = ck->cap;
		k->limit = ck->limit > ck->cap ? ck->limit : ck->cap;
		k->keep = ck->keep;
		if (i == m->task) {
			const struct gf_task *own = &m->t->tasks[i];
			k->used = own->used;
			k->armed = own->armed;
			k->nwait = own->nwait;
			k->nowed = own->nowed;
			continue;
		}
		look(ps, i, ck);
		const struct gf_table *t = ps->p[i].t;
		if (!t) {
			/* A file it cannot read: the task holds all its guarantee, as far as anyone knows,
			 * and borrows nothing, waits for nothing. */
			k->used = k->nwait = k->nowed = 0;
			k->armed = 1;
			k->keep = k->cap;
			continue;
		}
		const struct gf_task *f = &t->tasks[i];
		uint64_t used = LOAD(f->used);
		k->used = used < k->limit ? used : k->limit;
		k->armed = LOAD(f->armed) != 0;
		k->nwait = LOAD(f->nwait);
		k->nowed = LOAD(f->nowed);
	}
	return 0;
}
