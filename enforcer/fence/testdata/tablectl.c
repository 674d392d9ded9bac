/*
 * A process that drives a fence table through state.h's own API, for the lock's tests: built
 * with -DGF_TESTING, it stops inside a critical section when GF_TEST_STALL names one, so a test
 * can SIGKILL it there. It reads one command a line on stdin and answers one line on stdout:
 * PATH names a GPU as the fence does ("<dir>/<uuid>.fence"; state.h).
 *   create PATH UUID TOTAL  -> ok | err RC MSG     (as the enforcer: takes the control byte)
 *   set TOKEN CAP           -> placed N            (the enforcer's whole set: this one task)
 *   place BUDGET SPEC [SPEC] -> placed N           (the whole set, SPEC = TOKEN=CAP/LIMIT, under
 *                              BUDGET: borrowing on where it is not 0; borrowers do not wait)
 *   snapshot                -> snap used=U procs=P recoveries=R
 *   gens PATH TOKEN         -> gens F C | err MSG: the generation of TOKEN's task in its accounting
 *                              file (F) and in the control copy (C), read as the enforcer reads
 *   attach PATH TOKEN       -> ok SLOT | err RC MSG
 *   charge N                -> ok | refused | notask | busy
 *   uncharge N | detach     -> ok
 *   reap                    -> reaped N
 *   view                    -> view CAP USED | notask
 *   loop PATH TOKEN         -> looping, then attach/charge/uncharge/detach until killed
 *   tamper FILE FIELD N [TOKEN] -> ok | err MSG: writes an accounting FILE as a hostile tenant
 *                              would, around the API: FIELD cap, limit, keep, state, used, armed,
 *                              nowed, ngrace, gwant, nwait, bwant, procs or lock of TOKEN's task (else every
 *                              task slot), or budget
 *   tamper-control FILE FIELD N [TOKEN] -> ok | err MSG: the same on a control copy (what a
 *                              job of the same Unix user can do under gpufrac run), and seen,
 *                              unheeded, sealed, unseen, ctx or spare
 *   takes FILE MS           -> took N: counts the lock taken again every 10 ms, MS ms long, as a
 *                              holder that wins it time after time would, without the lock
 *   flock FILE              -> ok: takes the flock of FILE (opened read-only) and keeps it
 *   rdlock FILE all | rdlock FILE live N | rdlock FILE holder TABLE -> ok | err MSG: opens FILE
 *                              read-only, as a process that may only read it can, and takes an
 *                              OFD read lock on every byte of it (past its end too), on process
 *                              slot N's liveness byte, or on the owner byte of whoever the lock
 *                              word of the accounting file TABLE names, and keeps it
 * Sizes are bytes with an optional K, M or G (binary) suffix.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "../state.h"
#include "../control.h"
#include "parse_size.h"

/* map_rw maps the first len bytes of path read-write, as a tenant with write access would; on
 * failure it says why on stdout and returns NULL. The mapping outlives the descriptor. */
static void *map_rw(const char *path, size_t len)
{
	int fd = open(path, O_RDWR);
	void *p = fd < 0 ? MAP_FAILED : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		printf("err cannot map %s: %s\n", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	return p == MAP_FAILED ? NULL : p;
}

/* set_limits writes field (cap, limit, keep or state) of a task slot, the fields both the
 * control copy and a task's accounting hold; it returns 0 for any other field. */
static int set_limits(const char *field, uint64_t v, uint32_t *state, uint64_t *cap, uint64_t *limit, uint64_t *keep)
{
	if (!strcmp(field, "cap"))
		*cap = v;
	else if (!strcmp(field, "limit"))
		*limit = v;
	else if (!strcmp(field, "keep"))
		*keep = v;
	else if (!strcmp(field, "state"))
		*state = (uint32_t)v;
	else
		return 0;
	return 1;
}

/* other_task: a slot whose token hash is not h, the hash of token; an empty token is every slot's. */
static int other_task(const char *token, const uint8_t *slot, const uint8_t *h)
{
	return token[0] && memcmp(slot, h, GF_HASH_LEN) != 0;
}

/* tamper_account writes field of the accounting file at path as a tenant could: a task slot's
 * (token's, or every one's) or the header's budget or lock. */
static int tamper_account(const char *path, const char *field, uint64_t v, const char *token)
{
	struct gf_table *t = map_rw(path, sizeof *t);
	if (!t)
		return 0;
	uint8_t h[GF_HASH_LEN];
	gf_sha256(token, strlen(token), h);
	for (int i = 0; i < GF_TASKS; i++) {
		struct gf_task *k = &t->tasks[i];
		if (other_task(token, k->token_hash, h) || set_limits(field, v, &k->state, &k->cap, &k->limit, &k->keep))
			continue; /* not this slot, or written */
		if (!strcmp(field, "used"))
			k->used = v;
		else if (!strcmp(field, "armed"))
			k->armed = v;
		else if (!strcmp(field, "nowed"))
			k->nowed = v;
		else if (!strcmp(field, "ngrace"))
			k->ngrace = v;
		else if (!strcmp(field, "gwant"))
			k->gwant = v;
		else if (!strcmp(field, "nwait"))
			k->nwait = v;
		else if (!strcmp(field, "bwant"))
			k->bwant = v;
		else if (!strcmp(field, "procs"))
			k->procs = v;
	}
	if (!strcmp(field, "budget"))
		t->h.budget = v;
	else if (!strcmp(field, "lock"))
		t->h.lock = v;
	munmap(t, sizeof *t);
	return 1;
}

/* tamper_control writes field of the control copy at path: a live task slot's (token's, or
 * every live one's) or the budget. */
static int tamper_control(const char *path, const char *field, uint64_t v, const char *token)
{
	struct gf_control *t = map_rw(path, sizeof *t);
	if (!t)
		return 0;
	uint8_t h[GF_HASH_LEN];
	gf_sha256(token, strlen(token), h);
	for (int i = 0; i < GF_TASKS; i++) {
		struct gf_control_task *k = &t->tasks[i];
		if (other_task(token, k->token_hash, h) || (!token[0] && k->state != GF_LIVE))
			continue;
		if (set_limits(field, v, &k->state, &k->cap, &k->limit, &k->keep))
			continue;
		if (!strcmp(field, "seen"))
			k->seen = v;
		else if (!strcmp(field, "unheeded"))
			k->unheeded = v;
		else if (!strcmp(field, "sealed"))
			k->sealed = v;
		else if (!strcmp(field, "unseen"))
			k->unseen = v;
	}
	if (!strcmp(field, "budget"))
		t->budget = v;
	else if (!strcmp(field, "ctx"))
		t->ctx = v;
	else if (!strcmp(field, "spare"))
		t->spare = v;
	munmap(t, sizeof *t);
	return 1;
}

/* parse_spec reads "TOKEN=CAP/LIMIT" into spec, pointing at s's token (s is cut there): 1, or 0. */
static int parse_spec(char *s, struct gf_task_spec *spec)
{
	char *eq = strchr(s, '='), *slash = eq ? strchr(eq, '/') : NULL;
	if (!slash)
		return 0;
	*eq = 0;
	memset(spec, 0, sizeof *spec);
	spec->token = s;
	spec->cap = parse_size(eq + 1);
	spec->limit = parse_size(slash + 1);
	return 1;
}

/* gens prints the generation of token's task in its accounting file and in the control copy of
 * the GPU named path, read with pread (neither is mapped or locked). */
static void gens(const char *path, const char *token)
{
	uint8_t hash[GF_HASH_LEN];
	char dir[4096], file[GF_UUID_MAX + 16], apath[4200], cpath[4200];
	static struct gf_table t;
	static struct gf_control c;
	gf_sha256(token, strlen(token), hash);
	if (gf_split_name(path, dir, sizeof dir, file, sizeof file) != 0 ||
	    gf_control_path(path, cpath, sizeof cpath) != 0 || gf_account_path(dir, hash, file, apath, sizeof apath) != 0) {
		printf("err name %s\n", path);
		return;
	}
	int afd = open(apath, O_RDONLY), cfd = open(cpath, O_RDONLY);
	int ok = afd >= 0 && cfd >= 0 && pread(afd, &t, sizeof t, 0) == (ssize_t)sizeof t &&
		 pread(cfd, &c, sizeof c, 0) == (ssize_t)sizeof c;
	if (afd >= 0)
		close(afd);
	if (cfd >= 0)
		close(cfd);
	for (int i = 0; ok && i < GF_TASKS; i++)
		if (c.tasks[i].state == GF_LIVE && memcmp(c.tasks[i].token_hash, hash, GF_HASH_LEN) == 0) {
			printf("gens %u %u\n", t.tasks[i].gen, c.tasks[i].gen);
			return;
		}
	printf("err no task in %s\n", ok ? cpath : apath);
}

static const char *charge_word(int r)
{
	switch (r) {
	case GF_OK:
	case GF_OK_OWED: return "ok";
	case GF_REFUSED: return "refused";
	case GF_BUSY: return "busy";
	default: return "notask";
	}
}

int main(void)
{
	static struct gf_map m;
	static struct gf_gpu ctl;
	static struct gf_table snap;
	char line[4400], err[512];
	setvbuf(stdout, NULL, _IOLBF, 0);
	m.fd = ctl.cfd = -1;
	while (fgets(line, sizeof line, stdin)) {
		char cmd[32] = "", a[4096] = "", b[128] = "", c[4096] = "", d[128] = "";
		if (sscanf(line, "%31s %4095s %127s %4095s %127s", cmd, a, b, c, d) < 1)
			continue;
		if (!strcmp(cmd, "create")) {
			int rc = gf_create(a, b, parse_size(c), 0, &ctl, err, sizeof err);
			if (rc)
				printf("err %d %s\n", rc, err);
			else
				printf("ok\n");
		} else if (!strcmp(cmd, "set")) {
			struct gf_task_spec spec = {a, parse_size(b), 0, 0, 0, 0, 0, 0, 0, 0};
			printf("placed %d\n", gf_set_tasks(&ctl, &spec, 1, 0, 0, 0, 0));
		} else if (!strcmp(cmd, "place")) {
			struct gf_task_spec specs[2];
			int n = 0;
			if (parse_spec(b, &specs[n]))
				n++;
			if (c[0] && parse_spec(c, &specs[n]))
				n++;
			printf("placed %d\n", gf_set_tasks(&ctl, specs, n, parse_size(a), 0, 0, 0));
		} else if (!strcmp(cmd, "gens")) {
			gens(a, b);
		} else if (!strcmp(cmd, "snapshot")) {
			if (gf_snapshot(&ctl, &snap) != 0) {
				printf("err locked\n");
				continue;
			}
			uint64_t used = 0, procs = 0;
			for (int i = 0; i < GF_TASKS; i++) {
				used += snap.tasks[i].used;
				procs += snap.tasks[i].procs;
			}
			printf("snap used=%llu procs=%llu recoveries=%llu\n", (unsigned long long)used,
			       (unsigned long long)procs, (unsigned long long)snap.h.recoveries);
		} else if (!strcmp(cmd, "attach")) {
			int rc = gf_attach(a, b, &m, err, sizeof err);
			if (rc)
				printf("err %d %s\n", rc, err);
			else
				printf("ok %d\n", m.slot);
		} else if (!strcmp(cmd, "charge")) {
			printf("%s\n", charge_word(gf_charge(&m, parse_size(a))));
		} else if (!strcmp(cmd, "uncharge")) {
			gf_uncharge(&m, parse_size(a));
			printf("ok\n");
		} else if (!strcmp(cmd, "detach")) {
			gf_detach(&m);
			printf("ok\n");
		} else if (!strcmp(cmd, "reap")) {
			printf("reaped %d\n", m.t ? gf_reap(&m, -1) : gf_reap_all(&ctl));
		} else if (!strcmp(cmd, "rebuild")) {
			printf("rebuilt %d\n", gf_rebuild(&ctl));
		} else if (!strcmp(cmd, "view")) {
			uint64_t cap = 0, used = 0;
			if (gf_view(&m, &cap, &used) == GF_OK)
				printf("view %llu %llu\n", (unsigned long long)cap, (unsigned long long)used);
			else
				printf("notask\n");
		} else if (!strcmp(cmd, "tamper")) {
			if (tamper_account(a, b, parse_size(c), d))
				printf("ok\n");
		} else if (!strcmp(cmd, "tamper-control")) {
			if (tamper_control(a, b, parse_size(c), d))
				printf("ok\n");
		} else if (!strcmp(cmd, "takes")) {
			struct gf_table *t = map_rw(a, sizeof *t);
			unsigned long n = 0;
			for (long ms = 0; t && ms < atol(b); ms += 10, n++) {
				__atomic_add_fetch(&t->h.takes, 1, __ATOMIC_RELAXED);
				usleep(10000);
			}
			if (t) {
				munmap(t, sizeof *t);
				printf("took %lu\n", n);
			}
		} else if (!strcmp(cmd, "flock")) {
			int fd = open(a, O_RDONLY);
			if (fd < 0 || flock(fd, LOCK_EX) != 0)
				printf("err %s\n", strerror(errno));
			else
				printf("ok\n");
		} else if (!strcmp(cmd, "rdlock")) {
			int fd = open(a, O_RDONLY);
			struct gf_header h;
			struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
			if (!strcmp(b, "live")) {
				fl.l_start = GF_LIVE_BASE + atoi(c);
				fl.l_len = 1;
			} else if (!strcmp(b, "holder")) {
				int tfd = open(c, O_RDONLY);
				if (tfd >= 0 && pread(tfd, &h, sizeof h, 0) == (ssize_t)sizeof h)
					fl.l_start = GF_OWNER_BASE + (off_t)(uint32_t)h.lock - 1;
				if (tfd >= 0)
					close(tfd);
				fl.l_len = 1;
			}
			if (fd < 0 || fcntl(fd, F_OFD_SETLK, &fl) != 0)
				printf("err %s\n", strerror(errno));
			else
				printf("ok\n");
		} else if (!strcmp(cmd, "loop")) {
			printf("looping\n");
			for (;;) {
				if (gf_attach(a, b, &m, err, sizeof err) != 0) {
					printf("err %s\n", err);
					return 1;
				}
				gf_charge(&m, 1 << 20);
				gf_uncharge(&m, 1 << 20);
				gf_detach(&m);
			}
		} else {
			printf("err unknown command %s\n", cmd);
		}
	}
	return 0;
}
