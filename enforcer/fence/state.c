/* The fence's shared state (state.h says why it is built this way). */
#define _GNU_SOURCE
#include "state.h"
#include "control.h"
#include "lock.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The byte whose lock marks the enforcer that manages the file. */
#define CONTROL_BYTE (GF_LIVE_BASE - 1)

/* set_waiting changes what a process waits for and keeps its task's count of waiting
 * processes. Called under the lock. */
static void set_waiting(struct gf_table *t, struct gf_proc *p, uint32_t why)
{
	if ((p->waiting != GF_WAIT_NONE) != (why != GF_WAIT_NONE) && p->task < GF_TASKS) {
		struct gf_task *k = &t->tasks[p->task];
		if (k->state == GF_LIVE && k->gen == p->task_gen) {
			if (why != GF_WAIT_NONE)
				k->nwait++;
			else if (k->nwait > 0)
				k->nwait--;
		}
	}
	p->waiting = why;
}

static void give_back_bytes(struct gf_map *m, uint64_t n);

/* settle_pending gives back what this process freed while it could not take the lock. Called
 * under the lock. */
static void settle_pending(struct gf_map *m)
{
	if (m->unwait && m->slot >= 0) {
		/* a wait that ended without the lock (GF_BUSY) is cleared at the next one */
		m->unwait = 0;
		struct gf_proc *p = &m->t->procs[m->slot];
		if (p->state == GF_LIVE && p->pgen == m->pgen)
			set_waiting(m->t, p, GF_WAIT_NONE);
	}
	if (m->pending > 0 && m->slot >= 0) {
		uint64_t n = m->pending;
		m->pending = 0;
		give_back_bytes(m, n);
	}
}

/* give_back frees a process slot and returns its bytes to its task. Called under the lock. */
static void give_back(struct gf_table *t, int i)
{
	struct gf_proc *p = &t->procs[i];
	if (p->state != GF_LIVE)
		return;
	if (p->task < GF_TASKS) {
		struct gf_task *k = &t->tasks[p->task];
		if (k->state == GF_LIVE && k->gen == p->task_gen) {
			if (p->used > k->used) {
				t->h.underflows++;
				k->used = 0;
			} else {
				k->used -= p->used;
			}
			if (k->procs > 0)
				k->procs--;
			if (p->waiting && k->nwait > 0)
				k->nwait--;
		}
	}
	uint32_t pgen = p->pgen + 1;
	memset(p, 0, sizeof *p);
	p->pgen = pgen;
}

static int fail(char *err, size_t errlen, const char *what, const char *path, int e)
{
	if (err && errlen)
		snprintf(err, errlen, "%s %s: %s", what, path, strerror(e));
	return -1;
}

static int check_header(const struct gf_table *t, off_t size, const char *path, char *err, size_t errlen)
{
	const struct gf_header *h = &t->h;
	const char *why = NULL;
	if ((size_t)size < sizeof *t)
		why = "is shorter than a fence table";
	else if (h->magic != GF_MAGIC)
		why = "is not a gpufrac fence table (bad magic)";
	else if (h->version != GF_VERSION)
		why = "has another layout version";
	else if (h->header_size != sizeof t->h || h->task_size != sizeof t->tasks[0] ||
		 h->proc_size != sizeof t->procs[0] || h->ntasks != GF_TASKS || h->nprocs != GF_PROCS)
		why = "has other table sizes";
	if (!why)
		return 0;
	if (err && errlen)
		snprintf(err, errlen, "fence state %s %s", path, why);
	return GF_ERR_CORRUPT;
}

static int map_file(int fd, const char *path, struct gf_map *m, char *err, size_t errlen)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		return fail(err, errlen, "stat", path, errno);
	if ((size_t)st.st_size < sizeof(struct gf_table)) {
		if (err && errlen)
			snprintf(err, errlen, "fence state %s is %lld bytes, a table needs %zu", path,
				 (long long)st.st_size, sizeof(struct gf_table));
		return GF_ERR_CORRUPT;
	}
	void *p = mmap(NULL, sizeof(struct gf_table), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return fail(err, errlen, "map", path, errno);
	m->t = p;
	int rc = check_header(m->t, st.st_size, path, err, errlen);
	if (rc == 0 && gf_take_owner(m) != 0) {
		if (err && errlen)
			snprintf(err, errlen, "fence state %s has no free owner index (%d maps)", path, GF_OWNERS);
		rc = -1;
	}
	if (rc != 0) {
		munmap(p, sizeof(struct gf_table));
		m->t = NULL;
	}
	return rc;
}

static void reset(struct gf_map *m)
{
	memset(m, 0, sizeof *m);
	m->fd = -1;
	m->slot = -1;
	m->task = -1;
	m->owner = -1;
}

static void init_table(struct gf_table *t, const char *uuid)
{
	t->h.magic = GF_MAGIC;
	t->h.version = GF_VERSION;
	t->h.header_size = sizeof t->h;
	t->h.task_size = sizeof t->tasks[0];
	t->h.proc_size = sizeof t->procs[0];
	t->h.ntasks = GF_TASKS;
	t->h.nprocs = GF_PROCS;
	snprintf(t->h.uuid, sizeof t->h.uuid, "%s", uuid);
}

/* create_new writes a fresh table under a temporary name and links it into place, so no reader
 * ever maps a half-written header; a racing creator's table wins and this one is dropped. */
static int create_new(const char *path, const char *uuid, char *err, size_t errlen)
{
	char tmp[4096];
	if (snprintf(tmp, sizeof tmp, "%s.new.%d", path, (int)getpid()) >= (int)sizeof tmp)
		return fail(err, errlen, "create", path, ENAMETOOLONG);
	int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
	if (fd < 0)
		return fail(err, errlen, "create", tmp, errno);
	/* Tasks run as other users than the enforcer: the table must be theirs to write. */
	int rc = fchmod(fd, 0666);
	if (rc == 0)
		rc = ftruncate(fd, sizeof(struct gf_table));
	struct gf_table *t = MAP_FAILED;
	if (rc == 0)
		t = mmap(NULL, sizeof *t, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (t == MAP_FAILED) {
		int e = errno;
		close(fd);
		unlink(tmp);
		return fail(err, errlen, "create", tmp, e);
	}
	init_table(t, uuid);
	munmap(t, sizeof *t);
	rc = fsync(fd);
	close(fd);
	if (rc == 0 && link(tmp, path) != 0 && errno != EEXIST)
		rc = -1;
	int e = errno;
	unlink(tmp);
	return rc == 0 ? 0 : fail(err, errlen, "create", path, e);
}

int gf_create(const char *path, const char *uuid, uint64_t total, uint64_t budget, struct gf_map *m,
	      char *err, size_t errlen)
{
	reset(m);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		if (create_new(path, uuid, err, errlen) != 0)
			return -1;
		fd = open(path, O_RDWR | O_CLOEXEC);
	}
	if (fd < 0)
		return fail(err, errlen, "open", path, errno);
	m->fd = fd;
	if (gf_byte_lock(fd, CONTROL_BYTE, F_WRLCK) != 0) {
		int e = errno;
		close(fd);
		reset(m);
		if (e == EAGAIN || e == EACCES) {
			if (err && errlen)
				snprintf(err, errlen, "fence state %s is managed by another gpufrac process", path);
			return GF_ERR_BUSY;
		}
		return fail(err, errlen, "lock", path, e);
	}
	int rc = map_file(fd, path, m, err, errlen);
	if (rc == 0 && gf_control_open(m, path, 1, err, errlen) != 0) {
		munmap(m->t, sizeof *m->t);
		rc = -1;
	}
	if (rc != 0) {
		close(fd);
		reset(m);
		return rc;
	}
	if (gf_lock(m) != 0) {
		gf_control_close(m);
		munmap(m->t, sizeof *m->t);
		close(fd);
		reset(m);
		if (err && errlen)
			snprintf(err, errlen, "fence state %s is locked by a live process that does not let go", path);
		return GF_ERR_LOCKED;
	}
	m->t->h.total = total;
	gf_test_point("create");
	m->t->h.budget = budget;
	snprintf(m->t->h.uuid, sizeof m->t->h.uuid, "%s", uuid);
	gf_control_write(m);
	gf_unlock(m);
	return 0;
}

static int find_task(const struct gf_table *t, const uint8_t *hash)
{
	for (int i = 0; i < GF_TASKS; i++)
		if (t->tasks[i].state == GF_LIVE && memcmp(t->tasks[i].token_hash, hash, GF_HASH_LEN) == 0)
			return i;
	return -1;
}

/* try_claim takes slot i if its byte is free (a free slot, or one whose owner died). */
static int try_claim(struct gf_map *m, int i, const uint8_t *hash)
{
	if (gf_byte_lock(m->fd, GF_LIVE_BASE + i, F_WRLCK) != 0)
		return 0;
	if (gf_lock(m) != 0) {
		gf_byte_lock(m->fd, GF_LIVE_BASE + i, F_UNLCK);
		return -2;
	}
	struct gf_table *t = m->t;
	gf_test_point("claim");
	gf_control_restore(m, -1);
	int k = find_task(t, hash);
	if (k < 0) {
		gf_unlock(m);
		gf_byte_lock(m->fd, GF_LIVE_BASE + i, F_UNLCK);
		return -1;
	}
	if (t->procs[i].state == GF_LIVE) {
		give_back(t, i); /* its owner died: the byte was free */
		t->h.reaped++;
	}
	struct gf_proc *p = &t->procs[i];
	/* The slot goes live last: a holder that dies before leaves a free slot, one that dies
	 * after leaves a whole one that the recount and the reaper understand. */
	p->task = (uint32_t)k;
	p->task_gen = t->tasks[k].gen;
	p->pid = (int32_t)getpid();
	__atomic_store_n(&p->state, GF_LIVE, __ATOMIC_RELEASE);
	gf_test_point("claim-live");
	t->tasks[k].procs++;
	t->tasks[k].armed = 1; /* a process attaches at its first allocation: the task is on the GPU */
	m->slot = i;
	m->task = k;
	m->task_gen = p->task_gen;
	m->pgen = p->pgen;
	gf_unlock(m);
	return 1;
}

int gf_attach(const char *path, const char *token, struct gf_map *m, char *err, size_t errlen)
{
	reset(m);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return fail(err, errlen, "open", path, errno);
	m->fd = fd;
	int rc = map_file(fd, path, m, err, errlen);
	if (rc != 0)
		goto out;
	gf_control_open(m, path, 0, NULL, 0);
	uint8_t hash[GF_HASH_LEN];
	gf_sha256(token, strlen(token), hash);
	/* Free slots first; then slots whose byte is free, which belong to dead processes. */
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < GF_PROCS; i++) {
			uint32_t st = __atomic_load_n(&m->t->procs[i].state, __ATOMIC_RELAXED);
			if ((pass == 0) != (st == GF_FREE))
				continue;
			int r = try_claim(m, i, hash);
			if (r > 0)
				return 0;
			if (r == -2) {
				if (err && errlen)
					snprintf(err, errlen, "fence state %s is locked by a live process that does not let go",
						 path);
				rc = GF_ERR_LOCKED;
				goto out;
			}
			if (r < 0) {
				if (err && errlen)
					snprintf(err, errlen, "fence state %s has no task for this reservation", path);
				rc = GF_ERR_NOTASK;
				goto out;
			}
		}
	}
	if (err && errlen)
		snprintf(err, errlen, "fence state %s has no free process slot (%d in use)", path, GF_PROCS);
	rc = -1;
out:
	gf_control_close(m);
	if (m->t)
		munmap(m->t, sizeof *m->t);
	close(fd);
	reset(m);
	return rc;
}

void gf_detach(struct gf_map *m)
{
	if (!m->t)
		return;
	/* Without the lock the slot is left to the reapers: its byte is free once the file is closed. */
	if (m->slot >= 0 && gf_lock(m) == 0) {
		if (m->t->procs[m->slot].pgen == m->pgen)
			give_back(m->t, m->slot);
		gf_test_point("detach");
		gf_unlock(m);
		gf_byte_lock(m->fd, GF_LIVE_BASE + m->slot, F_UNLCK);
	}
	gf_control_close(m);
	munmap(m->t, sizeof *m->t);
	close(m->fd);
	reset(m);
}

/* mine says whether this process still owns its slot and its task still exists. */
static int mine(const struct gf_map *m)
{
	const struct gf_table *t = m->t;
	const struct gf_proc *p = &t->procs[m->slot];
	const struct gf_task *k = &t->tasks[m->task];
	return p->state == GF_LIVE && p->pgen == m->pgen && k->state == GF_LIVE && k->gen == m->task_gen;
}

static uint64_t held(const struct gf_task *k) { return k->used > k->cap ? k->used : k->cap; }

/* committed is what every task's guarantee or use, whichever is more, covers. */
static uint64_t committed(const struct gf_table *t)
{
	uint64_t sum = 0;
	for (int i = 0; i < GF_TASKS; i++)
		if (t->tasks[i].state == GF_LIVE)
			sum += held(&t->tasks[i]);
	return sum;
}

/* lent is what task k keeps from borrowers: all it holds once armed; before that, only keep of
 * its guarantee (its contexts' memory, which the fence does not see). */
static uint64_t lent_held(const struct gf_task *k)
{
	if (k->armed)
		return held(k);
	return k->keep < k->cap ? k->keep : k->cap;
}

/* in_use is what task k takes of the GPU now: its allocations and contexts, at most its hold. */
static uint64_t in_use(const struct gf_task *k)
{
	uint64_t ctx = k->used + k->keep < k->used ? UINT64_MAX : k->used + k->keep;
	return ctx < held(k) ? ctx : held(k);
}

/* borrows says whether any task but k holds more than its guarantee. */
static int borrows(const struct gf_table *t, const struct gf_task *k)
{
	for (int i = 0; i < GF_TASKS; i++) {
		const struct gf_task *o = &t->tasks[i];
		if (o != k && o->state == GF_LIVE && o->used > o->cap)
			return 1;
	}
	return 0;
}

static int anyone_owed(const struct gf_table *t)
{
	for (int j = 0; j < GF_PROCS; j++)
		if (t->procs[j].state == GF_LIVE && t->procs[j].waiting == GF_WAIT_OWED)
			return 1;
	return 0;
}

enum { FIT = 0, PAST_LIMIT = 1, NO_ROOM = 2, OWED = 3, RECLAIM = 4 };

/* judge is the rule: a task may always reach its guarantee; past it, up to its limit, it may
 * borrow only memory that no armed task's guarantee covers and no other borrower holds.
 * Within its guarantee it gets its bytes at once unless borrowers took them while it was
 * unarmed (OWED: it waits for them); past it nothing is lent while any owner waits (RECLAIM). */
static int judge(const struct gf_table *t, const struct gf_task *k, uint64_t want)
{
	if (want <= k->cap) {
		if (t->h.budget == 0 || !borrows(t, k))
			return FIT;
		uint64_t sum = 0;
		for (int i = 0; i < GF_TASKS; i++)
			if (&t->tasks[i] != k && t->tasks[i].state == GF_LIVE)
				sum += in_use(&t->tasks[i]);
		uint64_t mine = want + k->keep < want || want + k->keep > k->cap ? k->cap : want + k->keep;
		return sum <= t->h.budget && mine <= t->h.budget - sum ? FIT : OWED;
	}
	if (want > k->limit || t->h.budget == 0)
		return PAST_LIMIT;
	if (anyone_owed(t))
		return RECLAIM;
	uint64_t others = 0;
	for (int i = 0; i < GF_TASKS; i++)
		if (&t->tasks[i] != k && t->tasks[i].state == GF_LIVE)
			others += lent_held(&t->tasks[i]);
	return others <= t->h.budget && want <= t->h.budget - others ? FIT : NO_ROOM;
}

/* anyone_waits says whether a process of a placed task waits for memory. A slot left of a task
 * that ended waits for nothing a guarantee could take: its process, if alive, finds its task
 * gone at its next look (GF_NOTASK). It counted here but not in the enforcer's snapshot, so
 * admission saw no wait while every new guarantee was refused, until a reaper came by. */
static int anyone_waits(const struct gf_table *t)
{
	for (int j = 0; j < GF_PROCS; j++) {
		const struct gf_proc *p = &t->procs[j];
		if (p->state != GF_LIVE || !p->waiting || p->task >= GF_TASKS)
			continue;
		const struct gf_task *k = &t->tasks[p->task];
		if (k->state == GF_LIVE && k->gen == p->task_gen)
			return 1;
	}
	return 0;
}

/* can_wait says whether waiting may let task slot me reach want: some other task that is not
 * waiting itself holds memory (it ends, or frees, and nothing new is placed meanwhile), and what
 * the waiting tasks hold leaves room for want. Borrowers waiting on each other, or a want that
 * only an empty GPU could hold, fail at once instead: the task is re-run with more room. */
static int can_wait(const struct gf_table *t, int me, uint64_t want)
{
	uint64_t stuck = 0;
	int movers = 0;
	for (int i = 0; i < GF_TASKS; i++) {
		const struct gf_task *k = &t->tasks[i];
		if (i == me || k->state != GF_LIVE || held(k) == 0)
			continue;
		if (k->nwait > 0)
			stuck += held(k);
		else
			movers++;
	}
	return movers > 0 && stuck <= t->h.budget && want <= t->h.budget - stuck;
}

/* A waiting allocation looks again this often: neighbours' frees come in bursts at their ends,
 * and a wait is bounded in seconds, so a millisecond's latency is nothing. */
#define GF_WAIT_POLL_NS 2000000L
/* ... and gives back the slots of dead processes (a syscall a slot) this much less often. */
#define GF_WAIT_REAP_EVERY 50

int gf_charge(struct gf_map *m, uint64_t n)
{
	if (!m->t || m->slot < 0)
		return GF_NOTASK;
	uint64_t deadline = 0;
	int owed = 0;
	for (unsigned polls = 0;; polls++) {
		if (gf_lock(m) != 0) {
			/* A wait that ends here leaves its flag set: it would freeze the GPU for as long
			 * as this process lives. It is cleared at this process's next lock. */
			m->unwait |= polls > 0;
			return GF_BUSY;
		}
		/* Its own task decides within the guarantee; every task's once borrowing is on. */
		gf_control_restore(m, m->task);
		if (m->t->h.budget != 0)
			gf_control_restore(m, -1);
		settle_pending(m);
		if (!mine(m)) {
			if (m->t->procs[m->slot].pgen == m->pgen)
				set_waiting(m->t, &m->t->procs[m->slot], GF_WAIT_NONE);
			gf_unlock(m);
			return GF_NOTASK;
		}
		struct gf_table *t = m->t;
		struct gf_task *k = &t->tasks[m->task];
		struct gf_proc *p = &t->procs[m->slot];
		gf_test_point("charge-enter");
		uint64_t want = k->used + n;
		int verdict = want < k->used ? PAST_LIMIT : judge(t, k, want);
		if (verdict == FIT) {
			set_waiting(t, p, GF_WAIT_NONE);
			k->used = want;
			/* the worst moment to die: the task's sum is raised, the process's own is not */
			gf_test_point("charge");
			p->used += n;
			p->allocs++;
			if (k->used > k->peak)
				k->peak = k->used;
			if (p->used > p->peak)
				p->peak = p->used;
			gf_unlock(m);
			return owed ? GF_OK_OWED : GF_OK;
		}
		owed |= verdict == OWED;
		uint64_t now = 0;
		if (verdict == OWED || (verdict == NO_ROOM && t->h.wait_ns > 0))
			now = gf_now_ns();
		if (now != 0 && deadline == 0)
			deadline = now + (verdict == OWED ? GF_OWED_WAIT_NS : t->h.wait_ns);
		if (now == 0 || now >= deadline || (verdict == NO_ROOM && !can_wait(t, m->task, want))) {
			set_waiting(t, p, GF_WAIT_NONE);
			k->refused++;
			p->refused++;
			gf_unlock(m);
			return GF_REFUSED;
		}
		uint32_t why = verdict == OWED ? GF_WAIT_OWED : GF_WAIT_BORROW;
		if (p->waiting != why) {
			set_waiting(t, p, why);
			if (why == GF_WAIT_OWED)
				k->owed++;
			else
				k->waits++;
		}
		gf_unlock(m);
		if (polls % GF_WAIT_REAP_EVERY == GF_WAIT_REAP_EVERY - 1)
			gf_reap(m, -1);
		struct timespec d = {0, GF_WAIT_POLL_NS};
		nanosleep(&d, NULL);
	}
}

void gf_uncharge(struct gf_map *m, uint64_t n)
{
	if (!m->t || m->slot < 0 || n == 0)
		return;
	if (gf_lock(m) != 0) {
		m->pending += n; /* given back at the next lock this process gets */
		return;
	}
	settle_pending(m);
	give_back_bytes(m, n);
	gf_unlock(m);
}

/* give_back_bytes returns n bytes of this process to its task. Called under the lock. */
static void give_back_bytes(struct gf_map *m, uint64_t n)
{
	struct gf_table *t = m->t;
	struct gf_proc *p = &t->procs[m->slot];
	if (p->state == GF_LIVE && p->pgen == m->pgen) {
		if (n > p->used) {
			t->h.underflows++;
			n = p->used;
		}
		p->used -= n;
		gf_test_point("uncharge");
		struct gf_task *k = &t->tasks[m->task];
		if (k->state == GF_LIVE && k->gen == m->task_gen) {
			if (n > k->used) {
				t->h.underflows++;
				n = k->used;
			}
			k->used -= n;
		}
	}
}

int gf_view(struct gf_map *m, uint64_t *cap, uint64_t *used)
{
	if (!m->t || m->slot < 0)
		return GF_NOTASK;
	if (gf_lock(m) != 0)
		return GF_BUSY;
	gf_test_point("view");
	gf_control_restore(m, m->task);
	int ok = mine(m);
	if (ok) {
		*cap = m->t->tasks[m->task].cap;
		*used = m->t->tasks[m->task].used;
	}
	gf_unlock(m);
	return ok ? GF_OK : GF_NOTASK;
}

int gf_reap(struct gf_map *m, int task)
{
	int n = 0;
	if (!m->t)
		return 0;
	for (int i = 0; i < GF_PROCS; i++) {
		struct gf_proc *p = &m->t->procs[i];
		if (i == m->slot || __atomic_load_n(&p->state, __ATOMIC_RELAXED) != GF_LIVE)
			continue;
		if (task >= 0 && __atomic_load_n(&p->task, __ATOMIC_RELAXED) != (uint32_t)task)
			continue;
		/* Holding the byte proves its owner is gone and keeps claimants off until it is free. */
		if (gf_byte_lock(m->fd, GF_LIVE_BASE + i, F_WRLCK) != 0)
			continue;
		if (gf_lock(m) != 0) {
			gf_byte_lock(m->fd, GF_LIVE_BASE + i, F_UNLCK);
			break;
		}
		if (p->state == GF_LIVE) {
			give_back(m->t, i);
			m->t->h.reaped++;
			n++;
			gf_test_point("reap");
		}
		gf_unlock(m);
		gf_byte_lock(m->fd, GF_LIVE_BASE + i, F_UNLCK);
	}
	return n;
}

static int find_spec(const uint8_t (*hashes)[GF_HASH_LEN], int n, const uint8_t *hash)
{
	for (int i = 0; i < n; i++)
		if (memcmp(hashes[i], hash, GF_HASH_LEN) == 0)
			return i;
	return -1;
}

/* room says whether task k may hold guarantee cap from now: a guarantee never covers memory that
 * borrowers hold, and none is placed or raised while an allocation waits for memory to come free
 * (it would take what the waiter waits for). */
static int room(const struct gf_table *t, const struct gf_task *k, uint64_t cap, int waiting)
{
	uint64_t before = k ? held(k) : 0;
	uint64_t after = k && k->used > cap ? k->used : cap;
	if (t->h.budget == 0 || after <= before)
		return 1;
	return !waiting && committed(t) - before + after <= t->h.budget;
}

int gf_set_tasks(struct gf_map *m, const struct gf_task_spec *specs, int n, uint64_t budget, uint64_t wait_ns)
{
	int placed = 0, full = 0, noroom = 0;
	if (n > GF_TASKS)
		return GF_SET_FULL;
	/* Hashed before the lock: the critical section stays a few loads and stores. */
	uint8_t hashes[GF_TASKS][GF_HASH_LEN];
	for (int s = 0; s < n; s++)
		gf_sha256(specs[s].token, strlen(specs[s].token), hashes[s]);
	if (gf_lock(m) != 0)
		return GF_SET_LOCKED;
	gf_control_restore(m, -1);
	struct gf_table *t = m->t;
	t->h.budget = budget;
	t->h.wait_ns = wait_ns;
	/* Tasks that ended leave first, so their slots serve the new ones. Processes still holding
	 * a slot of an ended task no longer match its generation and pass through unfenced; the
	 * watchdog owns them. */
	for (int i = 0; i < GF_TASKS; i++) {
		struct gf_task *k = &t->tasks[i];
		if (k->state == GF_LIVE && find_spec(hashes, n, k->token_hash) < 0) {
			uint32_t gen = k->gen + 1;
			memset(k, 0, sizeof *k);
			k->gen = gen;
		}
	}
	gf_test_point("set-tasks");
	int waiting = anyone_waits(t);
	for (int s = 0; s < n; s++) {
		int i = find_task(t, hashes[s]);
		struct gf_task *k = i >= 0 ? &t->tasks[i] : NULL;
		if (!room(t, k, specs[s].cap, waiting)) {
			noroom = 1;
			continue;
		}
		if (i < 0) {
			for (i = 0; i < GF_TASKS && t->tasks[i].state == GF_LIVE; i++)
				;
			if (i == GF_TASKS) {
				full = 1;
				continue;
			}
			k = &t->tasks[i];
			uint32_t gen = k->gen + 1;
			memset(k, 0, sizeof *k);
			k->gen = gen;
			memcpy(k->token_hash, hashes[s], GF_HASH_LEN);
			k->state = GF_LIVE;
		}
		k->cap = specs[s].cap;
		k->limit = specs[s].limit > specs[s].cap ? specs[s].limit : specs[s].cap;
		k->keep = specs[s].keep == 0 || specs[s].keep > specs[s].cap ? specs[s].cap : specs[s].keep;
		placed++;
	}
	gf_control_write(m);
	gf_unlock(m);
	if (full)
		return GF_SET_FULL;
	return noroom ? GF_SET_NOROOM : placed;
}

int gf_rebuild(struct gf_map *m)
{
	if (gf_lock(m) != 0)
		return -1;
	gf_recount(m->t);
	gf_unlock(m);
	return 0;
}

int gf_snapshot(struct gf_map *m, struct gf_table *out)
{
	if (gf_lock(m) != 0)
		return -1;
	gf_test_point("snapshot");
	memcpy(out, m->t, sizeof *out);
	gf_unlock(m);
	return 0;
}

int gf_private(const char *uuid, uint64_t cap, struct gf_map *m, char *err, size_t errlen)
{
	reset(m);
	/* By its system call: the glibc wrapper is 2.27's, newer than the preload may need. */
	int fd = (int)syscall(SYS_memfd_create, "gpufrac-unplaced", MFD_CLOEXEC);
	if (fd < 0)
		return fail(err, errlen, "create", "a private table", errno);
	if (ftruncate(fd, sizeof(struct gf_table)) != 0) {
		int e = errno;
		close(fd);
		return fail(err, errlen, "size", "a private table", e);
	}
	m->fd = fd;
	int rc = -1;
	struct gf_table *t = mmap(NULL, sizeof *t, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (t == MAP_FAILED) {
		fail(err, errlen, "map", "a private table", errno);
		goto out;
	}
	uint8_t hash[GF_HASH_LEN];
	gf_sha256("", 0, hash);
	init_table(t, uuid);
	struct gf_task *k = &t->tasks[0];
	k->gen = 1;
	k->cap = k->limit = k->keep = cap;
	memcpy(k->token_hash, hash, GF_HASH_LEN);
	k->state = GF_LIVE;
	munmap(t, sizeof *t);
	rc = map_file(fd, "a private table", m, err, errlen);
	if (rc == 0 && try_claim(m, 0, hash) > 0)
		return 0;
out:
	if (m->t)
		munmap(m->t, sizeof *m->t);
	close(fd);
	reset(m);
	return rc ? rc : -1;
}
