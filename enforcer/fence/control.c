/*
 * The control copy: what only the enforcer writes (each task's slot state, generation, token
 * hash, guarantee, limit and keep, and the budget, the wait and the GPU's memory), in a file
 * beside the table's directory that tasks get through a read-only mount. Every task maps the
 * table writable, so a tenant can write a neighbour's guarantee there; every process puts the
 * copy's values back under the lock before the table's rules read them, so what it wrote never
 * decides an allocation.
 */
#define _GNU_SOURCE
#include "control.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GF_CONTROL_MAGIC 0x3174636e65666667ULL /* "gffenct1" */

struct gf_control_task {
	uint32_t state;
	uint32_t gen;
	uint64_t cap;
	uint64_t limit;
	uint64_t keep;
	uint8_t token_hash[GF_HASH_LEN];
};

struct gf_control {
	uint64_t magic;
	uint32_t version;
	uint32_t size;
	uint64_t total;
	uint64_t budget;
	uint64_t wait_ns;
	struct gf_control_task tasks[GF_TASKS];
};

/* control_path is path's file in "<its dir>-caps". */
static int control_path(const char *path, char *out, size_t n, char *dir, size_t dn)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return -1;
	int d = snprintf(dir, dn, "%.*s-caps", (int)(slash - path), path);
	int r = snprintf(out, n, "%s%s", dir, slash);
	return d < 0 || (size_t)d >= dn || r < 0 || (size_t)r >= n ? -1 : 0;
}

int gf_control_open(struct gf_map *m, const char *path, int writable, char *err, size_t errlen)
{
	char cpath[4200], dir[4200];
	m->c = NULL;
	if (control_path(path, cpath, sizeof cpath, dir, sizeof dir) != 0)
		return writable ? -1 : 0;
	int fd;
	if (writable) {
		if (mkdir(dir, 0755) != 0 && errno != EEXIST)
			goto failed;
		/* Tasks read it; only the enforcer writes it. */
		fd = open(cpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (fd >= 0 && ftruncate(fd, sizeof(struct gf_control)) != 0) {
			close(fd);
			fd = -1;
		}
	} else {
		fd = open(cpath, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return 0;
	}
	if (fd < 0)
		goto failed;
	struct stat st;
	void *p = MAP_FAILED;
	if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(struct gf_control))
		p = mmap(NULL, sizeof(struct gf_control), writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		if (!writable)
			return 0;
		goto failed;
	}
	struct gf_control *c = p;
	if (!writable && (c->magic != GF_CONTROL_MAGIC || c->version != GF_VERSION || c->size != sizeof *c)) {
		munmap(p, sizeof *c);
		return 0; /* not written yet, or another layout: the table alone */
	}
	m->c = c;
	return 0;
failed:
	if (err && errlen)
		snprintf(err, errlen, "fence control copy %s: %s", cpath, strerror(errno));
	return -1;
}

void gf_control_close(struct gf_map *m)
{
	if (m->c)
		munmap(m->c, sizeof(struct gf_control));
	m->c = NULL;
}

void gf_control_write(struct gf_map *m)
{
	struct gf_control *c = m->c;
	if (!c)
		return;
	const struct gf_table *t = m->t;
	c->total = t->h.total;
	c->budget = t->h.budget;
	c->wait_ns = t->h.wait_ns;
	for (int i = 0; i < GF_TASKS; i++) {
		const struct gf_task *k = &t->tasks[i];
		struct gf_control_task *ck = &c->tasks[i];
		ck->state = k->state;
		ck->gen = k->gen;
		ck->cap = k->cap;
		ck->limit = k->limit;
		ck->keep = k->keep;
		memcpy(ck->token_hash, k->token_hash, GF_HASH_LEN);
	}
	c->size = sizeof *c;
	c->version = GF_VERSION;
	__atomic_store_n(&c->magic, GF_CONTROL_MAGIC, __ATOMIC_RELEASE);
}

/* Compared before written: the table's lines are shared by every process on the GPU, and a
 * store to each on every allocation would bounce them between cores for nothing. */
#define PUT(dst, src)                \
	do {                         \
		if ((dst) != (src))  \
			(dst) = (src); \
	} while (0)

static void restore_task(struct gf_task *k, const struct gf_control_task *ck, int hashes)
{
	PUT(k->state, ck->state);
	PUT(k->gen, ck->gen);
	PUT(k->cap, ck->cap);
	PUT(k->limit, ck->limit);
	PUT(k->keep, ck->keep);
	if (hashes && memcmp(k->token_hash, ck->token_hash, GF_HASH_LEN) != 0)
		memcpy(k->token_hash, ck->token_hash, GF_HASH_LEN);
}

void gf_control_restore(struct gf_map *m, int task)
{
	const struct gf_control *c = m->c;
	if (!c)
		return;
	struct gf_table *t = m->t;
	PUT(t->h.total, c->total);
	PUT(t->h.budget, c->budget);
	PUT(t->h.wait_ns, c->wait_ns);
	if (task >= 0 && task < GF_TASKS) {
		restore_task(&t->tasks[task], &c->tasks[task], 0);
		return;
	}
	for (int i = 0; i < GF_TASKS; i++)
		restore_task(&t->tasks[i], &c->tasks[i], 1);
}
