/*
 * A CUDA program for the fence's tests: it reaches the driver as the CUDA runtime does
 * (dlopen, dlsym "cuGetProcAddress", then cuGetProcAddress for each entry point) or, with
 * "direct" as its first argument, by the symbol names a program linked against libcuda uses, or,
 * with "plugin", by the names as a library linked against libcuda and opened without
 * RTLD_GLOBAL calls them (testdata/plugin.c, at $CLIENT_PLUGIN; the driver is then never in the
 * global scope).
 * It reads one command a line on stdin and answers one line on stdout:
 *   alloc|managed|async|pool|create SIZE   -> ok ID | err CODE
 *   pitch WIDTH HEIGHT | array W H | array3d W H D  -> ok ID | err CODE
 *   mipmap W H D FLAGS LEVELS -> ok ID | err CODE (float32 levels; FLAGS 1: layered)
 *   free ID -> ok | err CODE          info -> info FREE TOTAL        dev N -> ok
 *   freealloc ID SIZE -> ok NEWID | err CODE (frees ID, an alloc or create, while another of its
 *     kind of SIZE is made once the driver freed it and before the free returns, as by another
 *     thread; with FAKE_CUDA_REUSE=1 it gets the address just freed)
 *   threads T K SIZE -> threads ok=X refused=Y (T threads, K allocations each, then all freed)
 *   fork SIZE [ID] -> child ok|err CODE|free err CODE (a forked child allocates SIZE and
 *     exits; given ID, it first frees its parent's allocation ID)
 *   bg SIZE -> started (a thread allocates SIZE)   cancel -> cancelled | finished ok|err CODE
 *     (pthread_cancel of that thread, then its join: cancelled inside the allocation, or after
 *     it returned CODE)
 *   total -> total BYTES (cuDeviceTotalMem_v2)   total1 -> total BYTES (the 32-bit cuDeviceTotalMem)
 *   poolkeep BYTES -> ok (the default pool's release threshold)   trim KEEP -> ok (cuMemPoolTrimTo)
 *   used -> used BYTES (what the fake device holds: what NVML would report)
 *   mkpool -> ok ID | err CODE (cuMemPoolCreate; free ID destroys it)
 *   frompool ID SIZE -> ok ID | err CODE (cuMemAllocFromPoolAsync from pool ID)
 *   racepool SIZE -> raced ok|err CODE (another thread allocates SIZE from the default pool
 *     while the driver answers the fence's look at that pool inside a cuMemGetInfo; it waits
 *     300 ms at most for that thread, which a fence that looks under its lock holds up)
 *   gpa 1|2 NAME VERSION FLAGS -> from FILE | err CODE (cuGetProcAddress or its _v2 asked for NAME:
 *     the base name of the object its answer lies in; runtime mode only)
 *   fail A F -> ok (the fake driver fails every later allocation with A, every free with F; 0: not)
 *   clobber N -> clobbered COUNT (dup2 of /dev/null onto every open descriptor from 3 below N)
 *   spawn child|grandchild|setsid|nodir SIZE -> child ok|err CODE (a new program started
 *     without the reservation in its environment allocates SIZE and exits: a child, a child's
 *     child, a child in a new session, or a child without GPUFRAC_FENCE_DIR either)
 *   map ID SIZE -> ok M | err CODE (maps SIZE bytes of handle ID at an address of its own;
 *     free M unmaps it)   retain M -> ok ID | err CODE (cuMemRetainAllocationHandle at M's address)
 *   exit -> leaves without freeing
 * SIZE takes K, M and G (binary) suffixes.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "parse_size.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef CUresult (*gpa1_fn)(const char *, void **, int, uint64_t);
typedef CUresult (*gpa2_fn)(const char *, void **, int, uint64_t, int *);

static CUresult (*mem_alloc)(CUdeviceptr *, size_t);
static CUresult (*mem_managed)(CUdeviceptr *, size_t, unsigned int);
static CUresult (*mem_pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
static CUresult (*mem_free)(CUdeviceptr);
static CUresult (*mem_info)(size_t *, size_t *);
static CUresult (*mem_create)(unsigned long long *, size_t, const void *, unsigned long long);
static CUresult (*mem_release)(unsigned long long);
static CUresult (*mem_map)(CUdeviceptr, size_t, size_t, unsigned long long, unsigned long long);
static CUresult (*mem_unmap)(CUdeviceptr, size_t);
static CUresult (*mem_retain)(unsigned long long *, void *);
static CUresult (*mem_async)(CUdeviceptr *, size_t, void *);
static CUresult (*mem_free_async)(CUdeviceptr, void *);
static CUresult (*mem_pool)(CUdeviceptr *, size_t, void *, void *);
static CUresult (*array_create)(void **, const void *);
static CUresult (*array3d_create)(void **, const void *);
static CUresult (*array_destroy)(void *);
static CUresult (*mipmap_create)(void **, const void *, unsigned int);
static CUresult (*mipmap_destroy)(void *);
static CUresult (*total_mem)(size_t *, int);
static CUresult (*total_mem1)(unsigned int *, int);
static CUresult (*default_pool)(void **, int);
static CUresult (*pool_set)(void *, int, void *);
static CUresult (*pool_create)(void **, const void *);
static CUresult (*pool_destroy)(void *);
static CUresult (*pool_trim)(void *, size_t);
static void (*set_device)(int);
static void (*on_free)(void (*)(void));
static void (*fake_fail)(int, int);
static void (*on_attr)(void (*)(void));
static unsigned long long (*fake_used)(void);
static int curdev;
static gpa1_fn gpa1; /* the runtime's way in: set in the runtime mode only */
static gpa2_fn gpa;

enum { K_PTR, K_ASYNC, K_HANDLE, K_ARRAY, K_MAPPING, K_MIPMAP, K_POOL };
struct obj { int kind; uint64_t v, n; };
static struct obj objs[1 << 16];
static int nobjs;

static void *need(void *p, const char *name)
{
	if (!p) {
		fprintf(stderr, "client: no %s\n", name);
		exit(3);
	}
	return p;
}

enum { RUNTIME, DIRECT, PLUGIN };

static void load(int mode, uint64_t flags)
{
	void *(*plugin_sym)(const char *) = NULL;
	if (mode == PLUGIN) {
		const char *path = getenv("CLIENT_PLUGIN");
		void *pl = need(path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL, "CLIENT_PLUGIN");
		plugin_sym = need(dlsym(pl, "plugin_sym"), "plugin_sym");
	}
	/* The plugin brought the driver in for itself: opened again without RTLD_GLOBAL, it stays
	 * out of the global scope. */
	void *h = need(dlopen("libcuda.so.1", mode == PLUGIN ? RTLD_NOW : RTLD_NOW | RTLD_GLOBAL), "libcuda.so.1");
	set_device = need(dlsym(h, "fakeSetDevice"), "fakeSetDevice");
	fake_used = need(dlsym(h, "fakeUsed"), "fakeUsed");
	on_free = need(dlsym(h, "fakeOnFree"), "fakeOnFree");
	fake_fail = need(dlsym(h, "fakeFail"), "fakeFail");
	on_attr = need(dlsym(h, "fakeOnAttr"), "fakeOnAttr");
#define BYNAME(var, sym) var = need(plugin_sym ? plugin_sym(sym) : dlsym(RTLD_DEFAULT, sym), sym)
	if (mode != RUNTIME) {
		BYNAME(mem_alloc, "cuMemAlloc_v2");
		BYNAME(mem_managed, "cuMemAllocManaged");
		BYNAME(mem_pitch, "cuMemAllocPitch_v2");
		BYNAME(mem_free, "cuMemFree_v2");
		BYNAME(mem_info, "cuMemGetInfo_v2");
		BYNAME(mem_create, "cuMemCreate");
		BYNAME(mem_release, "cuMemRelease");
		BYNAME(mem_map, "cuMemMap");
		BYNAME(mem_unmap, "cuMemUnmap");
		BYNAME(mem_retain, "cuMemRetainAllocationHandle");
		BYNAME(mem_async, flags ? "cuMemAllocAsync_ptsz" : "cuMemAllocAsync");
		BYNAME(mem_free_async, flags ? "cuMemFreeAsync_ptsz" : "cuMemFreeAsync");
		BYNAME(mem_pool, flags ? "cuMemAllocFromPoolAsync_ptsz" : "cuMemAllocFromPoolAsync");
		BYNAME(array_create, "cuArrayCreate_v2");
		BYNAME(array3d_create, "cuArray3DCreate_v2");
		BYNAME(array_destroy, "cuArrayDestroy");
		BYNAME(mipmap_create, "cuMipmappedArrayCreate");
		BYNAME(mipmap_destroy, "cuMipmappedArrayDestroy");
		BYNAME(total_mem, "cuDeviceTotalMem_v2");
		BYNAME(total_mem1, "cuDeviceTotalMem");
		BYNAME(default_pool, "cuDeviceGetDefaultMemPool");
		BYNAME(pool_set, "cuMemPoolSetAttribute");
		BYNAME(pool_create, "cuMemPoolCreate");
		BYNAME(pool_destroy, "cuMemPoolDestroy");
		BYNAME(pool_trim, "cuMemPoolTrimTo");
		return;
	}
	gpa1 = need(dlsym(h, "cuGetProcAddress"), "cuGetProcAddress");
	if (gpa1("cuGetProcAddress", (void **)&gpa, 12000, 0) != 0 || !gpa) {
		fprintf(stderr, "client: no cuGetProcAddress v2\n");
		exit(3);
	}
#define PROC(var, sym) \
	if (gpa(sym, (void **)&var, 12080, flags, NULL) != 0 || !var) { fprintf(stderr, "client: no %s\n", sym); exit(3); }
	PROC(mem_alloc, "cuMemAlloc");
	PROC(mem_managed, "cuMemAllocManaged");
	PROC(mem_pitch, "cuMemAllocPitch");
	PROC(mem_free, "cuMemFree");
	PROC(mem_info, "cuMemGetInfo");
	PROC(mem_create, "cuMemCreate");
	PROC(mem_release, "cuMemRelease");
	PROC(mem_map, "cuMemMap");
	PROC(mem_unmap, "cuMemUnmap");
	PROC(mem_retain, "cuMemRetainAllocationHandle");
	PROC(mem_async, "cuMemAllocAsync");
	PROC(mem_free_async, "cuMemFreeAsync");
	PROC(mem_pool, "cuMemAllocFromPoolAsync");
	PROC(array_create, "cuArrayCreate");
	PROC(array3d_create, "cuArray3DCreate");
	PROC(array_destroy, "cuArrayDestroy");
	PROC(mipmap_create, "cuMipmappedArrayCreate");
	PROC(mipmap_destroy, "cuMipmappedArrayDestroy");
	PROC(total_mem, "cuDeviceTotalMem");
	PROC(default_pool, "cuDeviceGetDefaultMemPool");
	PROC(pool_set, "cuMemPoolSetAttribute");
	PROC(pool_create, "cuMemPoolCreate");
	PROC(pool_destroy, "cuMemPoolDestroy");
	PROC(pool_trim, "cuMemPoolTrimTo");
	/* The 3.0 ABI of cuDeviceTotalMem, as a runtime built for it asks. */
	if (gpa("cuDeviceTotalMem", (void **)&total_mem1, 3000, flags, NULL) != 0 || !total_mem1) {
		fprintf(stderr, "client: no cuDeviceTotalMem v1\n");
		exit(3);
	}
}

static void answer(CUresult r, int kind, uint64_t v)
{
	if (r != 0) {
		printf("err %d\n", r);
		return;
	}
	objs[nobjs].kind = kind;
	objs[nobjs].v = v;
	printf("ok %d\n", nobjs++);
}

/* What freealloc makes inside the driver's free. */
static int between_kind;
static uint64_t between_size, between_v;
static CUresult between_r;

static void between(void)
{
	if (between_kind == K_HANDLE) {
		int prop[8] = {1, 0, 1, 0};
		unsigned long long h = 0;
		between_r = mem_create(&h, between_size, prop, 0);
		between_v = h;
		return;
	}
	CUdeviceptr p = 0;
	between_r = mem_alloc(&p, between_size);
	between_v = p;
}

struct job { int k; uint64_t size; int ok, refused; CUdeviceptr *ptrs; };

static void *thread_main(void *arg)
{
	struct job *j = arg;
	for (int i = 0; i < j->k; i++) {
		CUresult r = mem_alloc(&j->ptrs[j->ok], j->size);
		if (r == 0)
			j->ok++;
		else if (r == 2)
			j->refused++;
	}
	return NULL;
}

static void threads(int t, int k, uint64_t size)
{
	pthread_t th[64];
	struct job jobs[64];
	int ok = 0, refused = 0;
	for (int i = 0; i < t; i++) {
		jobs[i] = (struct job){k, size, 0, 0, calloc((size_t)k, sizeof(CUdeviceptr))};
		pthread_create(&th[i], NULL, thread_main, &jobs[i]);
	}
	for (int i = 0; i < t; i++) {
		pthread_join(th[i], NULL);
		ok += jobs[i].ok;
		refused += jobs[i].refused;
	}
	for (int i = 0; i < t; i++) {
		for (int n = 0; n < jobs[i].ok; n++)
			mem_free(jobs[i].ptrs[n]);
		free(jobs[i].ptrs);
	}
	printf("threads ok=%d refused=%d\n", ok, refused);
}

/* bg's thread: its allocation, then a cancellation point, where a cancel that waited for the
 * allocation to return lands. */
static pthread_t bg_thread;
static uint64_t bg_size;
static CUresult bg_r = -1;

static void *bg_main(void *arg)
{
	(void)arg;
	CUdeviceptr p = 0;
	bg_r = mem_alloc(&p, bg_size);
	pthread_testcancel();
	return NULL;
}

/* racepool's other thread, started by the hook inside the driver's answer. */
static pthread_mutex_t race_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t race_cv = PTHREAD_COND_INITIALIZER;
static int race_go, race_done;
static uint64_t race_size;
static CUresult race_r;

static void *race_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&race_mu);
	while (!race_go)
		pthread_cond_wait(&race_cv, &race_mu);
	pthread_mutex_unlock(&race_mu);
	void *pl = NULL;
	CUdeviceptr q = 0;
	CUresult r = default_pool(&pl, curdev);
	race_r = r == 0 ? mem_pool(&q, race_size, pl, NULL) : r;
	pthread_mutex_lock(&race_mu);
	race_done = 1;
	pthread_cond_broadcast(&race_cv);
	pthread_mutex_unlock(&race_mu);
	return NULL;
}

static void race_hook(void)
{
	struct timespec end;
	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_nsec += 300000000L;
	if (end.tv_nsec >= 1000000000L) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&race_mu);
	race_go = 1;
	pthread_cond_broadcast(&race_cv);
	while (!race_done && pthread_cond_timedwait(&race_cv, &race_mu, &end) == 0)
		;
	pthread_mutex_unlock(&race_mu);
}

extern char **environ;

/* run starts this program again as argv with the environment minus its reservations and
 * returns its exit code, or -1. */
static int run(char *const argv[], int new_session, int no_dir)
{
	static char *env[4096];
	int n = 0;
	for (char **e = environ; *e && n < 4095; e++)
		if (strncmp(*e, "GPUFRAC_RESERVATION", 19) != 0 && (!no_dir || strncmp(*e, "GPUFRAC_FENCE_DIR=", 18) != 0))
			env[n++] = *e;
	env[n] = NULL;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		if (new_session && setsid() < 0)
			_exit(4);
		execve("/proc/self/exe", argv, env);
		_exit(5);
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void spawn(const char *mode, const char *size)
{
	char *alloc_once[] = {"client", "alloc-once", (char *)size, NULL};
	char *relay[] = {"client", "relay", (char *)size, NULL};
	int code = run(strcmp(mode, "grandchild") == 0 ? relay : alloc_once, strcmp(mode, "setsid") == 0,
		       strcmp(mode, "nodir") == 0);
	if (code == 0)
		printf("child ok\n");
	else
		printf("child err %d\n", code - 10);
}

int main(int argc, char **argv)
{
	if (argc > 2 && strcmp(argv[1], "relay") == 0) {
		char *alloc_once[] = {"client", "alloc-once", argv[2], NULL};
		return run(alloc_once, 0, 0);
	}
	if (argc > 2 && strcmp(argv[1], "alloc-once") == 0) {
		load(0, 0);
		CUdeviceptr p = 0;
		CUresult r = mem_alloc(&p, parse_size(argv[2]));
		return r == 0 ? 0 : 10 + r;
	}
	int mode = argc < 2 ? RUNTIME : strcmp(argv[1], "direct") == 0 ? DIRECT : strcmp(argv[1], "plugin") == 0 ? PLUGIN : RUNTIME;
	uint64_t flags = getenv("CLIENT_PTDS") ? 2 : 0;
	load(mode, flags);
	char line[256];
	while (fgets(line, sizeof line, stdin)) {
		char cmd[32] = "", a[64] = "", b[64] = "", c[64] = "", e[64] = "", f[64] = "";
		if (sscanf(line, "%31s %63s %63s %63s %63s %63s", cmd, a, b, c, e, f) < 1)
			continue;
		CUdeviceptr p = 0;
		if (!strcmp(cmd, "alloc")) {
			CUresult r = mem_alloc(&p, parse_size(a));
			answer(r, K_PTR, p);
		} else if (!strcmp(cmd, "managed")) {
			CUresult r = mem_managed(&p, parse_size(a), 1);
			answer(r, K_PTR, p);
		} else if (!strcmp(cmd, "async")) {
			CUresult r = mem_async(&p, parse_size(a), NULL);
			answer(r, K_ASYNC, p);
		} else if (!strcmp(cmd, "pool")) {
			void *pl = NULL;
			CUresult r = default_pool(&pl, curdev);
			if (r == 0)
				r = mem_pool(&p, parse_size(a), pl, NULL);
			answer(r, K_ASYNC, p);
		} else if (!strcmp(cmd, "create")) {
			int prop[8] = {1, 0, 1, 0}; /* pinned, no handle type, on device 0 */
			unsigned long long h = 0;
			CUresult r = mem_create(&h, parse_size(a), prop, 0);
			answer(r, K_HANDLE, h);
		} else if (!strcmp(cmd, "pitch")) {
			size_t pitch = 0;
			CUresult r = mem_pitch(&p, &pitch, parse_size(a), parse_size(b), 4);
			answer(r, K_PTR, p);
		} else if (!strcmp(cmd, "array") || !strcmp(cmd, "array3d")) {
			struct { size_t w, h, d; int fmt; unsigned int ch, fl; } d3 = {parse_size(a), parse_size(b), parse_size(c), 0x20, 1, 0};
			struct { size_t w, h; int fmt; unsigned int ch; } d2 = {parse_size(a), parse_size(b), 0x20, 1};
			void *arr = NULL;
			CUresult r = cmd[5] ? array3d_create(&arr, &d3) : array_create(&arr, &d2);
			answer(r, K_ARRAY, (uintptr_t)arr);
		} else if (!strcmp(cmd, "mipmap")) {
			struct { size_t w, h, d; int fmt; unsigned int ch, fl; } d3 = {parse_size(a), parse_size(b), parse_size(c), 0x20, 1, (unsigned int)atoi(e)};
			void *arr = NULL;
			CUresult r = mipmap_create(&arr, &d3, (unsigned int)atoi(f));
			answer(r, K_MIPMAP, (uintptr_t)arr);
		} else if (!strcmp(cmd, "free")) {
			struct obj *o = &objs[atoi(a)];
			CUresult r = o->kind == K_PTR ? mem_free(o->v)
				   : o->kind == K_ASYNC ? mem_free_async(o->v, NULL)
				   : o->kind == K_HANDLE ? mem_release(o->v)
				   : o->kind == K_MAPPING ? mem_unmap(o->v, o->n)
				   : o->kind == K_MIPMAP  ? mipmap_destroy((void *)(uintptr_t)o->v)
				   : o->kind == K_POOL    ? pool_destroy((void *)(uintptr_t)o->v)
							 : array_destroy((void *)(uintptr_t)o->v);
			if (r)
				printf("err %d\n", r);
			else
				printf("ok\n");
		} else if (!strcmp(cmd, "map")) {
			static CUdeviceptr next_va = 1ULL << 46;
			uint64_t n = parse_size(b);
			CUdeviceptr va = next_va;
			CUresult r = mem_map(va, n, 0, objs[atoi(a)].v, 0);
			if (r == 0) {
				next_va += (n + (1ULL << 21) - 1) >> 21 << 21;
				objs[nobjs].n = n;
			}
			answer(r, K_MAPPING, va);
		} else if (!strcmp(cmd, "retain")) {
			unsigned long long h = 0;
			CUresult r = mem_retain(&h, (void *)(uintptr_t)objs[atoi(a)].v);
			answer(r, K_HANDLE, h);
		} else if (!strcmp(cmd, "freealloc")) {
			struct obj *o = &objs[atoi(a)];
			between_kind = o->kind;
			between_size = parse_size(b);
			between_r = -1;
			on_free(between);
			CUresult r = o->kind == K_HANDLE ? mem_release(o->v) : mem_free(o->v);
			on_free(NULL);
			if (r)
				printf("err %d\n", r);
			else
				answer(between_r, o->kind, between_v);
		} else if (!strcmp(cmd, "info")) {
			size_t f = 0, t = 0;
			CUresult r = mem_info(&f, &t);
			if (r)
				printf("err %d\n", r);
			else
				printf("info %zu %zu\n", f, t);
		} else if (!strcmp(cmd, "total") || !strcmp(cmd, "total1")) {
			size_t n = 0;
			unsigned int n1 = 0;
			CUresult r = cmd[5] ? total_mem1(&n1, curdev) : total_mem(&n, curdev);
			if (r)
				printf("err %d\n", r);
			else
				printf("total %zu\n", cmd[5] ? (size_t)n1 : n);
		} else if (!strcmp(cmd, "poolkeep") || !strcmp(cmd, "trim")) {
			void *pl = NULL;
			uint64_t v = parse_size(a);
			CUresult r = default_pool(&pl, curdev);
			if (r == 0)
				r = cmd[0] == 'p' ? pool_set(pl, 4, &v) : pool_trim(pl, v);
			if (r)
				printf("err %d\n", r);
			else
				printf("ok\n");
		} else if (!strcmp(cmd, "mkpool")) {
			void *pl = NULL;
			CUresult r = pool_create(&pl, NULL);
			answer(r, K_POOL, (uintptr_t)pl);
		} else if (!strcmp(cmd, "frompool")) {
			CUresult r = mem_pool(&p, parse_size(b), (void *)(uintptr_t)objs[atoi(a)].v, NULL);
			answer(r, K_ASYNC, p);
		} else if (!strcmp(cmd, "racepool")) {
			pthread_t th;
			size_t fr = 0, tot = 0;
			race_size = parse_size(a);
			race_go = race_done = 0;
			pthread_create(&th, NULL, race_main, NULL);
			on_attr(race_hook);
			mem_info(&fr, &tot);
			pthread_join(th, NULL);
			if (race_r)
				printf("raced err %d\n", race_r);
			else
				printf("raced ok\n");
		} else if (!strcmp(cmd, "gpa")) {
			void *fn = NULL;
			Dl_info in;
			CUresult r = !gpa ? -1
				   : a[0] == '1' ? gpa1(b, &fn, atoi(c), strtoull(e, NULL, 10))
						 : gpa(b, &fn, atoi(c), strtoull(e, NULL, 10), NULL);
			if (r)
				printf("err %d\n", r);
			else if (!fn || !dladdr(fn, &in) || !in.dli_fname)
				printf("from nowhere\n");
			else
				printf("from %s\n", strrchr(in.dli_fname, '/') ? strrchr(in.dli_fname, '/') + 1 : in.dli_fname);
		} else if (!strcmp(cmd, "fail")) {
			fake_fail(atoi(a), atoi(b));
			printf("ok\n");
		} else if (!strcmp(cmd, "used")) {
			printf("used %llu\n", fake_used());
		} else if (!strcmp(cmd, "dev")) {
			curdev = atoi(a);
			set_device(curdev);
			printf("ok\n");
		} else if (!strcmp(cmd, "threads")) {
			threads(atoi(a), atoi(b), parse_size(c));
		} else if (!strcmp(cmd, "bg")) {
			bg_size = parse_size(a);
			pthread_create(&bg_thread, NULL, bg_main, NULL);
			printf("started\n");
		} else if (!strcmp(cmd, "cancel")) {
			void *ret = NULL;
			pthread_cancel(bg_thread);
			pthread_join(bg_thread, &ret);
			if (ret == PTHREAD_CANCELED && bg_r == -1)
				printf("cancelled\n");
			else if (bg_r == 0)
				printf("finished ok\n");
			else
				printf("finished err %d\n", bg_r);
		} else if (!strcmp(cmd, "fork")) {
			fflush(stdout);
			pid_t pid = fork();
			if (pid == 0) {
				CUresult r = b[0] ? mem_free(objs[atoi(b)].v) : 0;
				if (r != 0)
					_exit(100 + r);
				r = mem_alloc(&p, parse_size(a));
				_exit(r == 0 ? 0 : 10 + r);
			}
			int st = 0;
			waitpid(pid, &st, 0);
			int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
			if (code == 0)
				printf("child ok\n");
			else if (code >= 100)
				printf("child free err %d\n", code - 100);
			else
				printf("child err %d\n", code - 10);
		} else if (!strcmp(cmd, "clobber")) {
			/* What a shell's redirections (exec 5>file) and a daemon's dup2 onto its own
			 * numbers do: every open descriptor from 3 below a now names /dev/null. */
			int null = open("/dev/null", O_RDWR);
			int n = 0;
			for (int fd = 3; fd < atoi(a); fd++)
				if (fd != null && fcntl(fd, F_GETFD) >= 0 && dup2(null, fd) == fd)
					n++;
			close(null);
			printf("clobbered %d\n", n);
		} else if (!strcmp(cmd, "spawn")) {
			spawn(a, b);
		} else if (!strcmp(cmd, "exit")) {
			exit(0);
		} else {
			printf("unknown %s\n", cmd);
		}
		fflush(stdout);
	}
	return 0;
}
