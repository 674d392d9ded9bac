/* What the fence's two halves share: the interposition (interpose.c) and the accounting
 * (fence.c). Internal: nothing here is exported from the library. */
#ifndef GPUFRAC_FENCE_LIB_H
#define GPUFRAC_FENCE_LIB_H

#include <stdint.h>

#include "../state.h"
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
	A_TOTAL,
	A_TOTAL1,
	A_TRIM,
	A_POOLDESTROY,
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

#define GF_MAX_DEV 64

/* ---- fence.c: the process's view of each GPU, its charges and its records ---- */

enum { DEV_UNKNOWN = 0, DEV_FENCED, DEV_OPEN };

struct dev {
	int state;
	int warned_refusal;
	struct gf_map m;
	char uuid[GF_UUID_MAX];
};

enum { K_PTR = 1, K_HANDLE, K_ARRAY, K_MIPMAP };

/* device is the fenced view of GPU ordinal (< 0: the calling thread's context's), or NULL. */
struct dev *device(int ordinal);
/* driver_sym finds a driver entry point the fence calls itself (unwrapped). */
void *driver_sym(const char *name);
/* charge asks the task's table for n bytes: GF_OK, GF_OK_OWED, GF_REFUSED or GF_NOTASK. */
int charge(struct dev *d, uint64_t n);
/* track remembers an allocation for its free; pool is a pool.c index or -1. */
void track(struct dev *d, int kind, uint64_t key, uint64_t size, int pool);
void untrack(int kind, uint64_t key);
/* settle waits a moment for a driver still releasing a stopped borrower's memory. */
void settle(void);
#define SETTLE_TRIES 400

/* pool.c: a pooled allocation of size bytes was freed; pools_settle charges each pool of d
 * what the driver holds for it now. */
void pool_freed(struct dev *d, int pool, uint64_t size);
void pools_settle(struct dev *d);
void pools_forget(void); /* a forked child starts with none */
int dev_ordinal(struct dev *d);

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
/* The same, for wrappers gf_wrappers reaches from another file. */
#define DYNX(impl, params, ...)                                         \
	CUresult impl##_0 params { return impl(0, __VA_ARGS__); }      \
	CUresult impl##_1 params { return impl(1, __VA_ARGS__); }
#define DECL(impl, params) CUresult impl##_0 params; CUresult impl##_1 params;
DECL(mem_get_info, (size_t * f, size_t *t))
DECL(total_mem, (size_t * b, CUdevice dev))
DECL(total_mem1, (unsigned int *b, CUdevice dev))
DECL(mem_alloc_async, (CUdeviceptr * p, size_t n, CUstream st))
DECL(mem_free_async, (CUdeviceptr p, CUstream st))
DECL(mem_alloc_pool, (CUdeviceptr * p, size_t n, CUmemoryPool pl, CUstream st))
DECL(pool_trim, (CUmemoryPool pl, size_t keep))
DECL(pool_destroy, (CUmemoryPool pl))

#define EXPORT(sym, impl, slot, params, ...) \
	GF_EXPORT CUresult sym params { return impl(slot, __VA_ARGS__); }

#endif
