/* The table's lock (lock.c), for table.c, charge.c and tasks.c: internal, not part of state.h's API. */
#ifndef GPUFRAC_FENCE_LOCK_H
#define GPUFRAC_FENCE_LOCK_H

#include <stdint.h>
#include <sys/types.h>

#include "state.h"

/* gf_byte_lock takes (F_WRLCK) or drops (F_UNLCK) one byte's OFD lock without waiting. */
int gf_byte_lock(int fd, off_t at, short type);
/* gf_byte_owned says whether a live owner holds one byte of a lock file: 1, 0, or -1 when the
 * kernel cannot say. An owner holds its byte with a write lock, which only a descriptor opened
 * for writing can take (its task's processes, the enforcer's child). A read lock is no owner:
 * whoever may open the file only to read it may take read locks on any byte of it. */
int gf_byte_owned(int fd, off_t at);
/* gf_take_owner gives a new map its owner index and nonce, before it ever locks. */
int gf_take_owner(struct gf_map *m);
/* gf_lock takes the file's lock: 0, or -1 when one live holder kept it GF_LOCK_WAIT_NS (or the
 * map's own wait_ns, counted from the start). A holder that died is taken over and the task sums
 * rebuilt. */
int gf_lock(struct gf_map *m);
void gf_unlock(struct gf_map *m);
/* gf_recount rebuilds every task's sums from its processes' (a holder died mid-update, or a
 * tenant wrote a task's sum). Called under the lock. */
void gf_recount(struct gf_table *t);
uint64_t gf_now_ns(void);

#ifdef GF_TESTING
/* gf_test_point stops the process at a named point inside a critical section, so a test can
 * kill it there (GF_TEST_STALL=<point>), or stops it there until a SIGCONT, so a test can change
 * what the process will find next (GF_TEST_PAUSE=<point>). Test builds only. */
void gf_test_point(const char *at);
#else
#define gf_test_point(at) ((void)0)
#endif

#endif
