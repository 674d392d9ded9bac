/* The table's lock and its recovery from a holder that died (state.h says why it is built
 * this way). */
#define _GNU_SOURCE
#include "lock.h"
#include "table.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#define gf_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define gf_relax() __asm__ __volatile__("yield")
#else
#define gf_relax() ((void)0)
#endif

#ifdef GF_TESTING
void gf_test_point(const char *at)
{
	const char *s = getenv("GF_TEST_STALL"), *p = getenv("GF_TEST_PAUSE");
	int stall = s && strcmp(s, at) == 0, paused = p && strcmp(p, at) == 0;
	if (!stall && !paused)
		return;
	char msg[64];
	int n = snprintf(msg, sizeof msg, "gf-test: %s at %s\n", stall ? "stalled" : "paused", at);
	(void)!write(2, msg, (size_t)n);
	if (paused) {
		unsetenv("GF_TEST_PAUSE"); /* once: a retry passes the point again */
		raise(SIGSTOP);
		return;
	}
	for (;;)
		pause();
}
#endif

/* one_byte is an OFD lock request of the given type on the byte at. */
static struct flock one_byte(off_t at, short type)
{
	struct flock fl;
	memset(&fl, 0, sizeof fl);
	fl.l_type = type;
	fl.l_whence = SEEK_SET;
	fl.l_start = at;
	fl.l_len = 1;
	return fl;
}

int gf_byte_lock(int fd, off_t at, short type)
{
	struct flock fl = one_byte(at, type);
	return fcntl(fd, F_OFD_SETLK, &fl);
}

int gf_byte_owned(int fd, off_t at)
{
	/* Asked as a read lock, only a write lock conflicts: a read lock on a dead owner's byte, by
	 * anyone who may open the file to read it, kept it alive, and with it a dead lock holder (its
	 * task's every allocation waited a second and went on unfenced) or an exited process's
	 * charge (its task refused its own guarantee for good). */
	struct flock fl = one_byte(at, F_RDLCK);
	if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
		return -1;
	return fl.l_type != F_UNLCK;
}

/* gf_take_owner gives the map an owner index (its byte of the lock file locked for the map's
 * life) and a nonce no other map of this file drew before, before it ever takes the table's
 * lock. */
int gf_take_owner(struct gf_map *m)
{
	unsigned start = (unsigned)getpid() * 2654435761u;
	for (unsigned n = 0; n < GF_OWNERS; n++) {
		unsigned i = (start + n) % GF_OWNERS;
		if (gf_byte_lock(m->lfd, GF_OWNER_BASE + (off_t)i, F_WRLCK) != 0)
			continue;
		uint32_t nonce;
		do
			nonce = __atomic_add_fetch(&m->t->h.nonces, 1, __ATOMIC_SEQ_CST);
		while (nonce == 0);
		__atomic_store_n(&m->t->owners[i], nonce, __ATOMIC_SEQ_CST);
		m->owner = (int)i;
		m->me = (uint64_t)nonce << 32 | (i + 1);
		return 0;
	}
	return -1;
}

/* holder_dead says whether the lock word w names a map that is gone: nobody holds its owner
 * index for writing (gf_byte_owned; for this map's own index the kernel answers unlocked, and w
 * is a predecessor's), or the index's holder now drew another nonce. A holder that only took its
 * index and has not written its nonce yet reads as the dead one's successor a moment later. */
static int holder_dead(const struct gf_map *m, uint64_t w)
{
	if (w == m->me)
		return 0;
	uint32_t nonce = (uint32_t)(w >> 32), idx = (uint32_t)w - 1;
	if (idx >= GF_OWNERS)
		return 1; /* no map can hold such a word */
	int owned = gf_byte_owned(m->lfd, GF_OWNER_BASE + (off_t)idx);
	if (owned < 0)
		return 0; /* cannot tell: assume alive and keep waiting */
	if (!owned)
		return 1;
	return __atomic_load_n(&m->t->owners[idx], __ATOMIC_SEQ_CST) != nonce;
}

void gf_recount(struct gf_table *t)
{
	for (int i = 0; i < GF_TASKS; i++) {
		t->tasks[i].used = 0;
		t->tasks[i].procs = 0;
		t->tasks[i].nwait = 0;
		t->tasks[i].nowed = 0;
		t->tasks[i].ngrace = 0;
		t->tasks[i].gwant = 0;
		t->tasks[i].bwant = 0;
	}
	for (int i = 0; i < GF_PROCS; i++) {
		struct gf_proc *p = &t->procs[i];
		if (p->state != GF_LIVE || p->task >= GF_TASKS)
			continue;
		struct gf_task *k = &t->tasks[p->task];
		if (k->state != GF_LIVE || k->gen != p->task_gen)
			continue;
		k->used += p->used;
		k->procs++;
		if (gf_blocks(p->waiting))
			k->nwait++;
		if (p->waiting == GF_WAIT_OWED)
			k->nowed++;
		if (p->waiting == GF_WAIT_GRACE) {
			k->ngrace++;
			k->gwant = gf_add_sat(k->gwant, p->wanted);
		}
		if (p->waiting == GF_WAIT_BORROW)
			k->bwant = gf_add_sat(k->bwant, p->wanted);
	}
	t->h.epoch++;
	t->h.recoveries++;
}

uint64_t gf_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* taken counts one more taking of the lock, by its holder: waiters read the count without the
 * lock, so it is written whole. */
static void taken(struct gf_table *t)
{
	__atomic_store_n(&t->h.takes, __atomic_load_n(&t->h.takes, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

/* gf_lock takes the file's lock: 0, or -1 when one live holder kept it GF_LOCK_WAIT_NS (stopped
 * by SIGSTOP or a debugger, or a hostile tenant that took it to keep it): the caller then goes
 * on without the file, as where there is no fence, instead of hanging. A holder seen twice that
 * took the lock again in between did not keep it: under contention one process may win it many
 * times running, and its waiters must wait their turn, not go on unfenced. A map with its own
 * wait (the enforcer's) waits that long at most from the start, however the lock changes hands. */
int gf_lock(struct gf_map *m)
{
	uint64_t *w = &m->t->h.lock;
	uint64_t deadline = 0, last = 0, last_takes = 0, hard = m->wait_ns ? gf_now_ns() + m->wait_ns : 0;
	for (unsigned long spins = 0;; spins++) {
		uint64_t holder = 0;
		if (__atomic_compare_exchange_n(w, &holder, m->me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
			taken(m->t);
			return 0;
		}
		if (spins < 128) {
			gf_relax();
			continue;
		}
		/* Critical sections are a few stores long: a lock held this long has a holder that was
		 * descheduled, stopped or died. Ask the kernel which, now and then. */
		if (spins % 256 == 0) {
			if (holder_dead(m, holder) &&
			    __atomic_compare_exchange_n(w, &holder, m->me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
				taken(m->t);
				gf_recount(m->t);
				return 0;
			}
			uint64_t now = gf_now_ns(), takes = __atomic_load_n(&m->t->h.takes, __ATOMIC_RELAXED);
			if (hard && now >= hard)
				return -1;
			if (holder != last || takes != last_takes) {
				last = holder; /* the lock changes hands, or its holder let go and took it again */
				last_takes = takes;
				deadline = now + GF_LOCK_WAIT_NS;
			} else if (now >= deadline) {
				return -1;
			}
		}
		sched_yield();
	}
}

void gf_unlock(struct gf_map *m)
{
	__atomic_store_n(&m->t->h.lock, 0, __ATOMIC_RELEASE);
}
