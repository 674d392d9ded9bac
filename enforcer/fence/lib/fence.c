/*
 * libgpufrac-fence.so: loaded with LD_PRELOAD into every process of a task, it refuses a device
 * allocation that would take the task (all its processes on that GPU) past its cap, with
 * CUDA_ERROR_OUT_OF_MEMORY, so the violator fails inside its own process and no neighbour
 * ever meets a full GPU. docs/enforcement.md says what it fences and what it cannot see.
 *
 * This file holds the wrappers of the plain allocation entry points and the library's life
 * cycle; account.c the process's accounting they charge, pool.c the stream-ordered pools,
 * view.c what the task is told the GPU holds. interpose.c hands the wrappers out in place of
 * the driver's; lookup.c keeps the driver's addresses they call.
 */
#define _GNU_SOURCE
#include <stdint.h>

#include "../state.h"
#include "fence.h"

/* ---- the wrappers ---- */

/* guarded runs one allocation of n bytes on device d under the fence. */
#define GUARDED(d, n, call, kind, key)                                                                  \
	do {                                                                                            \
		int c_ = (d) ? charge((d), (n)) : GF_NOTASK;                                            \
		struct freed stale_;                                                                    \
		if (c_ == GF_REFUSED)                                                                   \
			return CUDA_ERROR_OUT_OF_MEMORY;                                                \
		CUresult r_ = (call);                                                                   \
		for (int t_ = 0; c_ == GF_OK_OWED && r_ == CUDA_ERROR_OUT_OF_MEMORY && t_ < SETTLE_TRIES; t_++) { \
			settle();                                                                       \
			r_ = (call);                                                                    \
		}                                                                                       \
		if (c_ == GF_OK || c_ == GF_OK_OWED) {                                                  \
			if (r_ == CUDA_SUCCESS && track((d), (kind), (uint64_t)(key), (n), -1, &stale_)) \
				give_freed(&stale_);                                                    \
			else if (r_ != CUDA_SUCCESS)                                                    \
				gf_uncharge(&(d)->m, (n));                                              \
		}                                                                                       \
		return r_;                                                                              \
	} while (0)

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
static CUresult mem_alloc(int s, CUdeviceptr *p, size_t n)
{
	alloc_fn f = REAL(A_ALLOC, s, alloc_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	GUARDED(device(-1), n, f(p, n), K_PTR, *p);
}

typedef CUresult (*pitch_fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
static CUresult mem_alloc_pitch(int s, CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned int e)
{
	pitch_fn f = REAL(A_PITCH, s, pitch_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	/* The driver pads rows to its own pitch; 512-byte rows bound it on current GPUs. */
	GUARDED(device(-1), ((w + 511) / 512) * 512 * h, f(p, pitch, w, h, e), K_PTR, *p);
}

typedef CUresult (*managed_fn)(CUdeviceptr *, size_t, unsigned int);
static CUresult mem_alloc_managed(int s, CUdeviceptr *p, size_t n, unsigned int flags)
{
	managed_fn f = REAL(A_MANAGED, s, managed_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	GUARDED(device(-1), n, f(p, n, flags), K_PTR, *p);
}

typedef CUresult (*free_fn)(CUdeviceptr);
static CUresult mem_free(int s, CUdeviceptr p)
{
	free_fn f = REAL(A_FREE, s, free_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	FREED(K_PTR, p, f(p));
}

typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const void *, unsigned long long);
static CUresult mem_create(int s, CUmemGenericAllocationHandle *h, size_t n, const void *prop, unsigned long long fl)
{
	create_fn f = REAL(A_CREATE, s, create_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	const CUmemAllocationPropHead *ph = prop;
	struct dev *d = NULL;
	if (ph && ph->locationType == CU_MEM_LOCATION_TYPE_DEVICE)
		d = device(ph->locationId);
	GUARDED(d, n, f(h, n, prop, fl), K_HANDLE, *h);
}

typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);
static CUresult mem_release(int s, CUmemGenericAllocationHandle h)
{
	release_fn f = REAL(A_RELEASE, s, release_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	struct freed fr;
	int how = handle_release(h, &fr);
	CUresult r = f(h);
	freed_by_driver(how == 1, &fr, K_HANDLE, h, r);
	if (how == 2 && r != CUDA_SUCCESS)
		handle_retained(h);
	return r;
}

typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
static CUresult mem_map(int s, CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long fl)
{
	map_fn f = REAL(A_MAP, s, map_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = f(p, n, off, h, fl);
	if (r == CUDA_SUCCESS)
		handle_mapped(p, n, h);
	return r;
}

typedef CUresult (*unmap_fn)(CUdeviceptr, size_t);
static CUresult mem_unmap(int s, CUdeviceptr p, size_t n)
{
	unmap_fn f = REAL(A_UNMAP, s, unmap_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	uint64_t since = maps_now();
	CUresult r = f(p, n);
	if (r == CUDA_SUCCESS)
		handle_unmapped(p, n, since);
	return r;
}

typedef CUresult (*retain_fn)(CUmemGenericAllocationHandle *, void *);
static CUresult mem_retain(int s, CUmemGenericAllocationHandle *h, void *addr)
{
	retain_fn f = REAL(A_RETAIN, s, retain_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = f(h, addr);
	if (r == CUDA_SUCCESS && h)
		handle_retained(*h);
	return r;
}

static uint64_t element_bytes(int format)
{
	switch (format) {
	case 0x01: case 0x08: return 1; /* 8-bit integers */
	case 0x02: case 0x09: case 0x10: return 2; /* 16-bit integers, half */
	default: return 4; /* 32-bit and the rest: an upper bound for packed formats */
	}
}

static uint64_t array_bytes(size_t w, size_t h, size_t depth, int format, unsigned int ch)
{
	return (uint64_t)w * (h ? h : 1) * (depth ? depth : 1) * (ch ? ch : 1) * element_bytes(format);
}

typedef CUresult (*array_fn)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
static CUresult array_create(int s, CUarray *a, const CUDA_ARRAY_DESCRIPTOR *ds)
{
	array_fn f = REAL(A_ARRAY, s, array_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	uint64_t n = ds ? array_bytes(ds->Width, ds->Height, 1, ds->Format, ds->NumChannels) : 0;
	GUARDED(ds ? device(-1) : NULL, n, f(a, ds), K_ARRAY, (uintptr_t)*a);
}

typedef CUresult (*array3d_fn)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
static CUresult array3d_create(int s, CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *ds)
{
	array3d_fn f = REAL(A_ARRAY3D, s, array3d_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	uint64_t n = ds ? array_bytes(ds->Width, ds->Height, ds->Depth, ds->Format, ds->NumChannels) : 0;
	GUARDED(ds ? device(-1) : NULL, n, f(a, ds), K_ARRAY, (uintptr_t)*a);
}

typedef CUresult (*array_destroy_fn)(CUarray);
static CUresult array_destroy(int s, CUarray a)
{
	array_destroy_fn f = REAL(A_ARRAYDESTROY, s, array_destroy_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	FREED(K_ARRAY, (uintptr_t)a, f(a));
}

/* mipmap_bytes sums a mipmapped array's levels: each halves every dimension down to 1, but a
 * layered or cubemap array's depth, which counts layers or faces. A 1D array's levels add up to
 * twice its first, a 2D one's to 4/3: one bound for all let 1D arrays pass a third uncharged.
 * Past 64 levels every dimension is 1, and the driver refuses so many anyway. */
#define MIPMAP_FIXED_DEPTH (0x01 | 0x04) /* CUDA_ARRAY3D_LAYERED, CUDA_ARRAY3D_CUBEMAP */
static uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *ds, unsigned int levels)
{
	size_t w = ds->Width, h = ds->Height, d = ds->Depth;
	uint64_t n = 0;
	for (unsigned int i = 0; i < (levels ? levels : 1) && i < 64; i++) {
		uint64_t level = array_bytes(w, h, d, ds->Format, ds->NumChannels);
		n = n + level < n ? UINT64_MAX : n + level;
		w = w > 1 ? w / 2 : w;
		h = h > 1 ? h / 2 : h;
		if (!(ds->Flags & MIPMAP_FIXED_DEPTH))
			d = d > 1 ? d / 2 : d;
	}
	return n;
}

typedef CUresult (*mipmap_fn)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned int);
static CUresult mipmap_create(int s, CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *ds, unsigned int levels)
{
	mipmap_fn f = REAL(A_MIPMAP, s, mipmap_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	uint64_t n = ds ? mipmap_bytes(ds, levels) : 0;
	GUARDED(ds ? device(-1) : NULL, n, f(a, ds, levels), K_MIPMAP, (uintptr_t)*a);
}

typedef CUresult (*mipmap_destroy_fn)(CUmipmappedArray);
static CUresult mipmap_destroy(int s, CUmipmappedArray a)
{
	mipmap_destroy_fn f = REAL(A_MIPMAPDESTROY, s, mipmap_destroy_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	FREED(K_MIPMAP, (uintptr_t)a, f(a));
}

DYNX(mem_alloc, (CUdeviceptr * p, size_t n), p, n)
DYNX(mem_alloc_pitch, (CUdeviceptr * p, size_t *pi, size_t w, size_t h, unsigned int e), p, pi, w, h, e)
DYNX(mem_alloc_managed, (CUdeviceptr * p, size_t n, unsigned int fl), p, n, fl)
DYNX(mem_free, (CUdeviceptr p), p)
DYNX(mem_create, (CUmemGenericAllocationHandle * h, size_t n, const void *pr, unsigned long long fl), h, n, pr, fl)
DYNX(mem_release, (CUmemGenericAllocationHandle h), h)
DYNX(mem_map, (CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long fl), p, n, off, h, fl)
DYNX(mem_unmap, (CUdeviceptr p, size_t n), p, n)
DYNX(mem_retain, (CUmemGenericAllocationHandle * h, void *addr), h, addr)
DYNX(array_create, (CUarray * a, const CUDA_ARRAY_DESCRIPTOR *d), a, d)
DYNX(array3d_create, (CUarray * a, const CUDA_ARRAY3D_DESCRIPTOR *d), a, d)
DYNX(array_destroy, (CUarray a), a)
DYNX(mipmap_create, (CUmipmappedArray * a, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int l), a, d, l)
DYNX(mipmap_destroy, (CUmipmappedArray a), a)

EXPORT(cuMemAlloc_v2, mem_alloc, 2, (CUdeviceptr * p, size_t n), p, n)
EXPORT(cuMemAllocPitch_v2, mem_alloc_pitch, 2, (CUdeviceptr * p, size_t *pi, size_t w, size_t h, unsigned int e),
       p, pi, w, h, e)
EXPORT(cuMemAllocManaged, mem_alloc_managed, 2, (CUdeviceptr * p, size_t n, unsigned int fl), p, n, fl)
EXPORT(cuMemFree_v2, mem_free, 2, (CUdeviceptr p), p)
EXPORT(cuMemCreate, mem_create, 2,
       (CUmemGenericAllocationHandle * h, size_t n, const void *pr, unsigned long long fl), h, n, pr, fl)
EXPORT(cuMemRelease, mem_release, 2, (CUmemGenericAllocationHandle h), h)
EXPORT(cuMemMap, mem_map, 2, (CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long fl),
       p, n, off, h, fl)
EXPORT(cuMemUnmap, mem_unmap, 2, (CUdeviceptr p, size_t n), p, n)
EXPORT(cuMemRetainAllocationHandle, mem_retain, 2, (CUmemGenericAllocationHandle * h, void *addr), h, addr)
EXPORT(cuArrayCreate_v2, array_create, 2, (CUarray * a, const CUDA_ARRAY_DESCRIPTOR *d), a, d)
EXPORT(cuArray3DCreate_v2, array3d_create, 2, (CUarray * a, const CUDA_ARRAY3D_DESCRIPTOR *d), a, d)
EXPORT(cuArrayDestroy, array_destroy, 2, (CUarray a), a)
EXPORT(cuMipmappedArrayCreate, mipmap_create, 2,
       (CUmipmappedArray * a, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int l), a, d, l)
EXPORT(cuMipmappedArrayDestroy, mipmap_destroy, 2, (CUmipmappedArray a), a)

/* ---- life cycle ---- */

static void before_fork(void) { account_lock(); }
static void after_fork_parent(void) { account_unlock(); }

/* A forked child has no CUDA context of its parent's and must not speak for the parent's slot:
 * it forgets what it inherited and attaches afresh when it allocates. */
static void after_fork_child(void)
{
	pools_forget();
	account_forget(); /* and unlocks what before_fork locked */
}

__attribute__((constructor)) static void fence_init(void)
{
	real_dlsym();
	gf_at_fork(before_fork, after_fork_parent, after_fork_child);
}

/* No destructor gives a clean exit's bytes back: the driver holds a process's memory until the
 * kernel tears the process down, after every destructor, and an account that ended first let the
 * watchdog see an honest borrower's memory as unlent and the fence lend it to another task before
 * it was free. A process's slot lives as long as its open table file, which the kernel closes in
 * that same teardown; a reaper (the watchdog each pass, a refused allocation) then gives it back,
 * as after a SIGKILL. */
