/* The enforcer's side of a GPU: the control copy it alone writes, the tasks' accounting files it
 * creates for each placement and removes at each end, and one table merged from all of them for
 * the Go side (state.h says why it is built this way). */
#define _GNU_SOURCE
#include "state.h"
#include "control.h"
#include "lock.h"
#include "table.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void drop_task(struct gf_map *m)
{
	if (m->fd >= 0)
		close(m->fd);
	if (m->lfd >= 0)
		close(m->lfd);
	gf_reset(m);
}

/* What open_task found of a placed task's files: opened; none that can serve the placement (no
 * accounting file, one that is not a regular file or not a table of this layout or of another
 * generation, or no lock file for it: a fresh pair must be written); or files it could not open
 * this time (any other error), which stay as they are: the task's processes charge them. */
enum { GF_OPENED = 0, GF_OPEN_NONE = 1, GF_OPEN_LATER = -1 };

/* unopened lets slot i's files go after a failed open, e the open's errno (0: what was read is no
 * table), and says which failure it was. */
static int unopened(struct gf_map *m, int e)
{
	drop_task(m);
	return e == 0 || e == ENOENT || e == ENOTDIR || e == ELOOP || e == EINVAL ? GF_OPEN_NONE : GF_OPEN_LATER;
}

/* open_task opens slot i's accounting file and its lock file, read-only: the enforcer reads the
 * one with pread and never maps it, and only asks who holds the other's bytes (taskfile.c). gen
 * is the generation the control copy gives the placement. */
static int open_task(struct gf_gpu *g, int i, const uint8_t *hash, uint32_t gen)
{
	char file[GF_UUID_MAX + 16], path[4200], lpath[4200];
	struct gf_map *m = &g->tasks[i];
	drop_task(m);
	snprintf(file, sizeof file, "%s.fence", g->uuid);
	if (gf_account_path(g->dir, hash, file, path, sizeof path) != 0)
		return GF_OPEN_LATER;
	struct stat st;
	struct gf_header h;
	if ((m->fd = gf_open_file(path, O_RDONLY)) < 0 || fstat(m->fd, &st) != 0)
		return unopened(m, errno);
	if (gf_live_path(g->dir, hash, file, (uint64_t)st.st_ino, lpath, sizeof lpath) != 0)
		return unopened(m, ENAMETOOLONG);
	if ((m->lfd = gf_open_file(lpath, O_RDONLY)) < 0)
		return unopened(m, errno);
	ssize_t n = pread(m->fd, &h, sizeof h, 0);
	if (n < 0)
		return unopened(m, errno);
	if (n != (ssize_t)sizeof h || !gf_file_valid((struct gf_table *)&h))
		return unopened(m, 0);
	/* A file whose generation is not the published one is a placement anew that an enforcer
	 * wrote and was killed before it published: the processes of the file it replaced charge
	 * that one under the published generation, where nobody reads. Placed anew, they are told. */
	uint32_t fgen;
	off_t at = (off_t)(offsetof(struct gf_table, tasks) + (size_t)i * sizeof(struct gf_task) + offsetof(struct gf_task, gen));
	n = pread(m->fd, &fgen, sizeof fgen, at);
	if (n < 0)
		return unopened(m, errno);
	if (n == (ssize_t)sizeof fgen && fgen != gen)
		return unopened(m, 0);
	m->task = i;
	return GF_OPENED;
}

/* task_dir makes a directory of the task's, which its mount gives it: it writes the files in
 * it, never the directory (so the mode is the enforcer's). */
static int task_dir(const char *dir)
{
	return mkdir(dir, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* How many entries of a task's lock directory sweep_locks reads: an honest task has one lock file
 * per GPU it holds, and one more during a placement anew. The directory is the task's to fill,
 * and the sweep runs under the lock every GPU's sync takes: a tenant that planted a million
 * entries, or kept adding them, would stall them all. What it leaves stays in its own directory. */
#define GF_SWEEP_MAX 256

/* sweep_locks removes from the task's lock directory ldir the lock files of this GPU's earlier
 * placements, all but the one of the accounting file whose inode is keep (0: none). Their
 * processes keep what they opened. */
static void sweep_locks(struct gf_gpu *g, const char *ldir, uint64_t keep)
{
	char prefix[GF_UUID_MAX + 2], mine[64];
	int n = snprintf(prefix, sizeof prefix, "%s.", g->uuid);
	snprintf(mine, sizeof mine, "%llu.live", (unsigned long long)keep);
	DIR *d = opendir(ldir);
	if (!d)
		return;
	int seen = 0;
	for (struct dirent *e; seen < GF_SWEEP_MAX && (e = readdir(d)) != NULL; seen++) {
		size_t l = strlen(e->d_name);
		if (strncmp(e->d_name, prefix, (size_t)n) != 0 || l < 5 || strcmp(e->d_name + l - 5, ".live") != 0 ||
		    (keep != 0 && strcmp(e->d_name + n, mine) == 0))
			continue;
		unlinkat(dirfd(d), e->d_name, 0);
	}
	closedir(d);
}

/* new_task writes a fresh accounting file and its lock file for slot i, placed as k, and opens
 * them. */
static int new_task(struct gf_gpu *g, int i, const struct gf_task *k)
{
	char file[GF_UUID_MAX + 16], root[4200], dir[4200], ldir[4200];
	snprintf(file, sizeof file, "%s.fence", g->uuid);
	if (gf_account_path(g->dir, k->token_hash, NULL, dir, sizeof dir) != 0 ||
	    gf_live_path(g->dir, NULL, NULL, 0, root, sizeof root) != 0 ||
	    gf_live_path(g->dir, k->token_hash, NULL, 0, ldir, sizeof ldir) != 0)
		return -1;
	/* Private unless the enforcer's caller opened it to tasks of other users (fence.EnsureDir):
	 * a task's own directory in it reaches the task through its mount. */
	if (mkdir(root, 0700) != 0 && errno != EEXIST)
		return -1;
	uint64_t ino;
	if (task_dir(ldir) != 0 || task_dir(dir) != 0 ||
	    gf_file_create(g->dir, k->token_hash, file, g->uuid, i, k, &ino, NULL, 0) != 0)
		return -1;
	sweep_locks(g, ldir, ino);
	return open_task(g, i, k->token_hash, k->gen);
}

/* remove_task lets slot i's files go: its processes keep what they opened, and find their task
 * gone in the control copy at their next look. */
static void remove_task(struct gf_gpu *g, const uint8_t *hash)
{
	char file[GF_UUID_MAX + 16], path[4200];
	snprintf(file, sizeof file, "%s.fence", g->uuid);
	if (gf_account_path(g->dir, hash, file, path, sizeof path) == 0)
		unlink(path);
	if (gf_account_path(g->dir, hash, NULL, path, sizeof path) == 0)
		rmdir(path);
	if (gf_live_path(g->dir, hash, NULL, 0, path, sizeof path) == 0) {
		sweep_locks(g, path, 0);
		rmdir(path);
	}
}

/* claim takes the GPU for this enforcer: a write lock on a file of its own, in a directory no task
 * is given (fence.TaskMounts), so that no task can hold a lock there that refuses the next
 * enforcer. 0, GF_ERR_BUSY, or -1. */
static int claim(struct gf_gpu *g, const char *path, char *err, size_t errlen)
{
	char dir[4200], lpath[4200];
	struct stat st;
	const char *what = "create", *name = dir;
	if (gf_enforcer_path(path, 1, dir, sizeof dir) != 0 || gf_enforcer_path(path, 0, lpath, sizeof lpath) != 0) {
		if (err && errlen)
			snprintf(err, errlen, "fence state name %s is too long", path);
		return -1;
	}
	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		goto failed;
	what = "open";
	name = lpath;
	g->lfd = open(lpath, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
	if (g->lfd < 0 || fstat(g->lfd, &st) != 0)
		goto failed;
	if (!S_ISREG(st.st_mode)) {
		errno = EINVAL;
		goto failed;
	}
	what = "lock";
	if (gf_byte_lock(g->lfd, 0, F_WRLCK) == 0)
		return 0;
	if (errno == EAGAIN || errno == EACCES) {
		if (err && errlen)
			snprintf(err, errlen, "GPU %s is managed by another gpufrac process (it holds %s)", g->uuid, lpath);
		return GF_ERR_BUSY;
	}
failed:
	if (err && errlen)
		snprintf(err, errlen, "%s %s: %s", what, name, strerror(errno));
	return -1;
}

void gf_close(struct gf_gpu *g)
{
	for (int i = 0; i < GF_TASKS; i++)
		drop_task(&g->tasks[i]);
	free(g->scratch);
	g->scratch = NULL;
	if (g->shared)
		munmap(g->shared, sizeof *g->shared);
	g->shared = NULL;
	if (g->c)
		munmap(g->c, sizeof *g->c);
	if (g->cfd >= 0)
		close(g->cfd);
	if (g->lfd >= 0)
		close(g->lfd);
	g->c = NULL;
	g->cfd = -1;
	g->lfd = -1;
}

int gf_create(const char *path, const char *uuid, uint64_t total, uint64_t budget, struct gf_gpu *g,
	      char *err, size_t errlen)
{
	memset(g, 0, sizeof *g);
	g->cfd = -1;
	g->lfd = -1;
	for (int i = 0; i < GF_TASKS; i++)
		gf_reset(&g->tasks[i]);
	char file[GF_UUID_MAX + 16], cpath[4200];
	snprintf(g->uuid, sizeof g->uuid, "%s", uuid);
	if (gf_split_name(path, g->dir, sizeof g->dir, file, sizeof file) != 0 ||
	    gf_control_path(path, cpath, sizeof cpath) != 0) {
		if (err && errlen)
			snprintf(err, errlen, "fence state name %s is too long", path);
		return -1;
	}
	g->scratch = calloc(2, sizeof *g->scratch);
	void *shared = mmap(NULL, sizeof *g->shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	g->shared = shared == MAP_FAILED ? NULL : shared;
	if (!g->scratch || !g->shared) {
		if (err && errlen)
			snprintf(err, errlen, "fence state %s: no memory to read the tasks' files", path);
		gf_close(g);
		return -1;
	}
	int rc = claim(g, path, err, errlen);
	if (rc == 0)
		rc = gf_control_create(g, cpath, err, errlen);
	if (rc != 0) {
		gf_close(g);
		return rc;
	}
	struct gf_control *c = g->c;
	gf_control_begin(c);
	c->total = total;
	gf_test_point("create");
	c->budget = budget;
	gf_control_end(c);
	/* The tasks a previous enforcer placed stay until SetTasks says otherwise. */
	for (int i = 0; i < GF_TASKS; i++)
		if (c->tasks[i].state == GF_LIVE)
			open_task(g, i, c->tasks[i].token_hash, c->tasks[i].gen);
	return 0;
}

/* file_use reads what slot i's file says its task allocates (0 without a readable file),
 * believed up to its limit (its guarantee where it may not borrow), as the other tasks' rules
 * believe it (gf_peers_view): a task writes its own file, and a use written past all it may
 * hold would keep every new guarantee off the GPU. */
static uint64_t file_use(const struct gf_gpu *g, const struct gf_control *c, int i, int *armed, uint64_t *procs)
{
	const struct gf_control_task *k = &c->tasks[i];
	uint64_t most = k->limit > k->cap ? k->limit : k->cap, used = gf_file_used(g, i, armed, procs);
	return used < most ? used : most;
}

/* used_of is file_use with how many processes the task's contexts are counted through (*procs,
 * gf_counted). */
static uint64_t used_of(const struct gf_gpu *g, const struct gf_control *c, int i, uint64_t *procs)
{
	int armed;
	uint64_t used = file_use(g, c, i, &armed, procs);
	*procs = gf_counted(*procs, c->tasks[i].seen);
	return used;
}

static uint64_t max64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* committed sums, with one read of each file, what every task's guarantee or use, whichever is
 * more, covers (*alloc), that with every task's contexts on top (*whole, gf_whole: charge.c's
 * sum), and what tasks hold past their guarantees (*borrowed). */
static void committed(const struct gf_gpu *g, const struct gf_control *c, uint64_t *alloc, uint64_t *whole, uint64_t *borrowed)
{
	*alloc = *whole = *borrowed = 0;
	for (int i = 0; i < GF_TASKS; i++)
		if (c->tasks[i].state == GF_LIVE) {
			uint64_t procs, a = used_of(g, c, i, &procs), cap = c->tasks[i].cap;
			*alloc = gf_add_sat(*alloc, max64(a, cap));
			*whole = gf_add_sat(*whole, gf_whole(a, cap, procs, c->ctx));
			*borrowed = gf_add_sat(*borrowed, gf_past(a, cap));
		}
}

/* taken is what the tasks take of the GPU now, where guarantees are lent: an armed task (its use
 * passed its keep) its guarantee or use, whichever is more; one that is not, its use and its
 * keep (the rest of its guarantee borrowers may hold, and give back when it allocates more).
 * guarantees is the sum of the guarantees alone. A task whose keep is its guarantee lends
 * nothing: its guarantee counts whole, as in committed. A task waiting out a grace counts whole
 * here though borrowers may grow into it meanwhile (charge.c): nothing new is placed on it. */
static void taken(const struct gf_gpu *g, const struct gf_control *c, uint64_t *now, uint64_t *guarantees)
{
	*now = *guarantees = 0;
	for (int i = 0; i < GF_TASKS; i++) {
		const struct gf_control_task *k = &c->tasks[i];
		if (k->state != GF_LIVE)
			continue;
		int armed;
		uint64_t procs, u = file_use(g, c, i, &armed, &procs);
		/* A task writes its own use: a sum that wrapped would place a guarantee on anything. */
		*now = gf_add_sat(*now, armed || k->sealed ? max64(u, k->cap) : gf_takes(u, k->cap, k->keep));
		*guarantees = gf_add_sat(*guarantees, k->cap);
	}
}

/* over says whether the tasks of c do not fit the budget: their guarantees together, or what
 * they take now (taken). Without lending that is committed. */
static int over(const struct gf_gpu *g, const struct gf_control *c)
{
	uint64_t now, guarantees;
	taken(g, c, &now, &guarantees);
	return now > c->budget || guarantees > c->budget;
}

/* anyone_waits says whether a process of a placed task waits for memory (a staged task's wait
 * waits for its own guarantee, which this is to grant: not counted). A slot left of a task
 * that ended waits for nothing a guarantee could take: its process, if alive, finds its task
 * gone at its next look (GF_NOTASK). Nor does a task the enforcer no longer heeds: its waits
 * outlasted every bound an honest one keeps. */
static int anyone_waits(const struct gf_gpu *g, const struct gf_control *c)
{
	const struct gf_proc *procs = g->scratch[0].procs;
	for (int i = 0; i < GF_TASKS; i++) {
		int n = c->tasks[i].state == GF_LIVE && !c->tasks[i].unheeded ? gf_file_view(g, i, &g->scratch[0]) : -1;
		for (int j = 0; j < n; j++) {
			const struct gf_proc *p = &procs[j];
			if (p->state == GF_LIVE && p->waiting && p->waiting != GF_WAIT_STAGE && p->task == (uint32_t)i && p->task_gen == c->tasks[i].gen)
				return 1;
		}
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

static int find_slot(const struct gf_control *c, const uint8_t *hash)
{
	for (int i = 0; i < GF_TASKS; i++)
		if (c->tasks[i].state == GF_LIVE && memcmp(c->tasks[i].token_hash, hash, GF_HASH_LEN) == 0)
			return i;
	return -1;
}

/* fits says whether a sum of what the tasks hold (all) stays within limit when one task's part of
 * it goes from before to after. */
static int fits(uint64_t all, uint64_t before, uint64_t after, uint64_t limit)
{
	return all >= before && all - before + after <= limit && all - before + after >= after;
}

/* room says whether slot i (-1: a new one) may hold guarantee cap from now: a guarantee never
 * covers memory that borrowers hold, and none is placed or raised while an allocation waits for
 * memory to come free (it would take what the waiter waits for). A new task whose guarantee is
 * lent (keep below cap) is the exception where nothing waits: it may be placed on what borrowers
 * hold, which they keep until its use passes its keep (charge.c), when all the guarantees fit
 * the budget and its keep fits beside what the tasks take now. A borrower that grows may end
 * before the new task loads anything; one that waits is stuck already, and a guarantee placed on
 * its memory would only make it wait longer and then be reclaimed (the busy queue, simulated,
 * 2026-12-04: its leaker waited 118 s, then lost its run to two owners placed beside it). */
static int room(const struct gf_gpu *g, const struct gf_control *c, int i, uint64_t cap, uint64_t keep, int waiting)
{
	if (c->budget == 0)
		return 1;
	if (i < 0 && keep < cap && !waiting) {
		uint64_t now, guarantees;
		taken(g, c, &now, &guarantees);
		return guarantees <= c->budget && cap <= c->budget - guarantees && now <= c->budget && keep <= c->budget - now;
	}
	uint64_t used = 0, procs = 0, old = i >= 0 ? c->tasks[i].cap : 0;
	if (i >= 0)
		used = used_of(g, c, i, &procs);
	if (i >= 0 && max64(used, cap) <= max64(used, old))
		return 1; /* it covers no more than it holds */
	if (waiting)
		return 0;
	uint64_t all_alloc, all_whole, borrowed;
	committed(g, c, &all_alloc, &all_whole, &borrowed);
	if (!fits(all_alloc, i >= 0 ? max64(used, old) : 0, max64(used, cap), c->budget))
		return 0;
	/* With its contexts: a new task's part counts its first process's. Where nobody borrows,
	 * guarantees' contexts past the spare are the headroom policy's to answer (admission placed
	 * them); where someone does, the borrower holds what they need, and nothing is placed on it. */
	if (borrowed - gf_past(used, old) + gf_past(used, cap) == 0)
		return 1;
	return fits(all_whole, i >= 0 ? gf_whole(used, old, procs, c->ctx) : 0, gf_whole(used, cap, procs, c->ctx),
		    gf_add_sat(c->budget, c->spare));
}

/* publish makes next the control copy, whole or not at all to every reader. */
static void publish(struct gf_control *c, const struct gf_control *next)
{
	gf_control_begin(c);
	gf_test_point("set-tasks");
	c->budget = next->budget;
	c->wait_ns = next->wait_ns;
	c->ctx = next->ctx;
	c->spare = next->spare;
	memcpy(c->tasks, next->tasks, sizeof c->tasks);
	gf_control_end(c);
}

int gf_set_tasks(struct gf_gpu *g, const struct gf_task_spec *specs, int n, uint64_t budget, uint64_t wait_ns,
		 uint64_t ctx, uint64_t spare)
{
	int placed = 0, full = 0, noroom = 0, nofile = 0;
	if (n > GF_TASKS)
		return GF_SET_FULL;
	uint8_t hashes[GF_TASKS][GF_HASH_LEN];
	for (int s = 0; s < n; s++)
		gf_sha256(specs[s].token, strlen(specs[s].token), hashes[s]);
	struct gf_control *c = g->c, next = *c;
	struct gf_control_task gone[GF_TASKS];
	int ngone = 0;
	uint64_t before[GF_TASKS];
	int changed[GF_TASKS] = {0};
	next.budget = budget;
	next.wait_ns = wait_ns;
	next.ctx = ctx;
	next.spare = spare;
	/* Tasks that ended leave first, so their slots serve the new ones. */
	for (int i = 0; i < GF_TASKS; i++) {
		struct gf_control_task *k = &next.tasks[i];
		before[i] = k->state == GF_LIVE ? k->cap : 0;
		if (k->state == GF_LIVE && find_spec(hashes, n, k->token_hash) < 0) {
			gone[ngone++] = *k;
			uint32_t gen = k->gen + 1;
			memset(k, 0, sizeof *k);
			k->gen = gen;
			drop_task(&g->tasks[i]);
		}
	}
	/* Whether the enforcer heeds a task's waits holds placed or not, and before they are read
	 * here: a wait it stopped heeding keeps no guarantee off the GPU from this call on. A seal
	 * holds placed or not too: a sealed task takes its whole guarantee in the room below. */
	for (int s = 0; s < n; s++) {
		int i = find_slot(&next, hashes[s]);
		if (i >= 0) {
			next.tasks[i].unheeded = specs[s].unheeded != 0;
			next.tasks[i].sealed = specs[s].sealed != 0;
			next.tasks[i].unseen = specs[s].unseen;
		}
	}
	int waiting = anyone_waits(g, &next);
	for (int s = 0; s < n; s++) {
		int i = find_slot(&next, hashes[s]);
		if (i >= 0)
			next.tasks[i].seen = specs[s].seen; /* what the enforcer saw holds, placed or not */
		uint64_t keep = specs[s].keep == 0 || specs[s].keep > specs[s].cap ? specs[s].cap : specs[s].keep;
		/* A staged start is placed beside a wait: it holds no more than its contexts take, and
		 * its grant (a raise, judged like any) waits. */
		int staged = specs[s].stage > specs[s].cap;
		if (!room(g, &next, i, specs[s].cap, keep, waiting && !staged)) {
			noroom = 1;
			continue;
		}
		struct gf_control_task *k;
		int fresh_file = i < 0;
		if (i < 0) {
			for (i = 0; i < GF_TASKS && next.tasks[i].state == GF_LIVE; i++)
				;
			if (i == GF_TASKS) {
				full = 1;
				continue;
			}
			k = &next.tasks[i];
			uint32_t gen = k->gen + 1;
			memset(k, 0, sizeof *k);
			k->gen = gen;
			memcpy(k->token_hash, hashes[s], GF_HASH_LEN);
			k->state = GF_LIVE;
			before[i] = 0;
			drop_task(&g->tasks[i]);
		}
		k = &next.tasks[i];
		k->cap = specs[s].cap;
		k->limit = specs[s].limit > specs[s].cap ? specs[s].limit : specs[s].cap;
		k->keep = keep;
		k->grace_ns = k->keep < k->cap ? specs[s].grace_ns : 0;
		k->stage = specs[s].stage > k->cap ? specs[s].stage : 0;
		k->seen = specs[s].seen;
		k->unheeded = specs[s].unheeded != 0;
		k->sealed = specs[s].sealed != 0;
		k->unseen = specs[s].unseen;
		changed[i] = k->cap > before[i];
		/* A task placed anew gets a fresh file before any process can find it in the control
		 * copy (a container that still holds a mount of an ended task's cannot reach it); one
		 * whose file this enforcer has not opened yet (a previous one placed it) keeps its own,
		 * and one whose file it cannot open this time stays as it is, its file opened at a later
		 * write (fence.Table.Verify asks for one): its processes charge it, and a fresh file
		 * would leave them charging where nobody reads. */
		int found = fresh_file ? GF_OPEN_NONE : g->tasks[i].fd >= 0 ? GF_OPENED : open_task(g, i, k->token_hash, k->gen);
		if (found == GF_OPEN_NONE && !fresh_file) {
			/* A fresh file for a task that was placed: a placement anew. Processes that hold
			 * the file it replaces find their placement gone at their next charge (and say so)
			 * instead of charging where the enforcer no longer reads, and the other tasks'
			 * processes, which keep a descriptor of each task's file by generation (peers.c),
			 * open the new one. */
			k->gen++;
		}
		if (found == GF_OPEN_NONE) {
			struct gf_task fresh;
			memset(&fresh, 0, sizeof fresh);
			fresh.state = GF_LIVE;
			fresh.gen = k->gen;
			fresh.cap = k->cap;
			fresh.limit = k->limit;
			fresh.keep = k->keep;
			fresh.stage = k->stage;
			fresh.seen = k->seen;
			memcpy(fresh.token_hash, k->token_hash, GF_HASH_LEN);
			if (new_task(g, i, &fresh) != 0) {
				/* No file: the task's processes run under the watchdog alone. Why is kept
				 * for the caller: a full disk is not a full table. */
				g->file_errno = errno ? errno : EIO;
				struct gf_control_task *bad = &next.tasks[i];
				uint32_t gen = bad->gen + 1;
				memset(bad, 0, sizeof *bad);
				bad->gen = gen;
				nofile = 1;
				continue;
			}
			gf_test_point("task-file");
		}
		placed++;
	}
	publish(c, &next);
	/* Claimed, now checked: a borrower that claimed before this copy was out has been read
	 * by the check, or read the copy itself (charge.c). A new or raised guarantee that now
	 * covers a borrower's memory goes back. */
	if (budget != 0) {
		int retracted = 0;
		for (int i = GF_TASKS - 1; i >= 0 && over(g, &next); i--) {
			if (!changed[i])
				continue;
			struct gf_control_task *k = &next.tasks[i];
			if (before[i] == 0) {
				gone[ngone++] = *k;
				uint32_t gen = k->gen + 1;
				memset(k, 0, sizeof *k);
				k->gen = gen;
				drop_task(&g->tasks[i]);
			} else {
				k->cap = before[i];
				if (k->keep > k->cap)
					k->keep = k->cap;
			}
			placed--;
			retracted = noroom = 1;
		}
		if (retracted)
			publish(c, &next);
	}
	for (int i = 0; i < ngone; i++)
		if (find_slot(&next, gone[i].token_hash) < 0)
			remove_task(g, gone[i].token_hash);
	if (full)
		return GF_SET_FULL;
	if (nofile)
		return GF_SET_NOFILE;
	return noroom ? GF_SET_NOROOM : placed;
}

int gf_rebuild(struct gf_gpu *g)
{
	int rc = 0;
	for (int i = 0; i < GF_TASKS; i++)
		if (g->tasks[i].fd >= 0 && gf_file_rebuild(g, i) != 0)
			rc = -1;
	return rc;
}

int gf_reap_all(struct gf_gpu *g)
{
	int n = 0;
	for (int i = 0; i < GF_TASKS; i++)
		if (g->tasks[i].fd >= 0)
			n += gf_file_reap(g, i);
	return n;
}

/* merge adds slot i's file, as read with its first nprocs process slots, to out. */
static void merge(const struct gf_table *t, int i, int nprocs, struct gf_table *out, int *np)
{
	const struct gf_task *f = &t->tasks[i];
	struct gf_task *k = &out->tasks[i];
	k->used = f->used;
	k->peak = f->peak;
	k->refused = f->refused;
	k->asked = f->asked;
	k->procs = f->procs;
	k->waits = f->waits;
	k->armed = f->armed;
	k->owed = f->owed;
	k->nwait = f->nwait;
	k->nowed = f->nowed;
	k->ngrace = f->ngrace;
	k->gwant = f->gwant;
	k->bwant = f->bwant;
	out->h.recoveries += t->h.recoveries;
	out->h.underflows += t->h.underflows;
	out->h.reaped += t->h.reaped;
	/* Only the processes of its own slot: a task writes its own file, and a process it made up
	 * there for another slot names nobody else. */
	for (int j = 0; j < nprocs && *np < GF_PROCS; j++) {
		const struct gf_proc *p = &t->procs[j];
		if (p->state == GF_LIVE && p->task == (uint32_t)i && p->task_gen == k->gen)
			out->procs[(*np)++] = *p;
	}
}

int gf_snapshot(struct gf_gpu *g, struct gf_table *out)
{
	struct gf_control c;
	if (gf_control_read(g->c, &c) != 0)
		return -1;
	memset(out, 0, sizeof *out);
	out->h.magic = GF_MAGIC;
	out->h.version = GF_VERSION;
	out->h.total = c.total;
	out->h.budget = c.budget;
	out->h.wait_ns = c.wait_ns;
	out->h.ctx = c.ctx;
	out->h.spare = c.spare;
	out->h.recoveries = c.recoveries;
	snprintf(out->h.uuid, sizeof out->h.uuid, "%s", g->uuid);
	int np = 0;
	for (int i = 0; i < GF_TASKS; i++) {
		const struct gf_control_task *ck = &c.tasks[i];
		struct gf_task *k = &out->tasks[i];
		k->gen = ck->gen;
		if (ck->state != GF_LIVE)
			continue;
		k->state = GF_LIVE;
		k->cap = ck->cap;
		k->limit = ck->limit;
		k->keep = ck->keep;
		k->stage = ck->stage;
		k->seen = ck->seen;
		k->unheeded = ck->unheeded;
		k->sealed = ck->sealed;
		k->unseen = ck->unseen;
		memcpy(k->token_hash, ck->token_hash, GF_HASH_LEN);
		if (g->tasks[i].fd < 0) {
			k->unlocked = GF_READ_UNOPENED;
			continue;
		}
		/* Settled for a moment; past it, as it is: a task that keeps its own lock gets a
		 * reading that may be mid-update, of itself only. One that cut its file or wrote
		 * garbage over it gets nothing counted, and is named for it (fence.Table.Verify). */
		int nprocs = 0;
		k->unlocked = (uint64_t)gf_file_read(g, i, &g->scratch[0], &nprocs);
		if (k->unlocked != GF_READ_BAD)
			merge(&g->scratch[0], i, nprocs, out, &np);
	}
	return 0;
}
