/* The enforcer's access to the tasks' accounting files. A task is root in its own container and
 * its file is its to write: it may truncate, shrink, grow or fill it with garbage. A mapping of a
 * file that shrank faults (SIGBUS) at its next touch past the end, which in the enforcer (the
 * plugin, `gpufrac run`) would end the node's enforcement for every tenant. So the enforcer never
 * maps a task's file: it reads it with pread into its own memory (a short file is a short read)
 * and judges a copy settled when the file's lock was free and two reads agree, the way a seqlock
 * reader does. What must be written under a task's lock (a dead process's slot given back, sums
 * rebuilt) is written by a child process forked for it, which alone maps the file and locks
 * bytes of the task's lock file, as the task's processes do: a fault there kills the child, and
 * the enforcer counts the file as its task's lie. The child is forked only where there is work
 * (a dead slot, a sum to rebuild), never on a quiet pass. */
#define _GNU_SOURCE
#include "state.h"
#include "control.h"
#include "lock.h"
#include "table.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A reading copies the header, the task's own slot and its process slots, CHUNK at a time until
 * it has seen as many of the task's live slots as its slot counts (processes take the lowest
 * free slots, so most tasks' are in the first chunk): not the other 63 task slots, nor the
 * owners' nonces (they change at every attach, outside the lock). A task that counts fewer than
 * it has hides them from itself: its use is then not its processes', and Verify rebuilds it. */
#define CHUNK 64
/* How long a child that writes a file may take: its lock wait is GF_ENFORCER_WAIT_NS, the rest
 * is a fork and a few hundred stores; past this it is killed and the file left for next time. */
#define CHILD_WAIT_NS (2000000000ull)

int gf_file_valid(const struct gf_table *t)
{
	const struct gf_header *h = &t->h;
	return h->magic == GF_MAGIC && h->version == GF_VERSION && h->header_size == sizeof t->h &&
	       h->task_size == sizeof t->tasks[0] && h->proc_size == sizeof t->procs[0] && h->ntasks == GF_TASKS &&
	       h->nprocs == GF_PROCS;
}

/* read_all reads n bytes at off, or fails: a file shorter than that was cut by its task. */
static int read_all(int fd, void *buf, size_t n, off_t off)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = pread(fd, (char *)buf + got, n - got, off + (off_t)got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

#define TASK_AT(i) ((off_t)(offsetof(struct gf_table, tasks) + (size_t)(i) * sizeof(struct gf_task)))
#define PROC_AT(j) ((off_t)(offsetof(struct gf_table, procs) + (size_t)(j) * sizeof(struct gf_proc)))

/* read_view reads what a reading copies of slot i's file into out: the process slots read, or
 * -1 (short, or not a table of this layout). */
static int read_view(int fd, int i, struct gf_table *out)
{
	if (read_all(fd, &out->h, sizeof out->h, 0) != 0 || !gf_file_valid(out) ||
	    read_all(fd, &out->tasks[i], sizeof out->tasks[i], TASK_AT(i)) != 0)
		return -1;
	const struct gf_task *k = &out->tasks[i];
	uint64_t seen = 0;
	int n = 0;
	while (n < GF_PROCS && seen < k->procs) {
		if (read_all(fd, &out->procs[n], CHUNK * sizeof out->procs[0], PROC_AT(n)) != 0)
			return -1;
		for (int j = n; j < n + CHUNK; j++) {
			const struct gf_proc *p = &out->procs[j];
			if (p->state == GF_LIVE && p->task == (uint32_t)i && p->task_gen == k->gen)
				seen++;
		}
		n += CHUNK;
	}
	return n;
}

int gf_file_view(const struct gf_gpu *g, int i, struct gf_table *out)
{
	return g->tasks[i].fd < 0 ? -1 : read_view(g->tasks[i].fd, i, out);
}

int gf_file_read(struct gf_gpu *g, int i, struct gf_table *out, int *nprocs)
{
	int fd = g->tasks[i].fd;
	struct gf_table *again = &g->scratch[1];
	struct stat st;
	*nprocs = 0;
	/* Cut short anywhere is cut short, even past what a reading copies. */
	if (fd < 0 || out == again || fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(struct gf_table))
		return GF_READ_BAD;
	uint64_t hard = gf_now_ns() + GF_ENFORCER_WAIT_NS;
	for (;;) {
		int n = read_view(fd, i, out);
		if (n < 0)
			return GF_READ_BAD;
		*nprocs = n;
		/* Every counter changes under the lock: free before and after, and the same twice, no
		 * update ran across the reading. */
		if (out->h.lock == 0 && read_view(fd, i, again) == n && again->h.lock == 0 &&
		    memcmp(&out->h, &again->h, sizeof out->h) == 0 &&
		    memcmp(&out->tasks[i], &again->tasks[i], sizeof out->tasks[i]) == 0 &&
		    memcmp(out->procs, again->procs, (size_t)n * sizeof out->procs[0]) == 0)
			return GF_READ_SETTLED;
		if (gf_now_ns() >= hard)
			return GF_READ_UNSETTLED;
		sched_yield();
	}
}

uint64_t gf_file_used(const struct gf_gpu *g, int i, int *armed, uint64_t *procs)
{
	struct gf_task k;
	int fd = g->tasks[i].fd;
	off_t at = (off_t)(offsetof(struct gf_table, tasks) + (size_t)i * sizeof k);
	*armed = 1;
	*procs = 0;
	if (fd < 0 || read_all(fd, &k, sizeof k, at) != 0)
		return 0;
	*armed = k.armed != 0;
	*procs = k.procs;
	return k.used;
}


enum { DO_REAP, DO_REBUILD };

/* child_work is what the child does with the file mapped; a fault ends the child. */
static int child_work(struct gf_gpu *g, int i, int fd, int lfd, int what)
{
	struct gf_map m;
	gf_reset(&m);
	m.fd = fd;
	m.lfd = lfd;
	if (gf_map_file(fd, "a task's accounting file", &m, NULL, 0) != 0)
		return -1;
	m.c = g->c;
	m.task = i;
	m.wait_ns = GF_ENFORCER_WAIT_NS;
	if (what == DO_REAP)
		return gf_reap(&m, -1);
	if (gf_lock(&m) != 0)
		return -1;
	gf_test_point("rebuild");
	gf_control_restore(&m);
	gf_recount(m.t);
	gf_unlock(&m);
	return 0;
}

/* in_child runs what on slot i's file in a forked child: its result, or -1 (the lock kept, the
 * file not a table any more, the child faulted or took too long). */
static int in_child(struct gf_gpu *g, int i, int what)
{
	char proc[64];
	if (!g->shared || g->tasks[i].fd < 0 || g->tasks[i].lfd < 0)
		return -1;
	/* Descriptions of its own: the byte locks the child takes (its owner index, a slot it
	 * reaps) are the kernel's to drop when it ends, whatever the enforcer holds. The
	 * descriptors name the files the enforcer checked when it opened them, not whatever the
	 * paths hold now. */
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", g->tasks[i].fd);
	int fd = open(proc, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -1;
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", g->tasks[i].lfd);
	int lfd = open(proc, O_RDWR | O_CLOEXEC);
	if (lfd < 0) {
		close(fd);
		return -1;
	}
	volatile int *res = g->shared;
	*res = -1;
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid == 0) {
		/* The enforcer's handlers are its runtime's: a fault here must end this process
		 * plainly, and an enforcer that dies takes this child with it. */
		signal(SIGBUS, SIG_DFL);
		signal(SIGSEGV, SIG_DFL);
		sigset_t all;
		sigemptyset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		*res = child_work(g, i, fd, lfd, what);
		_exit(0);
	}
	close(fd);
	close(lfd);
	if (pid < 0)
		return -1;
	uint64_t hard = gf_now_ns() + CHILD_WAIT_NS;
	int st = 0;
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR)
			return -1;
		if (gf_now_ns() >= hard) {
			kill(pid, SIGKILL);
			while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
				;
			return -1;
		}
		struct timespec d = {0, 200000};
		nanosleep(&d, NULL);
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return -1;
	return *res;
}

int gf_file_reap(struct gf_gpu *g, int i)
{
	struct gf_proc *procs = g->scratch[0].procs;
	int lfd = g->tasks[i].lfd;
	int n = gf_file_view(g, i, &g->scratch[0]);
	/* A live slot whose byte nobody holds for writing belongs to a dead process (state.h). */
	for (int j = 0; j < n; j++) {
		if (procs[j].state != GF_LIVE)
			continue;
		if (gf_byte_owned(lfd, GF_LIVE_BASE + j) == 0) {
			int n = in_child(g, i, DO_REAP);
			return n > 0 ? n : 0;
		}
	}
	return 0;
}

int gf_file_rebuild(struct gf_gpu *g, int i)
{
	return in_child(g, i, DO_REBUILD);
}
