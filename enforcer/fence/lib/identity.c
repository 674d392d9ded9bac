/*
 * Which task a process belongs to, on one GPU. Its environment says so first; when it has no
 * usable reservation there (a child started with a cleaned environment, `env -u`, a launcher
 * that drops variables), its ancestors' say: a process cannot change what its parent was
 * started with, and /proc/<pid>/stat's parent link comes from the kernel. A process that no
 * environment up its ancestry places in a task is fenced to a small allowance of its own,
 * instead of running unfenced (docs/enforcement.md, "Threat model").
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../state.h"
#include "fence.h"
#include "taskenv.h"

/* How far up the ancestry the fence looks: a task's process tree is shallow; this bounds the
 * walk where a tree is not. */
#define MAX_DEPTH 64
/* An environment larger than this is not read (the kernel's own limit on an exec's strings is
 * far below it on a normal system). */
#define MAX_ENVIRON (4u << 20)

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

/* One environment: this process's (getenv) or an ancestor's block of NUL-separated strings. */
struct env {
	const char *block;
	size_t len;
};

static const char *lookup(const struct env *e, const char *key)
{
	if (!e->block)
		return getenv(key);
	size_t k = strlen(key);
	for (const char *p = e->block; p < e->block + e->len; p += strlen(p) + 1)
		if (strncmp(p, key, k) == 0 && p[k] == '=')
			return p + k + 1;
	return NULL;
}

/* token_in is the reservation on GPU uuid in one environment: the per-GPU key first (a task may
 * hold reservations on several GPUs), then the single key when it names this GPU. */
static const char *token_in(const struct env *e, const char *uuid)
{
	char key[128];
	int n = snprintf(key, sizeof key, GF_ENV_RESERVATION_PREFIX "%s", uuid);
	for (int i = (int)sizeof GF_ENV_RESERVATION_PREFIX - 1; i < n && i < (int)sizeof key; i++)
		if (key[i] == '-')
			key[i] = '_';
	const char *t = lookup(e, key);
	if (t && *t)
		return t;
	const char *g = lookup(e, GF_ENV_GPU_UUID);
	t = lookup(e, GF_ENV_RESERVATION);
	if (g && t && *t && strcasecmp(g, uuid) == 0)
		return t;
	return NULL;
}

/* read_file reads a /proc file whole into a NUL-terminated buffer the caller frees. */
static char *read_file(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap + 1);
	while (buf) {
		ssize_t r = read(fd, buf + n, cap - n);
		if (r <= 0)
			break;
		n += (size_t)r;
		if (n == cap) {
			char *nb = cap < MAX_ENVIRON ? realloc(buf, cap * 2 + 1) : NULL;
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
			cap *= 2;
		}
	}
	close(fd);
	if (buf) {
		buf[n] = 0;
		*len = n;
	}
	return buf;
}

/* parent_of is pid's parent (0 = this process), or -1. The command name in stat may hold
 * spaces and parentheses: the fields start after its last ')'. */
static int parent_of(int pid)
{
	char path[64];
	if (pid == 0)
		snprintf(path, sizeof path, "/proc/self/stat");
	else
		snprintf(path, sizeof path, "/proc/%d/stat", pid);
	size_t len;
	char *s = read_file(path, &len);
	if (!s)
		return -1;
	char *p = strrchr(s, ')');
	int ppid = -1;
	char state;
	if (!p || sscanf(p + 1, " %c %d", &state, &ppid) != 2)
		ppid = -1;
	free(s);
	return ppid;
}

/* The attach to a task's accounting went: placed, or not there (an unknown token: try the next),
 * or the fence cannot be used (the watchdog alone then). */
enum { TRY_PLACED, TRY_NEXT, TRY_BROKEN };

static int try_token(const char *dir, const char *uuid, const char *token, struct gf_map *m, char *why, size_t n)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s.fence", dir, uuid);
	int rc = gf_attach(path, token, m, why, n);
	if (rc == 0)
		return TRY_PLACED;
	return rc == GF_ERR_NOTASK ? TRY_NEXT : TRY_BROKEN;
}

int gf_place(const char *uuid, struct gf_map *m)
{
	char why[512] = "";
	const char *dir = getenv(GF_ENV_FENCE_DIR);
	char *dir_copy = NULL;
	int pid = 0, tried = 0, broken = 0;
	/* Own environment first, then each ancestor's, nearest first. */
	for (int depth = 0; depth <= MAX_DEPTH && pid >= 0; depth++) {
		struct env e = {NULL, 0};
		char *block = NULL;
		if (depth > 0) {
			char path[64];
			snprintf(path, sizeof path, "/proc/%d/environ", pid);
			block = read_file(path, &e.len);
			e.block = block;
		}
		if (depth == 0 || block) {
			if (!dir || !*dir) {
				const char *d = lookup(&e, GF_ENV_FENCE_DIR);
				if (d && *d)
					dir = dir_copy = strdup(d);
			}
			const char *tok = token_in(&e, uuid);
			if (tok && dir && *dir) {
				tried++;
				int r = try_token(dir, uuid, tok, m, why, sizeof why);
				if (r == TRY_PLACED) {
					if (getenv(GF_ENV_FENCE_DEBUG))
						say("fenced on %s (slot %d, reservation of %s)", uuid, m->slot,
						    depth == 0 ? "this process" : "an ancestor");
					free(block);
					free(dir_copy);
					return 0;
				}
				broken |= r == TRY_BROKEN;
			}
		}
		free(block);
		if (broken)
			break;
		int ppid = parent_of(pid);
		pid = ppid > 0 ? ppid : -1;
	}
	free(dir_copy);
	if (!dir || !*dir) {
		say(GF_ENV_FENCE_DIR " is not set here or in any parent; this process runs under the watchdog alone");
		return -1;
	}
	if (broken) {
		say("%s; this process runs under the watchdog alone", why);
		return -1;
	}
	/* No task anywhere up its ancestry: an allowance of its own, not an open GPU. */
	char err[512];
	if (gf_private(uuid, GF_UNPLACED_ALLOWANCE, m, err, sizeof err) != 0) {
		say("%s; this process runs under the watchdog alone", err);
		return -1;
	}
	say("%s for %s in this process's environment or its parents'; its allocations there are refused "
	    "past %.0f MiB",
	    tried ? "no reservation the fence knows" : "no reservation", uuid, mib(GF_UNPLACED_ALLOWANCE));
	return 0;
}
