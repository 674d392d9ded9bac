/* What the library's files share. Internal: nothing here is exported from the library. The
 * arrows go one way: interpose.c hands out the wrappers of fence.c, view.c and pool.c in place
 * of the driver's entry points (fence.c's and view.c's wrappers also reach pool.c); the wrappers
 * charge through account.c, which places its process through identity.c; the driver is called
 * through lookup.c, which finds the C library's dlsym in libc.c; every file may say (say.c). */
#ifndef GPUFRAC_FENCE_LIB_H
#define GPUFRAC_FENCE_LIB_H

#include <pthread.h>
#include <stdint.h>

#include "../state.h"
#include "cuda_min.h"
#include "lookup.h"
#include "say.h"

#define GF_EXPORT __attribute__((visibility("default")))

typedef void *(*dlsym_fn)(void *, const char *);

/* libc.c: the C library's dlsym (glibc's by version, another's from its symbol table); whether
 * the fence is passive (not glibc: nothing wrapped); a note said once when a passive process
 * reaches for the driver; fork handlers where the C library offers them. */
dlsym_fn gf_find_dlsym(void);
int gf_passive(void);
void gf_note_driver(void);
void gf_at_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void));
/* real_dlsym is the C library's dlsym, found once. */
dlsym_fn real_dlsym(void);

#define GF_MAX_DEV 64

/* ---- account.c: the process's view of each GPU, its charges and its records ---- */

enum { DEV_UNKNOWN = 0, DEV_FENCED, DEV_OPEN };

struct dev {
	int state;
	int warned_refusal;
	struct gf_map m;
	char uuid[GF_UUID_MAX];
};

enum { K_PTR = 1, K_HANDLE, K_ARRAY, K_MIPMAP, K_MAP };

/* device is the fenced view of GPU ordinal (< 0: the calling thread's context's), or NULL. */
struct dev *device(int ordinal);
int dev_ordinal(struct dev *d);
/* charge asks the task's table for n bytes: GF_OK, GF_OK_OWED, GF_REFUSED or GF_NOTASK. */
int charge(struct dev *d, uint64_t n);

/* What a free gives back: size bytes of d, from pool (a pool.c index) or -1 for none. */
struct freed {
	struct dev *d;
	int pool;
	uint64_t size;
};
/* track remembers an allocation for its free; pool is a pool.c index or -1. It returns 1 with
 * stale set when the driver reused an address whose free the fence never saw: that memory is
 * gone, and the caller gives it back (give_freed). */
int track(struct dev *d, int kind, uint64_t key, uint64_t size, int pool, struct freed *stale);
/* untrack forgets an allocation before its free reaches the driver: 1 with out set when it was
 * fenced, for the caller to give back (give_freed) once the driver freed it, or to track again
 * when the free failed. Forgotten after the driver's free, it was forgotten in place of an
 * allocation that another thread got at the same address in between, whose bytes then went
 * back while it held them. */
int untrack(int kind, uint64_t key, struct freed *out);
/* freed_by_driver ends a free untrack began (had: its answer, f: what it set) once the driver
 * answered r: the bytes go back where the driver freed them, the record comes back where it
 * did not. */
void freed_by_driver(int had, const struct freed *f, int kind, uint64_t key, CUresult r);
/* A handle's memory (cuMemCreate) lives until it is released and unmapped, whichever comes last
 * (the driver's own rule): a release while a mapping or a retained reference holds it gives
 * nothing back. handle_release is called before the driver's release: 1 with out set when it
 * gives the bytes back (give_freed once the driver released it), 2 when it only dropped a
 * reference (handle_retained undoes that where the driver failed), 0 when the handle is not the
 * fence's. handle_mapped and handle_retained count a mapping or reference the driver made;
 * handle_unmapped forgets the mappings of a range the driver unmapped that were made before
 * maps_now was since, and gives back what no reference or mapping holds any more. */
int handle_release(uint64_t h, struct freed *out);
void handle_retained(uint64_t h);
void handle_mapped(uint64_t va, uint64_t size, uint64_t h);
uint64_t maps_now(void);
void handle_unmapped(uint64_t va, uint64_t size, uint64_t since);
/* settle waits a moment for a driver still releasing a stopped borrower's memory. */
void settle(void);
#define SETTLE_TRIES 400
/* For fork and exit: the record table's lock, forgetting everything in a forked child (which
 * unlocks it). */
void account_lock(void);
void account_unlock(void);
void account_forget(void);

/* pool.c: give_freed gives a free's bytes back, to its pool (which may keep the memory: it is
 * charged what the driver holds for it) or to the table; pools_settle charges each pool of d
 * what the driver holds for it now. */
void give_freed(const struct freed *f);
void pools_settle(struct dev *d);
void pools_forget(void); /* a forked child starts with none */

/* FREED runs the driver's free of an allocation of kind at key (untrack says why in this order). */
#define FREED(kind, key, call)                                                  \
	do {                                                                    \
		struct freed fr_;                                               \
		int had_ = untrack((kind), (uint64_t)(key), &fr_);              \
		CUresult r_ = (call);                                           \
		freed_by_driver(had_, &fr_, (kind), (uint64_t)(key), r_);       \
		return r_;                                                      \
	} while (0)

/* What a process that no reservation places may allocate on a GPU (identity.c). */
#define GF_UNPLACED_ALLOWANCE (64ull << 20)

struct gf_map;
/* gf_place attaches m to the task that this process, or its nearest ancestor that says, holds
 * a reservation of on GPU uuid; without one anywhere, to a private table of the allowance. It
 * says on stderr why not, once; -1: the GPU stays unfenced (no fence, or a table it cannot use). */
int gf_place(const char *uuid, struct gf_map *m);

/* A wrapped entry point runs with cancellation off. The driver's calls hold no cancellation
 * point, the fence's do (the waits' nanosleep, the attach's open and read, a message's write):
 * a thread cancelled inside one left its wait flagged in its task's file until the process
 * allocated again or ended (no guarantee placed on the GPU meanwhile, an owed wait refusing
 * every borrower), or the record table's lock held (every later allocation of the process
 * hung). Cancellation now comes at the caller's next cancellation point, as with the driver
 * alone. */
#define FENCED(impl, slot, ...)                                                         \
	do {                                                                            \
		int cs_, ignored_;                                                      \
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs_);                   \
		CUresult r_ = impl(slot, __VA_ARGS__);                                  \
		pthread_setcancelstate(cs_, &ignored_);                                 \
		return r_;                                                              \
	} while (0)

/* Two dynamic slots per entry point (interpose.c hands them out), and the exported names. */
#define DYNX(impl, params, ...)                                         \
	CUresult impl##_0 params { FENCED(impl, 0, __VA_ARGS__); }     \
	CUresult impl##_1 params { FENCED(impl, 1, __VA_ARGS__); }
#define DECL(impl, params) CUresult impl##_0 params; CUresult impl##_1 params;
DECL(mem_alloc, (CUdeviceptr * p, size_t n))
DECL(mem_alloc_pitch, (CUdeviceptr * p, size_t *pi, size_t w, size_t h, unsigned int e))
DECL(mem_alloc_managed, (CUdeviceptr * p, size_t n, unsigned int fl))
DECL(mem_free, (CUdeviceptr p))
DECL(mem_create, (CUmemGenericAllocationHandle * h, size_t n, const void *pr, unsigned long long fl))
DECL(mem_release, (CUmemGenericAllocationHandle h))
DECL(mem_map, (CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long fl))
DECL(mem_unmap, (CUdeviceptr p, size_t n))
DECL(mem_retain, (CUmemGenericAllocationHandle * h, void *addr))
DECL(array_create, (CUarray * a, const CUDA_ARRAY_DESCRIPTOR *d))
DECL(array3d_create, (CUarray * a, const CUDA_ARRAY3D_DESCRIPTOR *d))
DECL(array_destroy, (CUarray a))
DECL(mipmap_create, (CUmipmappedArray * a, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int l))
DECL(mipmap_destroy, (CUmipmappedArray a))
DECL(mem_get_info, (size_t * f, size_t *t))
DECL(total_mem, (size_t * b, CUdevice dev))
DECL(total_mem1, (unsigned int *b, CUdevice dev))
DECL(mem_alloc_async, (CUdeviceptr * p, size_t n, CUstream st))
DECL(mem_free_async, (CUdeviceptr p, CUstream st))
DECL(mem_alloc_pool, (CUdeviceptr * p, size_t n, CUmemoryPool pl, CUstream st))
DECL(pool_trim, (CUmemoryPool pl, size_t keep))
DECL(pool_destroy, (CUmemoryPool pl))

#define EXPORT(sym, impl, slot, params, ...) \
	GF_EXPORT CUresult sym params { FENCED(impl, slot, __VA_ARGS__); }

#endif
