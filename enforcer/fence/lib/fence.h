/* What the fence's two halves share: the interposition (interpose.c) and the accounting
 * (fence.c). Internal: nothing here is exported from the library. */
#ifndef GPUFRAC_FENCE_LIB_H
#define GPUFRAC_FENCE_LIB_H

#include <stdint.h>

#include "cuda_min.h"

#define GF_EXPORT __attribute__((visibility("default")))

/* The wrapped entry points. */
enum api {
	A_ALLOC,
	A_PITCH,
	A_MANAGED,
	A_FREE,
	A_INFO,
	A_CREATE,
	A_RELEASE,
	A_ASYNC,
	A_FREEASYNC,
	A_POOL,
	A_ARRAY,
	A_ARRAY3D,
	A_ARRAYDESTROY,
	A_MIPMAP,
	A_MIPMAPDESTROY,
	A_GPA1,
	A_GPA2,
	A_N
};

/* Slots 0 and 1 hold what dlsym and cuGetProcAddress hand out (a plain and a per-thread-stream
 * variant have one signature and two addresses); 2 and 3 back the exported names. */
#define SLOTS 4

/* The wrappers of each entry point's two dynamic slots (fence.c). */
extern void *const gf_wrappers[A_N][2];

typedef void *(*dlsym_fn)(void *, const char *);
dlsym_fn real_dlsym(void);
void *real_of(int api, int slot);
void *wrap_proc(const char *sym, int ver, void *p);
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* libc.c: the C library's dlsym (glibc's by version, another's from its symbol table); whether
 * the fence is passive (not glibc: nothing wrapped); a note said once when a passive process
 * reaches for the driver; fork handlers where the C library offers them. */
dlsym_fn gf_find_dlsym(void);
int gf_passive(void);
void gf_note_driver(void);
void gf_at_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void));

/* interpose.c's wrappers of cuGetProcAddress (v1 and v2 signatures), for gf_wrappers. */
CUresult get_proc1_0(const char *sym, void **pfn, int v, cuuint64_t fl);
CUresult get_proc1_1(const char *sym, void **pfn, int v, cuuint64_t fl);
CUresult get_proc2_0(const char *sym, void **pfn, int v, cuuint64_t fl, int *st);
CUresult get_proc2_1(const char *sym, void **pfn, int v, cuuint64_t fl, int *st);

#define REAL(api, slot, type) ((type)real_of(api, slot))

/* Two dynamic slots per entry point, and the exported names. */
#define DYN(impl, params, ...)                                                 \
	static CUresult impl##_0 params { return impl(0, __VA_ARGS__); }      \
	static CUresult impl##_1 params { return impl(1, __VA_ARGS__); }
#define EXPORT(sym, impl, slot, params, ...) \
	GF_EXPORT CUresult sym params { return impl(slot, __VA_ARGS__); }

#endif
