/* What the fence's interposition assumes of the real driver, asked of it (acctest/gpu's
 * TestDriverFacts runs this with the fence and without it; docs/benchmarks.md, "The next H200
 * calls", item 8). It reaches libcuda by dlopen, as the CUDA runtime does, so it builds where no
 * CUDA is installed.
 *
 *   driver-facts entries   each entry point's address from dlsym and from cuGetProcAddress_v2
 *                          under each stream flag, with the object that holds it
 *   driver-facts fds MIB   after a context and an allocation of MIB: the driver's descriptors,
 *                          whether close-on-exec, and the allocation's result
 *   driver-facts fork N    a thread's first allocation raced by N fork-and-exit children
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static void *drv;
static void *ctx; /* device 0's primary context, NULL on the fake driver */
static CUresult (*set_current)(void *);

static void *need(const char *name)
{
	void *p = dlsym(drv, name);
	if (!p) {
		fprintf(stderr, "driver-facts: libcuda has no %s\n", name);
		exit(3);
	}
	return p;
}

/* start loads the driver and makes device 0's primary context current (the fence's tests' fake
 * driver has no contexts: there it only initializes). */
static void start(void)
{
	drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!drv) {
		fprintf(stderr, "driver-facts: %s\n", dlerror());
		exit(3);
	}
	CUresult (*init)(unsigned) = need("cuInit");
	CUresult (*get)(int *, int) = dlsym(drv, "cuDeviceGet");
	CUresult (*retain)(void **, int) = dlsym(drv, "cuDevicePrimaryCtxRetain");
	set_current = dlsym(drv, "cuCtxSetCurrent");
	int dev = 0;
	CUresult r = init(0);
	if (r == 0 && get && retain && set_current) {
		r = get(&dev, 0);
		if (r == 0)
			r = retain(&ctx, dev);
		if (r == 0)
			r = set_current(ctx);
	}
	if (r != 0) {
		fprintf(stderr, "driver-facts: no context: CUresult %d\n", r);
		exit(3);
	}
}

static const char *object(void *p)
{
	Dl_info in;
	if (!p || !dladdr(p, &in) || !in.dli_fname)
		return "-";
	const char *b = strrchr(in.dli_fname, '/');
	return b ? b + 1 : in.dli_fname;
}

/* The names the runtime asks cuGetProcAddress for, beside the exported symbol a program linked
 * against libcuda binds to. */
static const char *const entries[][2] = {
	{"cuMemAlloc", "cuMemAlloc_v2"},       {"cuMemFree", "cuMemFree_v2"},
	{"cuMemGetInfo", "cuMemGetInfo_v2"},   {"cuMemAllocAsync", "cuMemAllocAsync"},
	{"cuMemCreate", "cuMemCreate"},         {"cuMemAllocManaged", "cuMemAllocManaged"},
	{"cuMemAllocPitch", "cuMemAllocPitch_v2"}, {"cuGetProcAddress", "cuGetProcAddress_v2"},
};

static int print_entries(void)
{
	start();
	CUresult (*gpa)(const char *, void **, int, unsigned long long, int *) = need("cuGetProcAddress_v2");
	Dl_info in;
	if (dladdr(dlsym(drv, "cuInit"), &in) && in.dli_fname)
		printf("driver %s\n", in.dli_fname);
	for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
		void *by_name = dlsym(drv, entries[i][1]);
		printf("entry %s dlsym %p %s", entries[i][0], by_name, object(by_name));
		for (unsigned long long fl = 0; fl < 3; fl++) {
			void *p = NULL;
			int st = -1;
			CUresult r = gpa(entries[i][0], &p, 12000, fl, &st);
			printf(" gpa%llu %p %s %d/%d", fl, r == 0 ? p : NULL, r == 0 ? object(p) : "-", r, st);
		}
		printf("\n");
	}
	return 0;
}

static int print_fds(size_t mib)
{
	start();
	CUresult (*alloc)(CUdeviceptr *, size_t) = need("cuMemAlloc_v2");
	CUdeviceptr p = 0;
	printf("alloc %d\n", alloc(&p, mib << 20));
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return 3;
	struct dirent *e;
	while ((e = readdir(d))) {
		char path[300], target[256], info[300];
		snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
		ssize_t n = readlink(path, target, sizeof target - 1);
		if (n <= 0)
			continue;
		target[n] = 0;
		snprintf(info, sizeof info, "/proc/self/fdinfo/%s", e->d_name);
		FILE *f = fopen(info, "r");
		unsigned long flags = 0;
		char line[128];
		while (f && fgets(line, sizeof line, f))
			if (sscanf(line, "flags: %lo", &flags) == 1)
				break;
		if (f)
			fclose(f);
		printf("fd %s %s cloexec %d\n", e->d_name, target, (flags & 02000000) != 0);
	}
	closedir(d);
	return 0;
}

static CUresult (*alloc_fn)(CUdeviceptr *, size_t);
static CUresult first;

static void *first_alloc(void *arg)
{
	(void)arg;
	CUdeviceptr p = 0;
	first = ctx ? set_current(ctx) : 0; /* a context is current per thread */
	if (first == 0)
		first = alloc_fn(&p, 64 << 20);
	return NULL;
}

static int race_fork(int n)
{
	start();
	alloc_fn = need("cuMemAlloc_v2");
	pthread_t th;
	pthread_create(&th, NULL, first_alloc, NULL);
	int odd = 0;
	for (int i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid == 0)
			_exit(0);
		int st = 0;
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			odd++;
	}
	pthread_join(th, NULL);
	printf("fork %d children, %d odd, first alloc %d\n", n, odd, first);
	return odd != 0 || first != 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && strcmp(argv[1], "entries") == 0)
		return print_entries();
	if (argc >= 3 && strcmp(argv[1], "fds") == 0)
		return print_fds((size_t)atol(argv[2]));
	if (argc >= 3 && strcmp(argv[1], "fork") == 0)
		return race_fork(atoi(argv[2]));
	fprintf(stderr, "usage: driver-facts entries | fds MIB | fork N\n");
	return 2;
}
