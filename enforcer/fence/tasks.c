/* The enforcer's side of a table: placing the tasks' guarantees, rebuilding sums, copying the
 * table out (state.h says why the table is built this way). */
#define _GNU_SOURCE
#include "state.h"
#include "control.h"
#include "lock.h"
#include "table.h"

#include <string.h>

/* committed is what every task's guarantee or use, whichever is more, covers. */
static uint64_t committed(const struct gf_table *t)
{
	uint64_t sum = 0;
	for (int i = 0; i < GF_TASKS; i++)
		if (t->tasks[i].state == GF_LIVE)
			sum += gf_held(&t->tasks[i]);
	return sum;
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
	uint64_t before = k ? gf_held(k) : 0;
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
		int i = gf_find_task(t, hashes[s]);
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

