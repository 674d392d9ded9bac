/*
 * How the fence reaches the driver's entry points. The CUDA runtime does not call driver symbols
 * by name: it asks dlsym(libcuda, "cuGetProcAddress") once and then asks that for every entry
 * point. So the fence interposes dlsym, wraps what cuGetProcAddress hands out, and (fence.c)
 * exports the driver's symbol names for programs linked against libcuda directly.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "fence.h"

__attribute__((visibility("hidden"), used)) void *gf_dlsym(void *handle, const char *name);

#if defined(__x86_64__)
/* dlsym(RTLD_NEXT, ...) answers relative to its caller's object, found from the return
 * address. A C wrapper would make every such lookup relative to the fence, so RTLD_NEXT goes
 * to the real dlsym by a tail jump that leaves the caller's return address in place. The real
 * dlsym is found here when the fence's constructor has not run yet: another preloaded library
 * listed after the fence (a task's LD_PRELOAD keeps the fence first) has its constructor run
 * before the fence's, and its dlsym(RTLD_NEXT, ...) there, answered relative to the fence,
 * found its own definition, which then called itself. */
__asm__(".text\n"
	".globl dlsym\n"
	".type dlsym, @function\n"
	"dlsym:\n"
	"	.cfi_startproc\n"
	"	cmpq $-1, %rdi\n"
	"	jne gf_dlsym\n"
	"	movq gf_real_dlsym(%rip), %rax\n"
	"	testq %rax, %rax\n"
	"	jne 1f\n"
	"	pushq %rdi\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	pushq %rsi\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	subq $8, %rsp\n" /* the call's stack aligned to 16 bytes */
	"	.cfi_adjust_cfa_offset 8\n"
	"	call real_dlsym\n"
	"	addq $8, %rsp\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	popq %rsi\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	popq %rdi\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	testq %rax, %rax\n"
	"	je gf_dlsym\n"
	"1:\n"
	"	jmp *%rax\n"
	"	.cfi_endproc\n"
	".size dlsym, .-dlsym\n");
#else
/* Elsewhere RTLD_NEXT lookups made by other objects resolve relative to the fence. */
GF_EXPORT void *dlsym(void *handle, const char *name) { return gf_dlsym(handle, name); }
#endif

static CUresult get_proc1_0(const char *sym, void **pfn, int v, cuuint64_t fl);
static CUresult get_proc1_1(const char *sym, void **pfn, int v, cuuint64_t fl);
static CUresult get_proc2_0(const char *sym, void **pfn, int v, cuuint64_t fl, int *st);
static CUresult get_proc2_1(const char *sym, void **pfn, int v, cuuint64_t fl, int *st);

/* What the fence hands out for each entry point's two dynamic slots: set before any
 * constructor runs, since dlsym may be asked before the fence is initialized. */
static void *const wrappers[A_N][2] = {
	[A_ALLOC] = {(void *)mem_alloc_0, (void *)mem_alloc_1}, /* fence.c */
	[A_PITCH] = {(void *)mem_alloc_pitch_0, (void *)mem_alloc_pitch_1},
	[A_MANAGED] = {(void *)mem_alloc_managed_0, (void *)mem_alloc_managed_1},
	[A_FREE] = {(void *)mem_free_0, (void *)mem_free_1},
	[A_INFO] = {(void *)mem_get_info_0, (void *)mem_get_info_1}, /* view.c */
	[A_CREATE] = {(void *)mem_create_0, (void *)mem_create_1},
	[A_RELEASE] = {(void *)mem_release_0, (void *)mem_release_1},
	[A_MAP] = {(void *)mem_map_0, (void *)mem_map_1},
	[A_UNMAP] = {(void *)mem_unmap_0, (void *)mem_unmap_1},
	[A_RETAIN] = {(void *)mem_retain_0, (void *)mem_retain_1},
	[A_ASYNC] = {(void *)mem_alloc_async_0, (void *)mem_alloc_async_1}, /* pool.c */
	[A_FREEASYNC] = {(void *)mem_free_async_0, (void *)mem_free_async_1},
	[A_POOL] = {(void *)mem_alloc_pool_0, (void *)mem_alloc_pool_1},
	[A_ARRAY] = {(void *)array_create_0, (void *)array_create_1},
	[A_ARRAY3D] = {(void *)array3d_create_0, (void *)array3d_create_1},
	[A_ARRAYDESTROY] = {(void *)array_destroy_0, (void *)array_destroy_1},
	[A_MIPMAP] = {(void *)mipmap_create_0, (void *)mipmap_create_1},
	[A_MIPMAPDESTROY] = {(void *)mipmap_destroy_0, (void *)mipmap_destroy_1},
	[A_TOTAL] = {(void *)total_mem_0, (void *)total_mem_1}, /* view.c */
	[A_TOTAL1] = {(void *)total_mem1_0, (void *)total_mem1_1},
	[A_TRIM] = {(void *)pool_trim_0, (void *)pool_trim_1}, /* pool.c */
	[A_POOLDESTROY] = {(void *)pool_destroy_0, (void *)pool_destroy_1},
	[A_GPA1] = {(void *)get_proc1_0, (void *)get_proc1_1}, /* below */
	[A_GPA2] = {(void *)get_proc2_0, (void *)get_proc2_1},
};

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
	for (int s = 0; s < 2; s++)
		if (gf_real_claim(api, s, p))
			return wrappers[api][s];
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
	for (size_t i = 0; i < gf_nnames; i++)
		if (strcmp(gf_names[i].sym, name) == 0) {
			if (!gf_passive())
				return wrap(gf_names[i].api, p);
			gf_note_driver();
			return p;
		}
	return p;
}

static void *wrap_proc(const char *sym, int ver, void *p)
{
	if (!sym || sym[0] != 'c' || sym[1] != 'u' || gf_passive())
		return p;
	if (strcmp(sym, "cuGetProcAddress") == 0)
		return wrap(ver >= 12000 ? A_GPA2 : A_GPA1, p);
	if (strcmp(sym, "cuDeviceTotalMem") == 0 && ver < 3020)
		return wrap(A_TOTAL1, p); /* 32-bit sizes: a wrapper of its own */
	for (size_t i = 0; i < gf_nnames; i++)
		if (gf_names[i].gpa && strcmp(gf_names[i].gpa, sym) == 0)
			return ver >= gf_names[i].minver ? wrap(gf_names[i].api, p) : p;
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

static CUresult get_proc1_0(const char *sym, void **pfn, int v, cuuint64_t fl) { return get_proc1(0, sym, pfn, v, fl); }
static CUresult get_proc1_1(const char *sym, void **pfn, int v, cuuint64_t fl) { return get_proc1(1, sym, pfn, v, fl); }
static CUresult get_proc2_0(const char *sym, void **pfn, int v, cuuint64_t fl, int *st) { return get_proc2(0, sym, pfn, v, fl, st); }
static CUresult get_proc2_1(const char *sym, void **pfn, int v, cuuint64_t fl, int *st) { return get_proc2(1, sym, pfn, v, fl, st); }

EXPORT(cuGetProcAddress, get_proc1, 2, (const char *sym, void **pfn, int v, cuuint64_t fl), sym, pfn, v, fl)
EXPORT(cuGetProcAddress_v2, get_proc2, 2, (const char *sym, void **pfn, int v, cuuint64_t fl, int *st), sym, pfn,
       v, fl, st)
