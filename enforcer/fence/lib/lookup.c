/* The driver's real entry points (lookup.h says why they are a file of their own). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "fence.h"

void *driver_sym(const char *name)
{
	void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	dlsym_fn f = real_dlsym();
	void *p = h && f ? f(h, name) : NULL;
	if (h)
		dlclose(h);
	return p;
}

/* ---- the driver's addresses behind each wrapper ---- */

static void *real[A_N][SLOTS];

const struct gf_name gf_names[] = {
	{"cuMemAlloc_v2", "cuMemAlloc", 3020, A_ALLOC, 2},
	{"cuMemAllocPitch_v2", "cuMemAllocPitch", 3020, A_PITCH, 2},
	{"cuMemAllocManaged", "cuMemAllocManaged", 0, A_MANAGED, 2},
	{"cuMemFree_v2", "cuMemFree", 3020, A_FREE, 2},
	{"cuMemGetInfo_v2", "cuMemGetInfo", 3020, A_INFO, 2},
	{"cuMemCreate", "cuMemCreate", 0, A_CREATE, 2},
	{"cuMemRelease", "cuMemRelease", 0, A_RELEASE, 2},
	{"cuMemMap", "cuMemMap", 0, A_MAP, 2},
	{"cuMemUnmap", "cuMemUnmap", 0, A_UNMAP, 2},
	{"cuMemRetainAllocationHandle", "cuMemRetainAllocationHandle", 0, A_RETAIN, 2},
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
	{"cuDeviceTotalMem", NULL, 0, A_TOTAL1, 2}, /* the 3.0 ABI: see interpose.c's wrap_proc */
	{"cuMemPoolTrimTo", "cuMemPoolTrimTo", 0, A_TRIM, 2},
	{"cuMemPoolDestroy", "cuMemPoolDestroy", 0, A_POOLDESTROY, 2},
	{"cuGetProcAddress", NULL, 0, A_GPA1, 2},
	{"cuGetProcAddress_v2", NULL, 0, A_GPA2, 2},
};
const size_t gf_nnames = sizeof gf_names / sizeof gf_names[0];

/* in_fence says whether p lies in the fence itself: the driver's address must never be one of
 * the fence's own definitions, or a wrapper would call itself. */
static int in_fence(void *p)
{
	Dl_info self, at;
	return dladdr((void *)in_fence, &self) && dladdr(p, &at) && self.dli_fbase == at.dli_fbase;
}

void *real_of(int api, int slot)
{
	void *p = __atomic_load_n(&real[api][slot], __ATOMIC_ACQUIRE);
	if (p || slot < 2)
		return p;
	/* An exported name: the next definition after the fence's own is the driver's, where the
	 * driver is in the global scope (a program linked against it, a dlopen with RTLD_GLOBAL,
	 * or another preloaded wrapper after the fence). A library linked against libcuda and
	 * opened without RTLD_GLOBAL (a Python extension, PyCUDA's or vLLM's cumem allocator)
	 * brings the driver in only for itself, yet its calls bind to the fence's names, which
	 * come first in the global scope: RTLD_NEXT finds nothing there, and every call of those
	 * names failed with CUDA_ERROR_NOT_INITIALIZED. The driver is then asked by its own
	 * handle. */
	for (size_t i = 0; i < gf_nnames; i++)
		if (gf_names[i].api == api && gf_names[i].slot == slot) {
			dlsym_fn f = real_dlsym();
			p = f ? f(RTLD_NEXT, gf_names[i].sym) : NULL;
			if (!p && (p = driver_sym(gf_names[i].sym)) && in_fence(p))
				p = NULL;
			__atomic_store_n(&real[api][slot], p, __ATOMIC_RELEASE);
			break;
		}
	return p;
}

int gf_real_claim(int api, int s, void *p)
{
	void *want = NULL;
	return __atomic_compare_exchange_n(&real[api][s], &want, p, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
	       want == p;
}
