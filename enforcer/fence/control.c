/*
 * The control copy: what only the enforcer writes (each task's slot state, generation, token
 * hash, guarantee, limit and keep, and the budget, the wait and the GPU's memory), in a file
 * beside the fence directory that tasks get through a read-only mount. A task's own accounting
 * file carries its slot's values too (the rules read them there), and every process puts the
 * copy's values back before the rules read them, so what a task wrote there decides nothing.
 * The enforcer writes it inside a sequence counter, so no reader acts on half a write.
 */
#define _GNU_SOURCE
#include "control.h"
#include "lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define GF_CONTROL_MAGIC 0x3174636e65666667ULL /* "gffenct1" */

int gf_split_name(const char *path, char *dir, size_t dn, char *file, size_t fn)
{
	const char *slash = strrchr(path, '/');
	if (!slash || slash == path)
		return -1;
	int d = snprintf(dir, dn, "%.*s", (int)(slash - path), path);
	int f = snprintf(file, fn, "%s", slash + 1);
	return d < 0 || (size_t)d >= dn || f <= 0 || (size_t)f >= fn ? -1 : 0;
}

int gf_control_path(const char *path, char *out, size_t n)
{
	char dir[4096], file[GF_UUID_MAX + 16];
	if (gf_split_name(path, dir, sizeof dir, file, sizeof file) != 0)
		return -1;
	int r = snprintf(out, n, "%s-caps/%s", dir, file);
	return r < 0 || (size_t)r >= n ? -1 : 0;
}

static void hex_of(const uint8_t *hash, char hex[2 * GF_HASH_LEN + 1])
{
	for (int i = 0; i < GF_HASH_LEN; i++)
		snprintf(hex + 2 * i, 3, "%02x", hash[i]);
}

int gf_account_path(const char *dir, const uint8_t *hash, const char *file, char *out, size_t n)
{
	char hex[2 * GF_HASH_LEN + 1];
	hex_of(hash, hex);
	int r = file ? snprintf(out, n, "%s/%s/%s", dir, hex, file) : snprintf(out, n, "%s/%s", dir, hex);
	return r < 0 || (size_t)r >= n ? -1 : 0;
}

/* uuid_len is how much of a GPU's file name "<uuid>.fence" is its UUID. */
static int uuid_len(const char *file)
{
	size_t l = strlen(file), s = strlen(".fence");
	return (int)(l > s && strcmp(file + l - s, ".fence") == 0 ? l - s : l);
}

int gf_live_path(const char *dir, const uint8_t *hash, const char *file, uint64_t ino, char *out, size_t n)
{
	char hex[2 * GF_HASH_LEN + 1];
	int r;
	if (!hash) {
		r = snprintf(out, n, "%s-live", dir);
	} else {
		hex_of(hash, hex);
		r = file ? snprintf(out, n, "%s-live/%s/%.*s.%llu.live", dir, hex, uuid_len(file), file,
				    (unsigned long long)ino)
			 : snprintf(out, n, "%s-live/%s", dir, hex);
	}
	return r < 0 || (size_t)r >= n ? -1 : 0;
}

int gf_enforcer_path(const char *path, int dirname, char *out, size_t n)
{
	char dir[4096], file[GF_UUID_MAX + 16];
	if (gf_split_name(path, dir, sizeof dir, file, sizeof file) != 0)
		return -1;
	int r = dirname ? snprintf(out, n, "%s-enforcer", dir)
			: snprintf(out, n, "%s-enforcer/%.*s.lock", dir, uuid_len(file), file);
	return r < 0 || (size_t)r >= n ? -1 : 0;
}

/* A program points numbers of its own choosing elsewhere: a shell's exec 5>file, a daemon's
 * dup2 onto 0-2 after it started with them closed (when the fence's own open took them). A dup2
 * onto the descriptor that holds a process's liveness lock drops the lock, and the reaper then
 * gives back a slot whose memory the driver still holds. The numbers from half the descriptor
 * limit up (at most 1024) are the ones nobody picks: a new descriptor takes the lowest free. */
int gf_fd_aside(int fd)
{
	if (fd < 0)
		return fd;
	struct rlimit rl;
	rlim_t floor = 1024;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur / 2 < floor)
		floor = rl.rlim_cur / 2;
	if ((rlim_t)fd >= floor)
		return fd;
	int e = errno;
	int hi = fcntl(fd, F_DUPFD_CLOEXEC, (int)floor);
	if (hi >= 0)
		close(fd);
	errno = e;
	return hi >= 0 ? hi : fd;
}

int gf_open_file(const char *path, int flags)
{
	int at = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (at < 0)
		return -1;
	struct stat st;
	if (fstat(at, &st) != 0) {
		int e = errno;
		close(at);
		errno = e;
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		close(at);
		errno = S_ISLNK(st.st_mode) ? ELOOP : EINVAL;
		return -1;
	}
	char self[64];
	snprintf(self, sizeof self, "/proc/self/fd/%d", at);
	int fd = open(self, flags | O_CLOEXEC);
	int e = errno;
	close(at);
	errno = e;
	return gf_fd_aside(fd);
}

static int usable(const struct gf_control *c)
{
	return c->magic == GF_CONTROL_MAGIC && c->version == GF_VERSION && c->size == sizeof *c;
}

int gf_control_open(struct gf_map *m, const char *cpath, char *err, size_t errlen)
{
	m->c = NULL;
	m->cfd = gf_fd_aside(open(cpath, O_RDONLY | O_CLOEXEC));
	struct stat st;
	void *p = MAP_FAILED;
	const char *why = NULL;
	if (m->cfd < 0)
		why = strerror(errno);
	else if (fstat(m->cfd, &st) != 0 || (size_t)st.st_size < sizeof(struct gf_control))
		why = "is not a fence control copy (too short)";
	else if ((p = mmap(NULL, sizeof(struct gf_control), PROT_READ, MAP_SHARED, m->cfd, 0)) == MAP_FAILED)
		why = strerror(errno);
	else if (!usable(p))
		why = "is not a fence control copy of this layout (bad magic)";
	if (!why) {
		m->c = p;
		return 0;
	}
	if (p != MAP_FAILED)
		munmap(p, sizeof(struct gf_control));
	if (m->cfd >= 0)
		close(m->cfd);
	m->cfd = -1;
	if (err && errlen)
		snprintf(err, errlen, "fence state %s: %s", cpath, why);
	return -1;
}

void gf_control_close(struct gf_map *m)
{
	if (m->c)
		munmap(m->c, sizeof(struct gf_control));
	if (m->cfd >= 0)
		close(m->cfd);
	m->c = NULL;
	m->cfd = -1;
}

int gf_control_create(struct gf_gpu *g, const char *cpath, char *err, size_t errlen)
{
	char dir[4096], file[GF_UUID_MAX + 16];
	if (gf_split_name(cpath, dir, sizeof dir, file, sizeof file) != 0) {
		errno = ENAMETOOLONG;
		goto failed;
	}
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		goto failed;
	/* Tasks read it; only the enforcer writes it. */
	g->cfd = open(cpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (g->cfd < 0)
		goto failed;
	struct stat st;
	if (fstat(g->cfd, &st) != 0)
		goto failed;
	if (st.st_size != 0 && (size_t)st.st_size != sizeof(struct gf_control)) {
		if (err && errlen)
			snprintf(err, errlen, "fence state %s is %lld bytes, not a control copy of this layout", cpath,
				 (long long)st.st_size);
		return GF_ERR_CORRUPT;
	}
	if (st.st_size == 0 && ftruncate(g->cfd, sizeof(struct gf_control)) != 0)
		goto failed;
	void *p = mmap(NULL, sizeof(struct gf_control), PROT_READ | PROT_WRITE, MAP_SHARED, g->cfd, 0);
	if (p == MAP_FAILED)
		goto failed;
	struct gf_control *c = p;
	/* All zeros but the sequence: an enforcer died inside its very first write (begin fixes it). */
	if (st.st_size != 0 && c->magic != 0 && !usable(c)) {
		munmap(p, sizeof *c);
		if (err && errlen)
			snprintf(err, errlen, "fence state %s is not a control copy of this layout (bad magic)", cpath);
		return GF_ERR_CORRUPT;
	}
	g->c = c;
	return 0;
failed:
	if (err && errlen)
		snprintf(err, errlen, "fence control copy %s: %s", cpath, strerror(errno));
	return -1;
}

void gf_control_begin(struct gf_control *c)
{
	uint64_t s = __atomic_load_n(&c->seq, __ATOMIC_RELAXED);
	if (s & 1) {
		s++; /* an enforcer died inside a write: this one rewrites what it left */
		c->recoveries++;
	}
	__atomic_store_n(&c->seq, s + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

void gf_control_end(struct gf_control *c)
{
	c->size = sizeof *c;
	c->version = GF_VERSION;
	c->magic = GF_CONTROL_MAGIC;
	__atomic_store_n(&c->seq, c->seq + 1, __ATOMIC_RELEASE);
	/* a borrower that claimed must see this write, or this enforcer its claim (tasks.c) */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* copy runs f between two equal even reads of the sequence, bounded. */
#define SEQ_READ(c, body)                                                                   \
	do {                                                                                \
		uint64_t deadline_ = 0;                                                     \
		for (unsigned tries_ = 0;; tries_++) {                                      \
			uint64_t s1_ = __atomic_load_n(&(c)->seq, __ATOMIC_ACQUIRE);        \
			if (!(s1_ & 1)) {                                                   \
				body;                                                       \
				__atomic_thread_fence(__ATOMIC_ACQUIRE);                    \
				if (__atomic_load_n(&(c)->seq, __ATOMIC_RELAXED) == s1_)    \
					return 0;                                           \
			}                                                                   \
			if (tries_ > 64) {                                                  \
				uint64_t now_ = gf_now_ns();                                \
				if (deadline_ == 0)                                         \
					deadline_ = now_ + GF_LOCK_WAIT_NS;                 \
				else if (now_ >= deadline_)                                 \
					return -1;                                          \
				sched_yield();                                              \
			}                                                                   \
		}                                                                           \
	} while (0)

int gf_control_read(const struct gf_control *c, struct gf_control *out)
{
	SEQ_READ(c, memcpy(out, c, sizeof *out));
}

int gf_control_task(const struct gf_control *c, int i, struct gf_control_task *k, uint64_t *budget,
		    uint64_t *wait_ns, uint64_t *ctx, uint64_t *spare)
{
	SEQ_READ(c, {
		*k = c->tasks[i];
		*budget = c->budget;
		*wait_ns = c->wait_ns;
		*ctx = c->ctx;
		*spare = c->spare;
	});
}

/* Compared before written: a task's processes share the file's lines, and a store to each on
 * every allocation would bounce them between cores for nothing. */
#define PUT(dst, src)                \
	do {                         \
		if ((dst) != (src))  \
			(dst) = (src); \
	} while (0)

int gf_control_restore(struct gf_map *m)
{
	if (!m->c)
		return 0; /* a private table: its own values are the only ones */
	struct gf_control_task ck;
	uint64_t budget, wait_ns, ctx, spare;
	if (m->task < 0 || m->task >= GF_TASKS ||
	    gf_control_task(m->c, m->task, &ck, &budget, &wait_ns, &ctx, &spare) != 0)
		return -1;
	struct gf_table *t = m->t;
	struct gf_task *k = &t->tasks[m->task];
	PUT(t->h.budget, budget);
	PUT(t->h.wait_ns, wait_ns);
	PUT(k->state, ck.state);
	PUT(k->gen, ck.gen);
	PUT(k->cap, ck.cap);
	PUT(k->limit, ck.limit);
	PUT(k->keep, ck.keep);
	PUT(k->stage, ck.stage);
	PUT(k->seen, ck.seen);
	m->grace_ns = ck.grace_ns;
	m->stage = ck.stage;
	if (memcmp(k->token_hash, ck.token_hash, GF_HASH_LEN) != 0)
		memcpy(k->token_hash, ck.token_hash, GF_HASH_LEN);
	m->budget = budget;
	m->ctx = ctx;
	m->spare = spare;
	return 0;
}
