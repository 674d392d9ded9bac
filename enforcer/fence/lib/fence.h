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

/* interpose.c's wrappers of cuGetProcAddress (v1 and v2 signatures), for gf_wrappers. */
CUresult get_proc1_0(const char *sym, void **pfn, int v, cuuint64_t fl);
CUresult get_proc1_1(const char *sym, void **pfn, int v, cuuint64_t fl);
CUresult get_proc2_0(const char *sym, void **pfn, int v, cuuint64_t fl, int *st);
CUresult get_proc2_1(const char *sym, void **pfn, int v, cuuint64_t fl, int *st);

/* What a process that no reservation places may allocate on a GPU (identity.c). */
#define GF_UNPLACED_ALLOWANCE (64ull << 20)

struct gf_map;
/* gf_place attaches m to the task that this process, or its nearest ancestor that says, holds
 * a reservation of on GPU uuid; without one anywhere, to a private table of the allowance. It
 * says on stderr why not, once; -1: the GPU stays unfenced (no fence, or a table it cannot use). */
int gf_place(const char *uuid, struct gf_map *m);

#define REAL(api, slot, type) ((type)real_of(api, slot))

/* Two dynamic slots per entry point, and the exported names. */
#define DYN(impl, params, ...)                                                 \
	static CUresult impl##_0 params { return impl(0, __VA_ARGS__); }      \
	static CUresult impl##_1 params { return impl(1, __VA_ARGS__); }
#define EXPORT(sym, impl, slot, params, ...) \
	GF_EXPORT CUresult sym params { return impl(slot, __VA_ARGS__); }

#endif
