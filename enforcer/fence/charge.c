/* The allocation rules: what a process of a task may charge, what waits and for what, and the
 * task's view (state.h says why the files are built this way). An allocation charges its own
 * task's file, under that file's lock. With borrowing off it reads nothing else. With borrowing
 * on it claims before it checks: it writes its new use, then reads every other task's (peers.c)
 * and takes the claim back when the rules say no, so an owner, a borrower and the enforcer
 * placing a guarantee, racing, always see one another. Borrowers judge one at a time, under a
 * bounded flock of the control copy. */
#define _GNU_SOURCE
#include "state.h"
#include "control.h"
#include "lock.h"
#include "table.h"

#include <sys/file.h>
#include <time.h>

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
			gf_set_waiting(m->t, p, GF_WAIT_NONE);
	}
	if (m->pending > 0 && m->slot >= 0) {
		uint64_t n = m->pending;
		m->pending = 0;
		give_back_bytes(m, n);
	}
}

/* mine says whether this process still owns its slot and its task still exists. */
static int mine(const struct gf_map *m)
{
	const struct gf_table *t = m->t;
	const struct gf_proc *p = &t->procs[m->slot];
	const struct gf_task *k = &t->tasks[m->task];
	return p->state == GF_LIVE && p->pgen == m->pgen && k->state == GF_LIVE && k->gen == m->task_gen;
}

/* in_use is what task k takes of the GPU now: its allocations and contexts, at most its hold. */
static uint64_t in_use(const struct gf_task *k) { return gf_takes(k->used, k->cap, k->keep); }

/* contexts is what task k's processes' CUDA contexts take, at ctx each. */
static uint64_t contexts(const struct gf_task *k, uint64_t ctx) { return gf_contexts(k->procs, ctx); }

/* The GPU's figures the rules read, from the control copy: the budget, what a process's context
 * is taken to hold, and what the GPU holds past the budget (its headroom). A borrow must leave
 * the allocations within the budget, and every task's contexts on top of what it may hold
 * (held_whole) within budget and spare. Without the second rule a cold run's probes, each on a
 * 2 GiB guarantee, left six contexts (3 GiB) to a 2 GiB headroom in the simulator, and the
 * leaker borrowing up to the budget met the GPU's end instead of a wait. */
struct gpu {
	uint64_t budget, ctx, spare;
};

/* held_whole is what task k may come to hold of the GPU with its contexts at ctx each
 * (gf_whole). With ctx 0 it is gf_held. An owner's contexts count on top of its whole guarantee
 * even while its allocations leave room for them inside it: they may fill it. Counted only where
 * they stuck out, a borrower took the room an owner's context needed once the owner's
 * allocations grew within its guarantee, and in the simulator an innocent probe met the GPU's
 * end with 1.78 of its 2 GiB guarantee allocated (docs/bench/results.md). */
static uint64_t held_whole(const struct gf_task *k, uint64_t ctx) { return gf_whole(k->used, k->cap, k->procs, ctx); }

/* lent_held is what task k keeps from borrowers: its guarantee, or its use where that is more.
 * A task that lends (keep below its guarantee) keeps only what it takes now (in_use; the keep
 * covers the contexts the fence does not see) until its use passes its keep, which arms it: on
 * the H200 the workloads' first allocation (torch.zeros(1), a 2 MiB block) comes with their
 * CUDA context, seconds before they load a model. It keeps only that again while it waits out
 * a grace: it lets borrowers keep its guarantee for the grace, and one that still grows had
 * better finish within it than wait beside it for memory neither gets (the tie that lost the
 * H200's leaker its run, 2026-12-04). What its waits ask for (grace_ask) goes to it first where
 * it fits (judge). */
static uint64_t lent_held(const struct gf_task *k, uint64_t ctx)
{
	if (k->keep < k->cap && (!k->armed || k->ngrace > 0))
		return in_use(k); /* its keep covers its contexts */
	return held_whole(k, ctx);
}

/* grace_ask is what task k's waits out a grace ask for, within what lent_held lends of it. */
static uint64_t grace_ask(const struct gf_task *k)
{
	if (k->ngrace == 0)
		return 0;
	uint64_t lent = gf_held(k) - lent_held(k, 0);
	return k->gwant < lent ? k->gwant : lent;
}

/* arm marks task k past its keep: from now on borrowers may not use its guarantee. */
static void arm(struct gf_task *k)
{
	if (!k->armed)
		__atomic_store_n(&k->armed, 1, __ATOMIC_SEQ_CST);
}

/* borrows says whether any task but me holds more than its guarantee. */
static int borrows(const struct gf_task *v, int me)
{
	for (int i = 0; i < GF_TASKS; i++)
		if (i != me && v[i].state == GF_LIVE && v[i].used > v[i].cap)
			return 1;
	return 0;
}

/* anyone_moves says whether some task but me holds memory and waits for nothing: it computes,
 * and may end or free. Without one, an owner waiting out its grace waits for borrowers that wait
 * themselves (for memory the owners' guarantees cover, or for each other): a tie only a
 * reclaim ends. */
static int anyone_moves(const struct gf_task *v, int me)
{
	for (int i = 0; i < GF_TASKS; i++)
		if (i != me && v[i].state == GF_LIVE && v[i].used > 0 && v[i].nwait == 0 && v[i].ngrace == 0)
			return 1;
	return 0;
}

static int anyone_owed(const struct gf_task *v)
{
	for (int i = 0; i < GF_TASKS; i++)
		if (v[i].state == GF_LIVE && v[i].nowed > 0)
			return 1;
	return 0;
}

/* borrowed is what task k holds past its guarantee. */
static uint64_t borrowed(const struct gf_task *k) { return gf_past(k->used, k->cap); }

/* ahead is what task i's waiting borrows ask for where they go before a borrow of task me, which
 * held mine before it asked (else 0): the task holding less borrowed memory goes first, the
 * lower slot between equals, so two waiting borrowers never leave room for each other. A task
 * growing without pause would otherwise take each neighbour's freed memory before a waiting
 * one's next look (2 ms): on the H200 a growing leaker held two starting probes' loads up for
 * 17 s (docs/bench/results.md). An ask is believed up to what the task's limit leaves it. */
static uint64_t ahead(const struct gf_task *v, int i, int me, uint64_t mine)
{
	const struct gf_task *k = &v[i];
	uint64_t theirs = borrowed(k), own = gf_past(mine, v[me].cap);
	if (k->bwant == 0 || theirs > own || (theirs == own && i > me))
		return 0;
	uint64_t left = k->limit > k->used ? k->limit - k->used : 0;
	return k->bwant < left ? k->bwant : left;
}

/* leave sets ask aside from what a borrower may take (free_now, and room, of which it is part)
 * where it fits: its asker takes it at its next look. */
static void leave(uint64_t ask, uint64_t *free_now, uint64_t *room)
{
	if (ask > 0 && ask <= *free_now) {
		*free_now -= ask;
		*room -= ask;
	}
}

/* YIELD is NO_ROOM because what a waiting owner or borrower ahead of it asks for was set aside:
 * that one is served at its next look and moves on, so this wait is never hopeless. */
enum { FIT = 0, PAST_LIMIT = 1, NO_ROOM = 2, OWED = 3, RECLAIM = 4, STAGED = 5, YIELD = 6 };

/* judge is the rule, over every task of the GPU (v, g) for task me reaching want with an
 * allocation of n bytes: a task may always reach its guarantee; past it, up to its limit, it may
 * borrow only memory that no armed task's guarantee covers and no other borrower holds. Within
 * its guarantee it gets its bytes at once unless borrowers took them while it was unarmed (OWED:
 * it waits for them); past it nothing is lent while any owner waits (RECLAIM), and what waits
 * ahead of it is served first (YIELD). */
static int judge(const struct gf_task *v, const struct gpu *g, int me, uint64_t want, uint64_t n)
{
	uint64_t budget = g->budget;
	const struct gf_task *k = &v[me];
	if (want <= k->cap) {
		if (budget == 0 || !borrows(v, me))
			return FIT;
		uint64_t sum = 0;
		for (int i = 0; i < GF_TASKS; i++)
			if (i != me && v[i].state == GF_LIVE)
				sum += in_use(&v[i]);
		uint64_t mine = want + k->keep < want || want + k->keep > k->cap ? k->cap : want + k->keep;
		return sum <= budget && mine <= budget - sum ? FIT : OWED;
	}
	if (want > k->limit || budget == 0)
		return PAST_LIMIT;
	if (anyone_owed(v))
		return RECLAIM;
	uint64_t others = 0, whole = 0;
	for (int i = 0; i < GF_TASKS; i++)
		if (i != me && v[i].state == GF_LIVE) {
			others = gf_add_sat(others, lent_held(&v[i], 0));
			whole = gf_add_sat(whole, lent_held(&v[i], g->ctx));
		}
	/* A borrower's own contexts lie past its guarantee, which its allocations fill. */
	uint64_t gpu = gf_add_sat(budget, g->spare), own = contexts(k, g->ctx);
	if (others > budget || whole > gpu || own > gpu - whole)
		return NO_ROOM;
	/* Where guarantees are lent, borrowers leave a keep free: a new guarantee may be placed on
	 * what they hold (gf_set_tasks), and its task's contexts take that much before the fence
	 * sees them. */
	uint64_t slack = k->keep < k->cap ? k->keep : 0;
	uint64_t room = budget - others < gpu - whole - own ? budget - others : gpu - whole - own;
	uint64_t now = gf_add_sat(k->used, slack);
	uint64_t free_now = room > now ? room - now : 0;
	/* An owner waiting out its grace, then a borrower waiting ahead of this one (ahead), is
	 * served first where its ask fits beside what this task holds now. One whose ask does not
	 * fit waits for borrowers to end, and they may grow meanwhile. */
	uint64_t all = room;
	for (int i = 0; i < GF_TASKS; i++)
		if (i != me && v[i].state == GF_LIVE)
			leave(grace_ask(&v[i]), &free_now, &room);
	for (int i = 0; i < GF_TASKS; i++)
		if (i != me && v[i].state == GF_LIVE)
			leave(ahead(v, i, me, want - n), &free_now, &room);
	if (want <= room && slack <= room - want)
		return FIT;
	return want <= all && slack <= all - want ? YIELD : NO_ROOM;
}

/* beside says whether n fits beside held within limit. */
static int beside(uint64_t limit, uint64_t held, uint64_t n) { return held <= limit && n <= limit - held; }

/* can_wait says whether waiting may let task slot me (which held mine before it asked) reach
 * want: some other task that is not waiting itself holds memory (it ends, or frees, and nothing
 * new is placed meanwhile), and what the waiting tasks hold leaves room for want. Where every
 * task that holds memory waits (a tie), or what the waiting tasks hold leaves no room for want,
 * the one of them and me that has borrowed the most (the lower slot between equals) fails at
 * once and the others wait for what it frees. In a cold run every job borrows past a 2 GiB
 * guarantee, and a leaker growing while they load left ties the first waiter to look lost, a
 * loading job as often as the leaker (the simulator, 2026-12-05); on an H100 a loading probe
 * holding 15 GiB found the waiting leaker's 62 GiB left its want no room, and failed while the
 * leaker grew on into what it freed (2026-12-05). A want that only an emptier GPU could
 * hold, with nobody borrowing more, fails at once too: the task is re-run with more room. */
static int can_wait(const struct gf_task *v, const struct gpu *g, int me, uint64_t mine, uint64_t want)
{
	uint64_t stuck = 0, whole = 0, gpu = gf_add_sat(g->budget, g->spare);
	uint64_t all = gf_add_sat(want, contexts(&v[me], g->ctx));
	uint64_t most = gf_past(mine, v[me].cap);
	int movers = 0, victim = me;
	for (int i = 0; i < GF_TASKS; i++) {
		const struct gf_task *k = &v[i];
		if (i == me || k->state != GF_LIVE || gf_held(k) == 0)
			continue;
		if (k->nwait > 0) {
			stuck = gf_add_sat(stuck, gf_held(k));
			whole = gf_add_sat(whole, held_whole(k, g->ctx));
			/* only a borrower loses a tie: an owner's wait ends in a reclaim */
			if (borrowed(k) > most || (borrowed(k) == most && most > 0 && i < victim)) {
				most = borrowed(k);
				victim = i;
			}
		} else {
			movers++;
		}
	}
	if (movers > 0 && beside(g->budget, stuck, want) && beside(gpu, whole, all))
		return 1;
	if (victim == me)
		return 0;
	/* What the loser holds comes free: it fails at its next look. */
	stuck -= gf_held(&v[victim]);
	whole -= held_whole(&v[victim], g->ctx);
	return beside(g->budget, stuck, want) && beside(gpu, whole, all);
}

/* borrow_lock takes the borrowers' flock on the control copy's read-only descriptor, waiting
 * GF_BORROW_WAIT_NS at most: 0, or -1 (the borrow is refused; the kernel drops a dead holder's). */
static int borrow_lock(struct gf_map *m)
{
	uint64_t deadline = 0;
	for (;;) {
		if (flock(m->cfd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		uint64_t now = gf_now_ns();
		if (deadline == 0)
			deadline = now + GF_BORROW_WAIT_NS;
		else if (now >= deadline)
			return -1;
		struct timespec d = {0, 100000};
		nanosleep(&d, NULL);
	}
}

/* A waiting allocation looks again this often: neighbours' frees come in bursts at their ends,
 * and a wait is bounded in seconds, so a millisecond's latency is nothing. */
#define GF_WAIT_POLL_NS 2000000L
/* ... and gives back the slots of dead processes (a syscall a slot) this much less often. */
#define GF_WAIT_REAP_EVERY 50
/* A staged allocation waits for the run's next round, which comes every few hundred
 * milliseconds at most: it looks every 10 ms. */
#define GF_STAGE_POLL_NS 10000000L

/* claim moves n bytes onto this process and its task (back off with retract). Under the lock. */
static void claim(struct gf_task *k, struct gf_proc *p, uint64_t n)
{
	__atomic_store_n(&k->used, k->used + n, __ATOMIC_SEQ_CST);
	/* the worst moment to die: the task's sum is raised, the process's own is not */
	gf_test_point("charge");
	p->used += n;
}

static void retract(struct gf_task *k, struct gf_proc *p, uint64_t n)
{
	p->used -= n;
	__atomic_store_n(&k->used, k->used - n, __ATOMIC_SEQ_CST);
}

/* How long an owner waiting out its grace sees no task that could free memory before it stops
 * waiting quietly: a neighbour's end takes a moment to show (its slot is reaped, its bytes given
 * back), so a tie is believed only after this. */
#define GF_TIE_NS (1000000000ull)

/* A wait that lasts this long (or a quarter of its bound, when that is shorter) is said once in
 * the task's log: a job blocked for minutes inside an allocation must not look hung. */
#define GF_WAIT_NOTE_NS (10ull * 1000000000ull)

#pragma weak gf_wait_note

/* refusal names a refusal's cause from the verdict that ended the charge, or at_once's. */
static int refusal(int verdict, int at_once, int out_of_time, int hopeless)
{
	if (at_once != GF_WHY_NONE)
		return at_once;
	switch (verdict) {
	case PAST_LIMIT:
		return GF_WHY_LIMIT;
	case RECLAIM:
		return GF_WHY_RECLAIM;
	case OWED:
		return GF_WHY_OWED;
	case STAGED:
		return GF_WHY_STAGED;
	}
	if (hopeless)
		return GF_WHY_HOPELESS;
	return out_of_time ? GF_WHY_WAITED : GF_WHY_NO_WAIT;
}

const char *gf_why_text(int why)
{
	switch (why) {
	case GF_WHY_LIMIT:
		return "past its limit";
	case GF_WHY_NO_WAIT:
		return "no borrowable memory is free, and borrowers do not wait";
	case GF_WHY_HOPELESS:
		return "no borrowable memory is free, and waiting cannot help: every other task holding memory waits itself, or only an emptier GPU could hold it";
	case GF_WHY_WAITED:
		return "no borrowable memory came free within its wait";
	case GF_WHY_RECLAIM:
		return "an owner waits for its guarantee, which borrowers hold: nothing is lent until it is back";
	case GF_WHY_LOCKED:
		return "another borrower kept the borrowers' lock past its bound";
	case GF_WHY_UNREAD:
		return "the other tasks' use could not be read";
	case GF_WHY_OWED:
		return "its guarantee was not given back by borrowers within its wait";
	case GF_WHY_STAGED:
		return "its task was started early (staged) and its guarantee was not granted within its wait";
	}
	return "no reason recorded";
}

int gf_charge(struct gf_map *m, uint64_t n)
{
	if (!m->t || m->slot < 0)
		return GF_NOTASK;
	uint64_t deadline = 0, waited_from = 0, note_at = UINT64_MAX, grace_end = 0, tie_from = 0, staged_from = 0;
	int owed = 0, owed_looks = 0, reaped = 0, stage_noted = 0;
	struct gf_task view[GF_TASKS];
	for (unsigned polls = 0;; polls++) {
		if (gf_lock(m) != 0) {
			/* A wait that ends here leaves its flag set: it would freeze the GPU for as long
			 * as this process lives. It is cleared at this process's next lock. */
			m->unwait |= polls > 0;
			return GF_BUSY;
		}
		/* The control copy decides the task's guarantee, limit and the budget: an enforcer
		 * that died inside a write leaves it unread, and the allocation goes on unfenced. */
		if (gf_control_restore(m) != 0) {
			gf_unlock(m);
			return GF_BUSY;
		}
		settle_pending(m);
		if (!mine(m)) {
			if (m->t->procs[m->slot].pgen == m->pgen)
				gf_set_waiting(m->t, &m->t->procs[m->slot], GF_WAIT_NONE);
			gf_unlock(m);
			return GF_NOTASK;
		}
		struct gf_table *t = m->t;
		struct gf_task *k = &t->tasks[m->task];
		struct gf_proc *p = &t->procs[m->slot];
		gf_test_point("charge-enter");
		uint64_t want = k->used + n, budget = m->c ? m->budget : t->h.budget;
		struct gpu g = {budget, m->c ? m->ctx : 0, m->c ? m->spare : 0};
		/* at_once: why it is refused without a wait (GF_WHY_*), or GF_WHY_NONE. provisional:
		 * this charge armed the task, and takes that back if it is not served. */
		int verdict, claimed = 0, at_once = GF_WHY_NONE, provisional = 0;
		if (want < k->used) {
			verdict = PAST_LIMIT;
		} else if (m->stage > k->cap && want > k->cap) {
			/* Staged: what it needs past its small guarantee is granted, not borrowed. */
			verdict = STAGED;
		} else if (budget == 0 || !m->c) {
			/* Borrowing off: the task's own file says all. */
			verdict = want <= k->cap ? FIT : PAST_LIMIT;
			arm(k);
		} else if (polls > 0 && ((want > k->cap && want <= k->limit) || grace_end != 0) &&
			   gf_peers_view(m, view) == 0 && (verdict = judge(view, &g, m->task, want, n)) != FIT) {
			/* A waiting borrower, or an owner waiting out its grace, looks before it claims: a
			 * claim is seen by every task that judges meanwhile. An owner that found its
			 * guarantee short by a borrower's passing claim would be owed, which refuses every
			 * borrower on the GPU at once; a borrower that saw a waiting owner's passing arm
			 * would wait a poll for nothing. */
		} else if (want > k->cap && want <= k->limit && borrow_lock(m) != 0) {
			verdict = NO_ROOM; /* another borrower keeps the borrowers' lock: refused, never waited */
			at_once = GF_WHY_LOCKED;
		} else {
			int borrowing = want > k->cap && want <= k->limit; /* it holds the borrowers' lock */
			/* A charge that takes the task past its keep arms it, before the claim as the claim
			 * before the check: a borrower that claims meanwhile sees the whole guarantee held,
			 * or is seen by this check. Within its keep the claim alone is seen (lent_held). */
			provisional = !k->armed && want > k->keep;
			if (provisional)
				arm(k);
			claim(k, p, n);
			claimed = 1;
			if (gf_peers_view(m, view) != 0) {
				/* a guarantee holds whatever it cannot read; a borrow is refused */
				verdict = want <= k->cap ? FIT : NO_ROOM;
				at_once = GF_WHY_UNREAD;
			} else {
				verdict = judge(view, &g, m->task, want, n);
			}
			if (verdict != FIT) {
				retract(k, p, n);
				claimed = 0;
				if (provisional && k->used <= k->keep)
					__atomic_store_n(&k->armed, 0, __ATOMIC_SEQ_CST); /* still in its start-up */
			}
			if (borrowing)
				flock(m->cfd, LOCK_UN);
		}
		if (verdict == FIT) {
			gf_set_waiting(t, p, GF_WAIT_NONE);
			if (want > k->keep)
				arm(k);
			if (!claimed)
				claim(k, p, n);
			p->allocs++;
			if (k->used > k->peak)
				k->peak = k->used;
			if (p->used > p->peak)
				p->peak = p->used;
			gf_unlock(m);
			return owed ? GF_OK_OWED : GF_OK;
		}
		if (verdict == STAGED) {
			/* It waits for its task's guarantee, however long the run takes to grant it, and
			 * blocks nobody meanwhile: no borrower counts it, and no guarantee waits for it. */
			uint64_t now = gf_now_ns();
			if (staged_from == 0)
				staged_from = now;
			if (now - staged_from < GF_STAGE_WAIT_NS) {
				if (p->waiting != GF_WAIT_STAGE)
					gf_set_waiting(t, p, GF_WAIT_STAGE);
				gf_unlock(m);
				if (!stage_noted && now - staged_from >= GF_WAIT_NOTE_NS && gf_wait_note) {
					stage_noted = 1;
					gf_wait_note(m, n, now - staged_from);
				}
				struct timespec d = {0, GF_STAGE_POLL_NS};
				nanosleep(&d, NULL);
				continue;
			}
			waited_from = staged_from;
			at_once = GF_WHY_STAGED;
			reaped = 1;
		} else if (staged_from != 0) {
			staged_from = 0; /* granted: what follows is judged as any task's, from now */
			waited_from = 0;
		}
		if (verdict == OWED && !owed_looks) {
			/* Owed refuses every borrower on the GPU: look twice, a poll apart, so a borrower's
			 * claim that its own check takes back at once (claim before check) is not it. */
			owed_looks = 1;
			gf_unlock(m);
			struct timespec d = {0, GF_WAIT_POLL_NS};
			nanosleep(&d, NULL);
			continue;
		}
		if (verdict == OWED && k->keep < k->cap && m->grace_ns > 0 && !m->graced) {
			/* Borrowers hold what was lent of the guarantee in the task's start-up. For a grace,
			 * once in this process's life, it waits quietly: borrowers keep what they hold,
			 * nobody is refused, and one that ends meanwhile gives it all back and loses
			 * nothing. Meanwhile they may go on growing into its guarantee but for what it holds,
			 * its keep and what it asks (lent_held); a task not served yet also stays unarmed.
			 * Past the grace it is owed, as below. */
			uint64_t now = gf_now_ns();
			if (grace_end == 0) {
				grace_end = now + m->grace_ns;
				waited_from = now;
			}
			owed = 1; /* the driver may still be releasing what the borrowers freed */
			/* A tie that lasts GF_TIE_NS ends the grace: nothing that could free memory runs. */
			if (anyone_moves(view, m->task))
				tie_from = 0;
			else if (tie_from == 0)
				tie_from = now;
			if (now < grace_end && (tie_from == 0 || now - tie_from < GF_TIE_NS)) {
				gf_set_asking(t, p, GF_WAIT_GRACE, n);
				gf_unlock(m);
				struct timespec d = {0, GF_WAIT_POLL_NS};
				nanosleep(&d, NULL);
				continue;
			}
			m->graced = 1;
			arm(k);
		}
		owed |= verdict == OWED;
		uint64_t now = 0;
		if (verdict == OWED || ((verdict == NO_ROOM || verdict == YIELD) && t->h.wait_ns > 0))
			now = gf_now_ns();
		if (now != 0 && deadline == 0) {
			deadline = now + (verdict == OWED ? GF_OWED_WAIT_NS : t->h.wait_ns);
			waited_from = now;
			note_at = now + (deadline - now < 4 * GF_WAIT_NOTE_NS ? (deadline - now) / 4 : GF_WAIT_NOTE_NS);
		}
		int hopeless = verdict == NO_ROOM && !at_once && now != 0 && now < deadline &&
			       !can_wait(view, &g, m->task, want - n, want);
		if (at_once || now == 0 || now >= deadline || hopeless) {
			if (!reaped && !at_once) {
				/* Before a refusal, once: the dead may hold the room (an exited process's bytes
				 * stay charged until its slot is reaped), and one refusal counts once. */
				reaped = 1;
				gf_unlock(m);
				gf_reap(m, -1);
				continue;
			}
			gf_set_waiting(t, p, GF_WAIT_NONE);
			k->refused++;
			uint64_t would = want < k->used ? UINT64_MAX : want; /* a want past 2^64 wraps */
			if (would > k->asked)
				k->asked = would;
			p->refused++;
			m->why = refusal(verdict, at_once, now != 0 && now >= deadline, hopeless);
			m->waited_ns = waited_from != 0 ? gf_now_ns() - waited_from : 0;
			gf_unlock(m);
			return GF_REFUSED;
		}
		uint32_t why = verdict == OWED ? GF_WAIT_OWED : GF_WAIT_BORROW;
		if (p->waiting != why) {
			if (why == GF_WAIT_OWED)
				k->owed++;
			else
				k->waits++;
		}
		gf_set_asking(t, p, why, n);
		gf_unlock(m);
		if (now >= note_at) {
			note_at = UINT64_MAX;
			if (gf_wait_note)
				gf_wait_note(m, n, now - waited_from);
		}
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
		n = gf_lower(t, &p->used, n);
		gf_test_point("uncharge");
		struct gf_task *k = &t->tasks[m->task];
		if (k->state == GF_LIVE && k->gen == m->task_gen)
			gf_lower(t, &k->used, n);
	}
}

int gf_view(struct gf_map *m, uint64_t *cap, uint64_t *used)
{
	if (!m->t || m->slot < 0)
		return GF_NOTASK;
	if (gf_lock(m) != 0)
		return GF_BUSY;
	gf_test_point("view");
	int ok = gf_control_restore(m) == 0 && mine(m);
	if (ok) {
		/* A staged task is told the guarantee it is promised: a framework that sizes its pool
		 * from the memory it is shown at start (JAX) must not size it from the small one. */
		const struct gf_task *k = &m->t->tasks[m->task];
		*cap = m->stage > k->cap ? m->stage : k->cap;
		*used = m->t->tasks[m->task].used;
	}
	gf_unlock(m);
	return ok ? GF_OK : GF_NOTASK;
}
