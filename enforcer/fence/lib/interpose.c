/*
 * How the fence reaches the driver's entry points. The CUDA runtime does not call driver symbols
 * by name: it asks dlsym(libcuda, "cuGetProcAddress") once and then asks that for every entry
 * point. So the fence interposes dlsym, wraps what cuGetProcAddress hands out, and (fence.c)
 * exports the driver's symbol names for programs linked against libcuda directly.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fence.h"

/* ---- messages: once per cause, on stderr, never through stdio buffers ---- */

void say(const char *fmt, ...)
{
	char buf[512];
	int n = snprintf(buf, sizeof buf, "gpufrac-fence[%d]: ", (int)getpid());
	va_list ap;
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof buf - 2)
		n = (int)sizeof buf - 2;
	buf[n++] = '\n';
	(void)!write(2, buf, (size_t)n);
}

/* ---- the real dlsym, and dlsym itself ---- */

__attribute__((visibility("hidden"), used)) dlsym_fn gf_real_dlsym;
static pthread_once_t real_once = PTHREAD_ONCE_INIT;

static void find_real_dlsym(void) { __atomic_store_n(&gf_real_dlsym, gf_find_dlsym(), __ATOMIC_RELEASE); }

dlsym_fn real_dlsym(void)
{
	pthread_once(&real_once, find_real_dlsym);
	return gf_real_dlsym;
}

__attribute__((visibility("hidden"), used)) void *gf_dlsym(void *handle, const char *name);

#if defined(__x86_64__)
/* dlsym(RTLD_NEXT, ...) answers relative to its caller's object, found from the return
 * address. A C wrapper would make every such lookup relative to the fence, so RTLD_NEXT goes
 * to the real dlsym by a tail jump that leaves the caller's return address in place. */
__asm__(".text\n"
	".globl dlsym\n"
	".type dlsym, @function\n"
	"dlsym:\n"
	"	cmpq $-1, %rdi\n"
	"	jne gf_dlsym\n"
	"	movq gf_real_dlsym(%rip), %rax\n"
	"	testq %rax, %rax\n"
	"	je gf_dlsym\n"
	"	jmp *%rax\n"
	".size dlsym, .-dlsym\n");
#else
/* Elsewhere RTLD_NEXT lookups made by other objects resolve relative to the fence. */
GF_EXPORT void *dlsym(void *handle, const char *name) { return gf_dlsym(handle, name); }
#endif

static void *real[A_N][SLOTS];

struct name {
	const char *sym; /* as dlsym and the exported symbols spell it */
	const char *gpa; /* as cuGetProcAddress is asked for it */
	int minver;      /* older ABIs of the same name take 32-bit sizes: left alone */
	int api;
	int slot; /* the exported name's slot */
};

static const struct name names[] = {
	{"cuMemAlloc_v2", "cuMemAlloc", 3020, A_ALLOC, 2},
	{"cuMemAllocPitch_v2", "cuMemAllocPitch", 3020, A_PITCH, 2},
	{"cuMemAllocManaged", "cuMemAllocManaged", 0, A_MANAGED, 2},
	{"cuMemFree_v2", "cuMemFree", 3020, A_FREE, 2},
	{"cuMemGetInfo_v2", "cuMemGetInfo", 3020, A_INFO, 2},
	{"cuMemCreate", "cuMemCreate", 0, A_CREATE, 2},
	{"cuMemRelease", "cuMemRelease", 0, A_RELEASE, 2},
	{"cuMemAllocAsync", "cuMemAllocAsync", 0, A_ASYNC, 2},
	{"cuMemAllocAsync_ptsz", NULL, 0, A_ASYNC, 3},
	{"cuMemFreeAsync", "cuMemFreeAsync", 0, A_FREEASYNC, 2},
	{"cuMemFreeAsync_ptsz", NULL, 0, A_FREEASYNC, 3},
	{"cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", 0, A_POOL, 2},
	{"cuMemAllocFromPoolAsync_ptsz", NULL, 0, A_POOL, 3},
	{"cuArrayCreate_v2", "cuArrayCreate", 3020, A_ARRAY, 2},
	{"cuArray3DCreate_v2", "cuArray3DCreate", 3020, A_ARRAY3D, 2},
	{"cuArrayDestroy", "cuArrayDestroy", 0, A_ARRAYDESTROY, 2},
	{"cuMipmappedArrayCreate", "cuMipmappedArrayCreate", 0, A_MIPMAP, 2},
	{"cuMipmappedArrayDestroy", "cuMipmappedArrayDestroy", 0, A_MIPMAPDESTROY, 2},
	{"cuDeviceTotalMem_v2", "cuDeviceTotalMem", 3020, A_TOTAL, 2},
	{"cuDeviceTotalMem", NULL, 0, A_TOTAL1, 2}, /* the 3.0 ABI: see wrap_proc */
	{"cuMemPoolTrimTo", "cuMemPoolTrimTo", 0, A_TRIM, 2},
	{"cuMemPoolDestroy", "cuMemPoolDestroy", 0, A_POOLDESTROY, 2},
	{"cuGetProcAddress", NULL, 0, A_GPA1, 2},
	{"cuGetProcAddress_v2", NULL, 0, A_GPA2, 2},
};
#define NNAMES (sizeof names / sizeof names[0])

void *real_of(int api, int slot)
{
	void *p = __atomic_load_n(&real[api][slot], __ATOMIC_ACQUIRE);
	if (p || slot < 2)
		return p;
	/* An exported name: the next definition after the fence's own is the driver's. */
	for (size_t i = 0; i < NNAMES; i++)
		if (names[i].api == api && names[i].slot == slot) {
			dlsym_fn f = real_dlsym();
			p = f ? f(RTLD_NEXT, names[i].sym) : NULL;
			__atomic_store_n(&real[api][slot], p, __ATOMIC_RELEASE);
			break;
		}
	return p;
}

static int from_driver(void *p)
{
	Dl_info info;
	if (!dladdr(p, &info) || !info.dli_fname)
		return 0;
	const char *base = strrchr(info.dli_fname, '/');
	base = base ? base + 1 : info.dli_fname;
	return strncmp(base, "libcuda.so", 10) == 0;
}

/* wrap swaps a driver address for the fence's wrapper of the same signature. */
static void *wrap(int api, void *p)
{
	if (!p || !from_driver(p))
		return p;
	for (int s = 0; s < 2; s++) {
		void *want = NULL;
		if (__atomic_compare_exchange_n(&real[api][s], &want, p, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
		    want == p)
			return gf_wrappers[api][s];
	}
	static int warned;
	if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
		say("a third driver address for one entry point: left unfenced");
	return p;
}

void *gf_dlsym(void *handle, const char *name)
{
	dlsym_fn f = real_dlsym();
	if (!f)
		return NULL;
	void *p = f(handle, name);
	if (!p || !name || name[0] != 'c' || name[1] != 'u')
		return p;
	for (size_t i = 0; i < NNAMES; i++)
		if (strcmp(names[i].sym, name) == 0) {
			if (!gf_passive())
				return wrap(names[i].api, p);
			gf_note_driver();
			return p;
		}
	return p;
}

void *wrap_proc(const char *sym, int ver, void *p)
{
	if (!sym || sym[0] != 'c' || sym[1] != 'u' || gf_passive())
		return p;
	if (strcmp(sym, "cuGetProcAddress") == 0)
		return wrap(ver >= 12000 ? A_GPA2 : A_GPA1, p);
	if (strcmp(sym, "cuDeviceTotalMem") == 0 && ver < 3020)
		return wrap(A_TOTAL1, p); /* 32-bit sizes: a wrapper of its own */
	for (size_t i = 0; i < NNAMES; i++)
		if (names[i].gpa && strcmp(names[i].gpa, sym) == 0)
			return ver >= names[i].minver ? wrap(names[i].api, p) : p;
	return p;
}

/* ---- cuGetProcAddress itself ---- */

typedef CUresult (*gpa1_fn)(const char *, void **, int, cuuint64_t);
static CUresult get_proc1(int s, const char *sym, void **pfn, int ver, cuuint64_t flags)
{
	gpa1_fn f = REAL(A_GPA1, s, gpa1_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = f(sym, pfn, ver, flags);
	if (r == CUDA_SUCCESS && pfn)
		*pfn = wrap_proc(sym, ver, *pfn);
	return r;
}

typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t, int *);
static CUresult get_proc2(int s, const char *sym, void **pfn, int ver, cuuint64_t flags, int *status)
{
	gpa2_fn f = REAL(A_GPA2, s, gpa2_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = f(sym, pfn, ver, flags, status);
	if (r == CUDA_SUCCESS && pfn)
		*pfn = wrap_proc(sym, ver, *pfn);
	return r;
}

CUresult get_proc1_0(const char *sym, void **pfn, int v, cuuint64_t fl) { return get_proc1(0, sym, pfn, v, fl); }
CUresult get_proc1_1(const char *sym, void **pfn, int v, cuuint64_t fl) { return get_proc1(1, sym, pfn, v, fl); }
CUresult get_proc2_0(const char *sym, void **pfn, int v, cuuint64_t fl, int *st) { return get_proc2(0, sym, pfn, v, fl, st); }
CUresult get_proc2_1(const char *sym, void **pfn, int v, cuuint64_t fl, int *st) { return get_proc2(1, sym, pfn, v, fl, st); }

EXPORT(cuGetProcAddress, get_proc1, 2, (const char *sym, void **pfn, int v, cuuint64_t fl), sym, pfn, v, fl)
EXPORT(cuGetProcAddress_v2, get_proc2, 2, (const char *sym, void **pfn, int v, cuuint64_t fl, int *st), sym, pfn,
       v, fl, st)
