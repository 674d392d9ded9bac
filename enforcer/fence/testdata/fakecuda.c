/*
 * A stand-in for libcuda.so.1 that the fence's tests build, so the fence runs in CI without a
 * GPU. It is reached the way the real driver is: dlsym(handle, "cuGetProcAddress") first, then
 * cuGetProcAddress for every entry point, with per-thread-stream variants at their own
 * addresses. Memory is a per-process counter against FAKE_CUDA_TOTAL; devices are named by
 * FAKE_CUDA_UUIDS (comma-separated, 32 hex digits each). FAKE_CUDA_OOM_FIRST=N fails the first N
 * allocations with out of memory, as a driver still releasing a dead process's memory would.
 *
 * Stream-ordered allocations come from a pool that, like the driver's, holds more physical
 * memory than its live allocations: it reserves in FAKE_CUDA_POOL_GRAIN units (default 2 MiB)
 * and keeps freed memory up to its release threshold (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
 * default 0: released at once, as the driver does at the next synchronization). What the
 * device holds (fakeUsed, what NVML would report) counts the pool's reservation.
 *
 * FAKE_CUDA_REUSE=1 hands out the address (or handle) freed last again at the next allocation,
 * as the driver's address space does; fakeOnFree(f) has the next successful free call f once the
 * memory is free and before the free returns: another thread's allocation landing in between.
 * fakeOnAttr(f) has the next answer to CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT call f once it is read
 * and before it returns: another thread's allocation landing between the fence's look and its
 * use of what it saw.
 * fakeFail(a, f) makes every later allocation fail with a, and every later free with f, where
 * they are not 0: a driver failing for reasons of its own (an invalid value, a context destroyed
 * at exit).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct { unsigned char bytes[16]; } CUuuid;

#define MAXALLOC (1 << 20)
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t *sizes;
static uint64_t seq, used, last_freed;
static __thread int current;
static void (*on_free)(void);

void fakeOnFree(void (*f)(void)) { on_free = f; }

static int fail_alloc, fail_free;
void fakeFail(int a, int f)
{
	__atomic_store_n(&fail_alloc, a, __ATOMIC_RELAXED);
	__atomic_store_n(&fail_free, f, __ATOMIC_RELAXED);
}

static uint64_t total(void)
{
	const char *t = getenv("FAKE_CUDA_TOTAL");
	return t ? strtoull(t, NULL, 10) : (80ULL << 30);
}

static CUresult take(unsigned long long *out, uint64_t n)
{
	int failed = __atomic_load_n(&fail_alloc, __ATOMIC_RELAXED);
	if (failed)
		return failed;
	if (getenv("FAKE_CUDA_HANG")) {
		(void)!write(2, "fake: hanging\n", 14);
		for (;;)
			pause();
	}
	pthread_mutex_lock(&mu);
	static long oom_left = -1;
	if (oom_left < 0) {
		const char *o = getenv("FAKE_CUDA_OOM_FIRST");
		oom_left = o ? strtol(o, NULL, 10) : 0;
	}
	if (oom_left > 0) {
		oom_left--;
		pthread_mutex_unlock(&mu);
		return 2;
	}
	if (!sizes)
		sizes = calloc(MAXALLOC, sizeof *sizes);
	if (used + n > total() || seq + 1 >= MAXALLOC) {
		pthread_mutex_unlock(&mu);
		return 2;
	}
	uint64_t id = last_freed ? last_freed : ++seq;
	last_freed = 0;
	sizes[id] = n;
	used += n;
	pthread_mutex_unlock(&mu);
	*out = id << 20;
	return 0;
}

static CUresult give(uint64_t v)
{
	int failed = __atomic_load_n(&fail_free, __ATOMIC_RELAXED);
	if (failed)
		return failed;
	uint64_t id = v >> 20;
	pthread_mutex_lock(&mu);
	if (!sizes || id == 0 || id >= MAXALLOC || sizes[id] == 0) {
		pthread_mutex_unlock(&mu);
		return 1; /* CUDA_ERROR_INVALID_VALUE */
	}
	used -= sizes[id];
	sizes[id] = 0;
	if (getenv("FAKE_CUDA_REUSE"))
		last_freed = id;
	void (*f)(void) = on_free;
	on_free = NULL;
	pthread_mutex_unlock(&mu);
	if (f)
		f();
	return 0;
}

CUresult cuInit(unsigned int f) { (void)f; return 0; }
void fakeSetDevice(int d) { current = d; }
unsigned long long fakeUsed(void) { return used; }

CUresult cuCtxGetDevice(int *d)
{
	if (getenv("FAKE_CUDA_NOCTX"))
		return 201; /* CUDA_ERROR_INVALID_CONTEXT */
	*d = current;
	return 0;
}

CUresult cuDeviceGetUuid_v2(CUuuid *u, int dev)
{
	const char *list = getenv("FAKE_CUDA_UUIDS");
	if (!list)
		list = "00112233445566778899aabbccddeeff";
	for (int i = 0; i < dev; i++) {
		list = strchr(list, ',');
		if (!list)
			return 101; /* CUDA_ERROR_INVALID_DEVICE */
		list++;
	}
	for (int i = 0; i < 16; i++) {
		unsigned int b;
		if (sscanf(list + 2 * i, "%2x", &b) != 1)
			return 101;
		u->bytes[i] = (unsigned char)b;
	}
	return 0;
}
CUresult cuDeviceGetUuid(CUuuid *u, int dev) { return cuDeviceGetUuid_v2(u, dev); }

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { return take(p, n); }
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned int f) { (void)f; return take(p, n); }
CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned int e)
{
	(void)e;
	*pitch = (w + 511) / 512 * 512;
	return take(p, *pitch * h);
}
CUresult cuMemFree_v2(CUdeviceptr p) { return give(p); }
CUresult cuMemGetInfo_v2(size_t *f, size_t *t)
{
	*t = total();
	*f = total() - used;
	return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *b, int dev)
{
	(void)dev;
	*b = total();
	return 0;
}
/* The 3.0 ABI: 32 bits, saturated. */
CUresult cuDeviceTotalMem(unsigned int *b, int dev)
{
	(void)dev;
	*b = total() > 0xffffffffULL ? 0xffffffffu : (unsigned int)total();
	return 0;
}
CUresult cuMemCreate(unsigned long long *h, size_t n, const void *prop, unsigned long long fl)
{
	(void)prop, (void)fl;
	return take(h, n);
}
/* A handle's memory lives until it is released and unmapped, whichever comes last; a retain
 * (by a mapped address) is one more reference to release. */
#define NMAPS 256
static struct { uint64_t va, size, id; } maps[NMAPS];
static uint32_t hrefs[MAXALLOC], hmaps[MAXALLOC];

/* drop frees handle id once nothing holds it. Under mu. */
static void drop(uint64_t id)
{
	if (hrefs[id] == 0 && hmaps[id] == 0 && sizes[id]) {
		used -= sizes[id];
		sizes[id] = 0;
	}
}

CUresult cuMemRelease(unsigned long long h)
{
	uint64_t id = h >> 20;
	pthread_mutex_lock(&mu);
	int mapped = id < MAXALLOC && sizes && sizes[id] && (hmaps[id] > 0 || hrefs[id] > 0);
	if (mapped) {
		if (hrefs[id] == 0) {
			pthread_mutex_unlock(&mu);
			return 1; /* released already */
		}
		hrefs[id]--;
		drop(id);
	}
	pthread_mutex_unlock(&mu);
	return mapped ? 0 : give(h);
}

CUresult cuMemMap(CUdeviceptr va, size_t size, size_t off, unsigned long long h, unsigned long long fl)
{
	(void)off, (void)fl;
	uint64_t id = h >> 20;
	pthread_mutex_lock(&mu);
	int slot = -1;
	for (int i = 0; i < NMAPS; i++) {
		if (maps[i].size && maps[i].va == va) {
			slot = -1;
			break;
		}
		if (!maps[i].size && slot < 0)
			slot = i;
	}
	if (slot < 0 || id == 0 || id >= MAXALLOC || !sizes || !sizes[id] || size == 0) {
		pthread_mutex_unlock(&mu);
		return 1;
	}
	if (hrefs[id] == 0 && hmaps[id] == 0)
		hrefs[id] = 1; /* its creation's reference, counted from its first mapping */
	maps[slot].va = va;
	maps[slot].size = size;
	maps[slot].id = id;
	hmaps[id]++;
	pthread_mutex_unlock(&mu);
	return 0;
}

CUresult cuMemUnmap(CUdeviceptr va, size_t size)
{
	pthread_mutex_lock(&mu);
	for (uint64_t a = va; a - va < size;) {
		int i = 0;
		while (i < NMAPS && !(maps[i].size && maps[i].va == a))
			i++;
		if (i == NMAPS) {
			pthread_mutex_unlock(&mu);
			return 1;
		}
		uint64_t id = maps[i].id;
		a += maps[i].size;
		maps[i].size = 0;
		hmaps[id]--;
		drop(id);
	}
	pthread_mutex_unlock(&mu);
	return 0;
}

CUresult cuMemRetainAllocationHandle(unsigned long long *h, void *addr)
{
	pthread_mutex_lock(&mu);
	for (int i = 0; i < NMAPS; i++)
		if (maps[i].size && maps[i].va == (uintptr_t)addr) {
			hrefs[maps[i].id]++;
			*h = maps[i].id << 20;
			pthread_mutex_unlock(&mu);
			return 0;
		}
	pthread_mutex_unlock(&mu);
	return 1;
}
/* ---- stream-ordered pools ---- */

struct pool {
	uint64_t reserved, used, threshold;
};
#define NPOOLS 8
static struct pool pools[NPOOLS]; /* 0..3: each device's default pool; the rest created */
static int npools = 4;
static uint64_t pool_of[MAXALLOC]; /* pool index + 1 of a pool allocation */
static uint64_t pool_size[MAXALLOC];

static uint64_t grain(void)
{
	const char *g = getenv("FAKE_CUDA_POOL_GRAIN");
	return g ? strtoull(g, NULL, 10) : (2ULL << 20);
}

static struct pool *pool_at(void *h)
{
	uintptr_t i = h ? (uintptr_t)h - 1 : (uintptr_t)current;
	return i < (uintptr_t)npools ? &pools[i] : NULL;
}

static void release(struct pool *pl, uint64_t keep)
{
	uint64_t floor = pl->used + keep;
	if (pl->reserved > floor) {
		used -= pl->reserved - floor;
		pl->reserved = floor;
	}
}

static CUresult pool_take(CUdeviceptr *out, uint64_t n, void *h)
{
	struct pool *pl = pool_at(h);
	if (!pl)
		return 1;
	int failed = __atomic_load_n(&fail_alloc, __ATOMIC_RELAXED);
	if (failed)
		return failed;
	uint64_t g = grain(), want = (n + g - 1) / g * g;
	pthread_mutex_lock(&mu);
	if (!sizes)
		sizes = calloc(MAXALLOC, sizeof *sizes);
	uint64_t spare = pl->reserved - pl->used, grow = want > spare ? want - spare : 0;
	if (used + grow > total() || seq + 1 >= MAXALLOC) {
		pthread_mutex_unlock(&mu);
		return 2;
	}
	uint64_t id = ++seq;
	pl->reserved += grow;
	pl->used += want;
	used += grow;
	pool_of[id] = (uint64_t)(pl - pools) + 1;
	pool_size[id] = want;
	pthread_mutex_unlock(&mu);
	*out = id << 20;
	return 0;
}

static CUresult pool_give(CUdeviceptr v)
{
	int failed = __atomic_load_n(&fail_free, __ATOMIC_RELAXED);
	if (failed)
		return failed;
	uint64_t id = v >> 20;
	pthread_mutex_lock(&mu);
	if (id == 0 || id >= MAXALLOC || !pool_of[id]) {
		pthread_mutex_unlock(&mu);
		return 1;
	}
	struct pool *pl = &pools[pool_of[id] - 1];
	pl->used -= pool_size[id];
	pool_of[id] = 0;
	release(pl, pl->threshold);
	pthread_mutex_unlock(&mu);
	return 0;
}

CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, void *s) { (void)s; return pool_take(p, n, NULL); }
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, void *s) { (void)s; return pool_take(p, n, NULL); }
CUresult cuMemFreeAsync(CUdeviceptr p, void *s) { (void)s; return pool_give(p); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, void *s) { (void)s; return pool_give(p); }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, void *pool, void *s) { (void)s; return pool_take(p, n, pool); }
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, void *pool, void *s) { (void)s; return pool_take(p, n, pool); }

CUresult cuDeviceGetDefaultMemPool(void **pool, int dev)
{
	if (dev < 0 || dev >= 4)
		return 101;
	*pool = (void *)(uintptr_t)(dev + 1);
	return 0;
}
CUresult cuDeviceGetMemPool(void **pool, int dev) { return cuDeviceGetDefaultMemPool(pool, dev); }
/* A destroyed pool's handle is handed out again, as the driver may. */
static int pool_alive[NPOOLS];
CUresult cuMemPoolCreate(void **pool, const void *props)
{
	(void)props;
	pthread_mutex_lock(&mu);
	int i = 4;
	while (i < npools && pool_alive[i])
		i++;
	if (i >= NPOOLS) {
		pthread_mutex_unlock(&mu);
		return 2;
	}
	if (i == npools)
		npools++;
	pool_alive[i] = 1;
	*pool = (void *)(uintptr_t)(i + 1);
	pthread_mutex_unlock(&mu);
	return 0;
}
CUresult cuMemPoolDestroy(void *h)
{
	struct pool *pl = pool_at(h);
	if (!pl || !h || (uintptr_t)h <= 4)
		return 1;
	pthread_mutex_lock(&mu);
	used -= pl->reserved;
	memset(pl, 0, sizeof *pl);
	pool_alive[pl - pools] = 0;
	pthread_mutex_unlock(&mu);
	return 0;
}

/* CUmemPool_attribute: 4 the release threshold, 5 and 6 the reservation now and at its
 * highest (6 is not kept: answered as now), 7 and 8 what live allocations use. */
static void (*on_attr)(void);
void fakeOnAttr(void (*f)(void)) { __atomic_store_n(&on_attr, f, __ATOMIC_RELEASE); }

CUresult cuMemPoolGetAttribute(void *h, int attr, void *value)
{
	struct pool *pl = pool_at(h);
	if (!pl)
		return 1;
	uint64_t *v = value;
	pthread_mutex_lock(&mu);
	switch (attr) {
	case 4: *v = pl->threshold; break;
	case 5: case 6: *v = pl->reserved; break;
	case 7: case 8: *v = pl->used; break;
	default: pthread_mutex_unlock(&mu); return 1;
	}
	pthread_mutex_unlock(&mu);
	void (*f)(void) = attr == 5 ? __atomic_exchange_n(&on_attr, NULL, __ATOMIC_ACQ_REL) : NULL;
	if (f)
		f();
	return 0;
}
CUresult cuMemPoolSetAttribute(void *h, int attr, void *value)
{
	struct pool *pl = pool_at(h);
	if (!pl || attr != 4)
		return 1;
	pthread_mutex_lock(&mu);
	pl->threshold = *(uint64_t *)value;
	pthread_mutex_unlock(&mu);
	return 0;
}
CUresult cuMemPoolTrimTo(void *h, size_t keep)
{
	struct pool *pl = pool_at(h);
	if (!pl)
		return 1;
	pthread_mutex_lock(&mu);
	release(pl, keep > pl->used ? keep - pl->used : 0);
	pthread_mutex_unlock(&mu);
	return 0;
}

typedef struct { size_t w, h; int fmt; unsigned int ch; } desc2;
typedef struct { size_t w, h, d; int fmt; unsigned int ch, fl; } desc3;
CUresult cuArrayCreate_v2(void **a, const desc2 *d)
{
	unsigned long long v;
	CUresult r = take(&v, d->w * (d->h ? d->h : 1) * d->ch * 4);
	*a = (void *)(uintptr_t)v;
	return r;
}
CUresult cuArray3DCreate_v2(void **a, const desc3 *d)
{
	unsigned long long v;
	CUresult r = take(&v, d->w * (d->h ? d->h : 1) * (d->d ? d->d : 1) * d->ch * 4);
	*a = (void *)(uintptr_t)v;
	return r;
}
CUresult cuArrayDestroy(void *a) { return give((uintptr_t)a); }
/* A mipmapped array takes each of its levels: every dimension halves down to 1, but a layered
 * (0x01) or cubemap (0x04) array's depth. */
CUresult cuMipmappedArrayCreate(void **a, const desc3 *d, unsigned int levels)
{
	size_t w = d->w, h = d->h, dp = d->d, n = 0;
	for (unsigned int i = 0; i < levels; i++) {
		n += w * (h ? h : 1) * (dp ? dp : 1) * d->ch * 4;
		w = w > 1 ? w / 2 : w;
		h = h > 1 ? h / 2 : h;
		if (!(d->fl & 0x05))
			dp = dp > 1 ? dp / 2 : dp;
	}
	unsigned long long v;
	CUresult r = take(&v, n);
	*a = (void *)(uintptr_t)v;
	return r;
}
CUresult cuMipmappedArrayDestroy(void *a) { return give((uintptr_t)a); }

CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, uint64_t flags, int *status);
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, uint64_t flags);

/* The driver hands out, and calls, its own entry points, never what the global scope binds their
 * names to: a preloaded fence exports many of the same names, and an address taken by name here
 * would be the fence's. Hidden aliases bind inside this library. */
#define LOCAL(n) extern __typeof__(n) local_##n __attribute__((alias(#n), visibility("hidden")));
LOCAL(cuInit) LOCAL(cuCtxGetDevice) LOCAL(cuDeviceGetUuid_v2) LOCAL(cuMemAlloc_v2) LOCAL(cuMemAllocPitch_v2)
LOCAL(cuMemAllocManaged) LOCAL(cuMemFree_v2) LOCAL(cuMemGetInfo_v2) LOCAL(cuMemCreate) LOCAL(cuMemRelease)
LOCAL(cuMemMap) LOCAL(cuMemUnmap) LOCAL(cuMemRetainAllocationHandle) LOCAL(cuMemAllocAsync)
LOCAL(cuMemAllocAsync_ptsz) LOCAL(cuMemFreeAsync) LOCAL(cuMemFreeAsync_ptsz) LOCAL(cuMemAllocFromPoolAsync)
LOCAL(cuMemAllocFromPoolAsync_ptsz) LOCAL(cuArrayCreate_v2) LOCAL(cuArray3DCreate_v2) LOCAL(cuArrayDestroy)
LOCAL(cuMipmappedArrayCreate) LOCAL(cuMipmappedArrayDestroy) LOCAL(cuDeviceGetDefaultMemPool)
LOCAL(cuDeviceGetMemPool) LOCAL(cuMemPoolCreate) LOCAL(cuMemPoolDestroy) LOCAL(cuMemPoolGetAttribute)
LOCAL(cuMemPoolSetAttribute) LOCAL(cuMemPoolTrimTo) LOCAL(cuDeviceTotalMem_v2) LOCAL(cuDeviceTotalMem)
LOCAL(cuGetProcAddress) LOCAL(cuGetProcAddress_v2)

CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, uint64_t flags)
{
	return local_cuGetProcAddress_v2(sym, pfn, ver, flags, NULL);
}

struct entry { const char *name; void *fn, *ptsz; };
#define E(n) {#n, (void *)local_##n, NULL}
#define EV2(n) {#n, (void *)local_##n##_v2, NULL}
#define EP(n) {#n, (void *)local_##n, (void *)local_##n##_ptsz}
static const struct entry table[] = {
	E(cuInit), E(cuCtxGetDevice), EV2(cuDeviceGetUuid), EV2(cuMemAlloc), EV2(cuMemAllocPitch),
	E(cuMemAllocManaged), EV2(cuMemFree), EV2(cuMemGetInfo), E(cuMemCreate), E(cuMemRelease),
	E(cuMemMap), E(cuMemUnmap), E(cuMemRetainAllocationHandle),
	EP(cuMemAllocAsync), EP(cuMemFreeAsync), EP(cuMemAllocFromPoolAsync), EV2(cuArrayCreate),
	EV2(cuArray3DCreate), E(cuArrayDestroy), E(cuMipmappedArrayCreate), E(cuMipmappedArrayDestroy), E(cuDeviceGetDefaultMemPool), E(cuDeviceGetMemPool),
	E(cuMemPoolCreate), E(cuMemPoolDestroy), E(cuMemPoolGetAttribute), E(cuMemPoolSetAttribute),
	E(cuMemPoolTrimTo), EV2(cuDeviceTotalMem),
};

CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, uint64_t flags, int *status)
{
	if (status)
		*status = 0;
	if (strcmp(sym, "cuGetProcAddress") == 0) {
		*pfn = ver >= 12000 ? (void *)local_cuGetProcAddress_v2 : (void *)local_cuGetProcAddress;
		return 0;
	}
	if (strcmp(sym, "cuDeviceTotalMem") == 0 && ver < 3020) {
		*pfn = (void *)local_cuDeviceTotalMem;
		return 0;
	}
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
		if (strcmp(table[i].name, sym) == 0) {
			*pfn = (flags & 2) && table[i].ptsz ? table[i].ptsz : table[i].fn;
			return 0;
		}
	*pfn = NULL;
	if (status)
		*status = 1; /* CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND */
	return 500; /* CUDA_ERROR_NOT_FOUND */
}
