/*
 * A library linked against libcuda.so.1, as a Python extension that calls the driver by name is
 * (PyCUDA's _driver, vLLM's cumem allocator): client.c opens it without RTLD_GLOBAL, so the
 * driver comes in for it alone, and its calls bind to the first definition in the global scope,
 * the fence's. plugin_sym answers the address its own calls of a driver name reach.
 */
#include <stddef.h>
#include <string.h>

#define NAMES(X)                                                                                          \
	X(cuMemAlloc_v2) X(cuMemAllocManaged) X(cuMemAllocPitch_v2) X(cuMemFree_v2) X(cuMemGetInfo_v2)     \
	X(cuMemCreate) X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) X(cuMemRetainAllocationHandle)            \
	X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz) X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz)               \
	X(cuMemAllocFromPoolAsync) X(cuMemAllocFromPoolAsync_ptsz) X(cuArrayCreate_v2) X(cuArray3DCreate_v2) \
	X(cuArrayDestroy) X(cuMipmappedArrayCreate) X(cuMipmappedArrayDestroy) X(cuDeviceTotalMem_v2)      \
	X(cuDeviceTotalMem) X(cuDeviceGetDefaultMemPool) X(cuMemPoolSetAttribute) X(cuMemPoolTrimTo)       \
	X(cuMemPoolCreate) X(cuMemPoolDestroy) X(cuGetProcAddress)

/* Declared with no parameters: only their addresses are taken here. */
#define DECLARE(n) void n(void);
NAMES(DECLARE)

void *plugin_sym(const char *name)
{
#define ANSWER(n)                  \
	if (strcmp(name, #n) == 0) \
		return (void *)n;
	NAMES(ANSWER)
	return NULL;
}
