/* A task's accounting file and its process slots: creating and mapping it, claiming a slot for a
 * process and giving it back, and the private table of a process no task places (state.h says
 * why it is built this way). */
#define _GNU_SOURCE
#include "state.h"
#include "control.h"
#include "lock.h"
#include "table.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* move_count keeps a task's count of processes in one kind of wait as one process leaves it
 * (was) or enters it (is). */
static void move_count(uint64_t *n, int was, int is)
{
	if (was == is)
		return;
	if (is)
		(*n)++;
	else if (*n > 0)
		(*n)--;
}

/* live_task is p's task while it is the one p was claimed for, or NULL. */
static struct gf_task *live_task(struct gf_table *t, const struct gf_proc *p)
{
	struct gf_task *k = p->task < GF_TASKS ? &t->tasks[p->task] : NULL;
	return k && k->state == GF_LIVE && k->gen == p->task_gen ? k : NULL;
}

/* asks is the sum of task k's asks that a process waiting for why adds to: gwant for a grace,
 * bwant for a borrow, none for the other waits. */
static uint64_t *asks(struct gf_task *k, uint32_t why)
{
	if (!k)
		return NULL;
	if (why == GF_WAIT_GRACE)
		return &k->gwant;
	return why == GF_WAIT_BORROW ? &k->bwant : NULL;
}

/* set_wanted makes n what p's wait asks for, in its task's sum for that wait too. An owed wait's
 * ask is in no sum: the enforcer reads it off the slot, to judge whether the GPU really lacks
 * what the owner waits for before it stops a borrower (a task writes its own file). */
static void set_wanted(struct gf_table *t, struct gf_proc *p, uint64_t n)
{
	uint64_t *sum = asks(live_task(t, p), p->waiting);
	if (sum) {
		*sum -= p->wanted < *sum ? p->wanted : *sum;
		*sum = gf_add_sat(*sum, n);
	}
	p->wanted = sum || p->waiting == GF_WAIT_OWED ? n : 0;
}

void gf_set_waiting(struct gf_table *t, struct gf_proc *p, uint32_t why)
{
	struct gf_task *k = live_task(t, p);
	if (k) {
		move_count(&k->nwait, gf_blocks(p->waiting), gf_blocks(why));
		move_count(&k->nowed, p->waiting == GF_WAIT_OWED, why == GF_WAIT_OWED);
		move_count(&k->ngrace, p->waiting == GF_WAIT_GRACE, why == GF_WAIT_GRACE);
	}
	if (why != p->waiting)
		set_wanted(t, p, 0);
	p->waiting = why;
}

void gf_set_asking(struct gf_table *t, struct gf_proc *p, uint32_t why, uint64_t n)
{
	gf_set_waiting(t, p, why);
	if (p->wanted != n)
		set_wanted(t, p, n);
}

void gf_give_back(struct gf_table *t, int i)
{
	struct gf_proc *p = &t->procs[i];
	if (p->state != GF_LIVE)
		return;
	struct gf_task *k = live_task(t, p);
	if (k) {
		gf_lower(t, &k->used, p->used);
		if (k->procs > 0)
			k->procs--;
	}
	gf_set_waiting(t, p, GF_WAIT_NONE);
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

int gf_map_file(int fd, const char *path, struct gf_map *m, char *err, size_t errlen)
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

void gf_reset(struct gf_map *m)
{
	memset(m, 0, sizeof *m);
	m->fd = -1;
	m->lfd = -1;
	m->cfd = -1;
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

/* fresh_file creates a new file named tmp ("<path>.new.<pid>"), mode 0666: tasks run as other
 * users than the enforcer, and their own files must be theirs to write. The directory is the
 * task's to write: whatever it left under that name goes, and the file is made new, never opened
 * through a link it planted. */
static int fresh_file(const char *path, char *tmp, size_t n, char *err, size_t errlen)
{
	if (snprintf(tmp, n, "%s.new.%d", path, (int)getpid()) >= (int)n)
		return fail(err, errlen, "create", path, ENAMETOOLONG);
	unlink(tmp);
	int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
	if (fd < 0)
		return fail(err, errlen, "create", tmp, errno);
	if (fchmod(fd, 0666) != 0) {
		int e = errno;
		close(fd);
		unlink(tmp);
		return fail(err, errlen, "create", tmp, e);
	}
	return fd;
}

/* into_place renames tmp to path, over any file of an earlier placement, whose processes keep
 * the one they opened. */
static int into_place(const char *tmp, const char *path, char *err, size_t errlen)
{
	if (rename(tmp, path) != 0) {
		int e = errno;
		unlink(tmp);
		return fail(err, errlen, "create", path, e);
	}
	return 0;
}

static int live_create(const char *path, char *err, size_t errlen)
{
	char tmp[4200];
	int fd = fresh_file(path, tmp, sizeof tmp, err, errlen);
	if (fd < 0)
		return -1;
	close(fd);
	return into_place(tmp, path, err, errlen);
}

int gf_file_create(const char *dir, const uint8_t *hash, const char *file, const char *uuid, int i,
		   const struct gf_task *k, uint64_t *ino, char *err, size_t errlen)
{
	char path[4200], tmp[4200], lpath[4200];
	if (gf_account_path(dir, hash, file, path, sizeof path) != 0)
		return fail(err, errlen, "create", file, ENAMETOOLONG);
	int fd = fresh_file(path, tmp, sizeof tmp, err, errlen);
	if (fd < 0)
		return -1;
	/* The lock file is named for the new file's inode and is in place before the file: a
	 * process that opens the file finds its lock file (gf_attach). */
	struct stat st;
	int e = fstat(fd, &st) != 0 ? errno : 0;
	if (e == 0 && gf_live_path(dir, hash, file, (uint64_t)st.st_ino, lpath, sizeof lpath) != 0)
		e = ENAMETOOLONG;
	if (e != 0 || live_create(lpath, err, errlen) != 0) {
		close(fd);
		unlink(tmp);
		return e != 0 ? fail(err, errlen, "create", tmp, e) : -1;
	}
	*ino = (uint64_t)st.st_ino;
	/* Written, never mapped: the file is in the task's directory, and a task that cut it
	 * while it was being written would fault a mapping of the enforcer's (taskfile.c). */
	struct gf_table *t = calloc(1, sizeof *t);
	int rc = t ? 0 : -1;
	e = ENOMEM;
	if (t) {
		init_table(t, uuid);
		t->tasks[i] = *k;
	}
	if (rc == 0) {
		ssize_t w = pwrite(fd, t, sizeof *t, 0);
		if (w != (ssize_t)sizeof *t) {
			e = w < 0 ? errno : EIO;
			rc = -1;
		}
	}
	free(t);
	close(fd);
	if (rc != 0) {
		unlink(tmp);
		unlink(lpath);
		return fail(err, errlen, "create", tmp, e);
	}
	if (into_place(tmp, path, err, errlen) != 0) {
		unlink(lpath);
		return -1;
	}
	return 0;
}

int gf_find_task(const struct gf_table *t, const uint8_t *hash)
{
	for (int i = 0; i < GF_TASKS; i++)
		if (t->tasks[i].state == GF_LIVE && memcmp(t->tasks[i].token_hash, hash, GF_HASH_LEN) == 0)
			return i;
	return -1;
}

/* another_placement says whether slot k of m's file holds another generation of the task than
 * the control copy's slot k, which names the task (hash): the enforcer writes a placement's
 * generation into its file before it publishes the placement, and every restore keeps the two
 * equal after. Called under the lock, before a restore writes the copy's over the file's. */
static int another_placement(const struct gf_map *m, int k, const uint8_t *hash)
{
	struct gf_control_task ck;
	uint64_t budget, wait_ns, ctx, spare;
	if (!m->c || k < 0 || k >= GF_TASKS || gf_control_task(m->c, k, &ck, &budget, &wait_ns, &ctx, &spare) != 0)
		return 0;
	return ck.state == GF_LIVE && memcmp(ck.token_hash, hash, GF_HASH_LEN) == 0 && ck.gen != m->t->tasks[k].gen;
}

/* try_claim takes slot i if its byte is free (a free slot, or one whose owner died): 1, or 0
 * (the byte is held), -1 (the task is not in slot m->task of the control copy), -2 (the lock
 * was kept), -3 (strict: the file is of another placement of the task than the control copy's,
 * one the enforcer wrote and has not published yet, or one it replaced). */
static int try_claim(struct gf_map *m, int i, const uint8_t *hash, int strict)
{
	if (gf_byte_lock(m->lfd, GF_LIVE_BASE + i, F_WRLCK) != 0)
		return 0;
	if (gf_lock(m) != 0) {
		gf_byte_lock(m->lfd, GF_LIVE_BASE + i, F_UNLCK);
		return -2;
	}
	struct gf_table *t = m->t;
	gf_test_point("claim");
	int k = m->task;
	/* A slot claimed under the control copy's earlier generation would be lost to this process
	 * at its first charge after the enforcer publishes the placement whose file this is. */
	int rc = strict && another_placement(m, k, hash) ? -3 : 0;
	if (rc != 0 || gf_control_restore(m) != 0 || gf_find_task(t, hash) != k) {
		gf_unlock(m);
		gf_byte_lock(m->lfd, GF_LIVE_BASE + i, F_UNLCK);
		return rc != 0 ? rc : -1;
	}
	if (t->procs[i].state == GF_LIVE) {
		gf_give_back(t, i); /* its owner died: the byte was free */
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
	/* The task is armed by its first charge (charge.c), not here: an owner whose lent guarantee
	 * borrowers still hold waits unarmed for a grace. */
	m->slot = i;
	m->task_gen = p->task_gen;
	m->pgen = p->pgen;
	gf_unlock(m);
	return 1;
}

/* control_slot is the live slot of the control copy whose token hash is hash, or -1, and the
 * generation of its placement there (*gen). */
static int control_slot(const struct gf_map *m, const uint8_t *hash, uint32_t *gen)
{
	struct gf_control c;
	if (gf_control_read(m->c, &c) != 0)
		return -1;
	for (int i = 0; i < GF_TASKS; i++)
		if (c.tasks[i].state == GF_LIVE && memcmp(c.tasks[i].token_hash, hash, GF_HASH_LEN) == 0) {
			*gen = c.tasks[i].gen;
			return i;
		}
	return -1;
}

/* placed says whether the accounting file whose status is opened (as fstat gave it once it was
 * opened) is still the one at path: the enforcer renames a new placement's file into place
 * before its control copy says so. */
static int placed(const struct stat *opened, const char *path)
{
	struct stat now;
	return stat(path, &now) == 0 && now.st_dev == opened->st_dev && now.st_ino == opened->st_ino;
}

/* attach_once is one try of gf_attach: 1 when a later placement of the task came meanwhile (the
 * slot it claimed is in a file that placement replaced, or the control copy's slot it started
 * from is no longer the task's), 2 when, strict, the file and the control copy are of two
 * placements (try_claim); m is then empty, and the caller tries again. */
static int attach_once(const char *path, const uint8_t *hash, struct gf_map *m, int strict, char *err,
		       size_t errlen)
{
	gf_reset(m);
	char dir[4096], file[GF_UUID_MAX + 16], cpath[4200], apath[4200], lpath[4200];
	if (gf_split_name(path, dir, sizeof dir, file, sizeof file) != 0 || gf_control_path(path, cpath, sizeof cpath) != 0 ||
	    gf_account_path(dir, hash, file, apath, sizeof apath) != 0)
		return fail(err, errlen, "name", path, ENAMETOOLONG);
	int rc = gf_control_open(m, cpath, err, errlen);
	if (rc != 0)
		return rc;
	uint32_t gen = 0;
	m->task = control_slot(m, hash, &gen);
	if (m->task < 0) {
		if (err && errlen)
			snprintf(err, errlen, "fence state %s places no task for this reservation", cpath);
		rc = GF_ERR_NOTASK;
		goto out;
	}
	gf_test_point("attach-found");
	m->fd = gf_open_file(apath, O_RDWR);
	struct stat fs;
	if (m->fd < 0 || fstat(m->fd, &fs) != 0) {
		rc = fail(err, errlen, "open", apath, errno);
		goto out;
	}
	gf_test_point("attach-opened");
	/* The lock file of this very file (gf_live_path), not of whichever placement is now. */
	if (gf_live_path(dir, hash, file, (uint64_t)fs.st_ino, lpath, sizeof lpath) != 0) {
		rc = fail(err, errlen, "name", path, ENAMETOOLONG);
		goto out;
	}
	m->lfd = gf_open_file(lpath, O_RDWR);
	if (m->lfd < 0) {
		/* Gone with its file, which a later placement replaced since it was opened. */
		rc = errno == ENOENT && !placed(&fs, apath) ? 1 : fail(err, errlen, "open", lpath, errno);
		goto out;
	}
	rc = gf_map_file(m->fd, apath, m, err, errlen);
	if (rc != 0)
		goto out;
	gf_test_point("attach-mapped");
	/* Free slots first; then slots whose byte is free, which belong to dead processes. */
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < GF_PROCS; i++) {
			uint32_t st = __atomic_load_n(&m->t->procs[i].state, __ATOMIC_RELAXED);
			if ((pass == 0) != (st == GF_FREE))
				continue;
			int r = try_claim(m, i, hash, strict);
			if (r > 0) {
				/* The claim read the control copy; a placement it names is in place. A
				 * slot in a file replaced before that read is in a file the enforcer
				 * no longer reads: give it back and take one in the new file. */
				if (!placed(&fs, apath)) {
					gf_detach(m);
					return 1;
				}
				gf_peers_open(m, dir, file);
				return 0;
			}
			if (r == -2) {
				if (err && errlen)
					snprintf(err, errlen, "fence state %s is locked by a live process that does not let go",
						 apath);
				rc = GF_ERR_LOCKED;
				goto out;
			}
			if (r == -3) {
				rc = 2;
				goto out;
			}
			if (r < 0) {
				/* The slot the control copy named at the start is not the task's any
				 * more. Where the task is placed anew meanwhile (in another slot, or
				 * ended and placed again), that placement is the one to attach to:
				 * its processes are not the unplaced ones. */
				uint32_t now_gen = 0;
				int now = control_slot(m, hash, &now_gen);
				if (now >= 0 && (now != m->task || now_gen != gen)) {
					rc = 1;
					goto out;
				}
				if (err && errlen)
					snprintf(err, errlen, "fence state %s has no task for this reservation", apath);
				rc = GF_ERR_NOTASK;
				goto out;
			}
		}
	}
	if (err && errlen)
		snprintf(err, errlen, "fence state %s has no free process slot (%d in use)", apath, GF_PROCS);
	rc = -1;
out:
	gf_unmap(m); /* no peers yet: they are opened once a slot is claimed */
	return rc;
}

int gf_attach(const char *path, const char *token, struct gf_map *m, char *err, size_t errlen)
{
	uint8_t hash[GF_HASH_LEN];
	gf_sha256(token, strlen(token), hash);
	/* Each retry follows a placement of the task's that came after the last one: the enforcer
	 * does not place one task many times in a row, and a task that keeps being re-placed gets
	 * its processes an error rather than a loop. A file and a control copy of two placements
	 * are the moment between the enforcer's writing of the one and the other: it is waited
	 * out, for as long as a kept lock is; past that (a generation written around the enforcer,
	 * which only gpufrac run's jobs can do to another's copy) the control copy's is taken. */
	uint64_t until = 0;
	int strict = 1;
	for (int tries = 0; tries < 8;) {
		int rc = attach_once(path, hash, m, strict, err, errlen);
		if (rc == 2) {
			uint64_t now = gf_now_ns();
			if (until == 0)
				until = now + GF_LOCK_WAIT_NS;
			strict = now < until;
			if (strict) {
				struct timespec d = {0, 1000000};
				gf_test_point("attach-wait");
				nanosleep(&d, NULL);
			}
			continue;
		}
		if (rc != 1)
			return rc;
		tries++;
	}
	if (err && errlen)
		snprintf(err, errlen, "fence state of %s was placed anew at each of 8 tries to attach", path);
	return -1;
}

void gf_detach(struct gf_map *m)
{
	if (!m->t)
		return;
	/* Without the lock the slot is left to the reapers: its byte is free once the file is closed. */
	if (m->slot >= 0 && gf_lock(m) == 0) {
		if (m->t->procs[m->slot].pgen == m->pgen)
			gf_give_back(m->t, m->slot);
		gf_test_point("detach");
		gf_unlock(m);
		gf_byte_lock(m->lfd, GF_LIVE_BASE + m->slot, F_UNLCK);
	}
	gf_unmap(m);
}

void gf_unmap(struct gf_map *m)
{
	gf_peers_close(m);
	gf_control_close(m);
	if (m->t)
		munmap(m->t, sizeof *m->t);
	if (m->fd >= 0)
		close(m->fd);
	if (m->lfd >= 0)
		close(m->lfd);
	gf_reset(m);
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
		/* Holding the byte proves its owner is gone and keeps claimants off until it is free.
		 * A read lock may keep us from it (gf_byte_owned): then the owner is gone
		 * where nobody holds the byte for writing, asked again under the lock, which a claimant
		 * takes too before it touches the slot. */
		int held = gf_byte_lock(m->lfd, GF_LIVE_BASE + i, F_WRLCK) == 0;
		if (!held && gf_byte_owned(m->lfd, GF_LIVE_BASE + i) != 0)
			continue;
		if (gf_lock(m) != 0) {
			if (held)
				gf_byte_lock(m->lfd, GF_LIVE_BASE + i, F_UNLCK);
			break;
		}
		if (p->state == GF_LIVE && (held || gf_byte_owned(m->lfd, GF_LIVE_BASE + i) == 0)) {
			gf_give_back(m->t, i);
			m->t->h.reaped++;
			n++;
			gf_test_point("reap");
		}
		gf_unlock(m);
		if (held)
			gf_byte_lock(m->lfd, GF_LIVE_BASE + i, F_UNLCK);
	}
	return n;
}

int gf_private(const char *uuid, uint64_t cap, struct gf_map *m, char *err, size_t errlen)
{
	gf_reset(m);
	/* By its system call: the glibc wrapper is 2.27's, newer than the preload may need. */
	int fd = gf_fd_aside((int)syscall(SYS_memfd_create, "gpufrac-unplaced", MFD_CLOEXEC));
	if (fd < 0)
		return fail(err, errlen, "create", "a private table", errno);
	if (ftruncate(fd, sizeof(struct gf_table)) != 0) {
		int e = errno;
		close(fd);
		return fail(err, errlen, "size", "a private table", e);
	}
	/* Its lock bytes on the same file: no other process ever opens it. */
	int lfd = gf_fd_aside(fcntl(fd, F_DUPFD_CLOEXEC, 0));
	if (lfd < 0) {
		int e = errno;
		close(fd);
		return fail(err, errlen, "open", "a private table", e);
	}
	m->fd = fd;
	m->lfd = lfd;
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
	rc = gf_map_file(fd, "a private table", m, err, errlen);
	m->task = 0;
	if (rc == 0 && try_claim(m, 0, hash, 0) > 0)
		return 0;
out:
	if (m->t)
		munmap(m->t, sizeof *m->t);
	close(fd);
	close(lfd);
	gf_reset(m);
	return rc ? rc : -1;
}
