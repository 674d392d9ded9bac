/*
 * Stream-ordered allocations (cuMemAllocAsync, cuMemAllocFromPoolAsync) come from pools, and a
 * pool holds more physical memory than its live allocations: it reserves in its own units,
 * keeps what is freed up to its release threshold (PyTorch's cudaMallocAsync backend keeps it
 * all) and gives memory back only at synchronizations. NVML, which the watchdog holds the task
 * to, sees the reservation. So the fence charges each pool what the driver holds for it,
 * CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, and never less than its live allocations: checked
 * before and after every allocation from it, after every free to it, at cuMemPoolTrimTo and at
 * cuMemGetInfo. Between two of those a pool may have released memory the fence still charges:
 * an over-charge, never an under-charge, so the fence and the watchdog agree on every honest job.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>

#include "fence.h"

#define GF_POOLS 64
#define ATTR_RESERVED_MEM_CURRENT 5 /* CUmemPool_attribute */

struct pool {
	CUmemoryPool h;
	struct dev *d;
	int gone;      /* destroyed: the driver frees its reservation as its allocations are freed */
	uint64_t live; /* what its allocations the fence saw hold */
	uint64_t held; /* what the fence charges for it: max(live, reserved) when last looked */
};

static struct pool pools[GF_POOLS];
static int npools;
static pthread_mutex_t pmu = PTHREAD_MUTEX_INITIALIZER;

typedef CUresult (*attr_fn)(CUmemoryPool, int, void *);
typedef CUresult (*cur_pool_fn)(CUmemoryPool *, CUdevice);
typedef CUresult (*async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);
typedef CUresult (*trim_fn)(CUmemoryPool, size_t);
typedef CUresult (*destroy_fn)(CUmemoryPool);

static void *sym(void **cache, const char *name)
{
	void *p = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
	if (!p) {
		p = driver_sym(name);
		__atomic_store_n(cache, p, __ATOMIC_RELEASE);
	}
	return p;
}

static attr_fn attr_getter(void)
{
	static void *f;
	return (attr_fn)sym(&f, "cuMemPoolGetAttribute");
}

static int reserved(attr_fn get, CUmemoryPool h, uint64_t *out)
{
	cuuint64_t v = 0;
	if (!get || get(h, ATTR_RESERVED_MEM_CURRENT, &v) != CUDA_SUCCESS)
		return -1;
	*out = v;
	return 0;
}

static int pool_index(struct dev *d, CUmemoryPool h)
{
	int i, spare = -1;
	pthread_mutex_lock(&pmu);
	for (i = 0; i < npools; i++) {
		if (pools[i].h == h && pools[i].d == d && !pools[i].gone)
			break;
		/* A destroyed pool whose allocations are all freed holds nothing and no record names
		 * it: its entry serves the next pool. Kept, a process that made and destroyed pools
		 * over and over ran out of entries for good, and its later pools were charged their
		 * allocations, not what the driver reserves for them. */
		if (spare < 0 && pools[i].gone && pools[i].live == 0 && pools[i].held == 0)
			spare = i;
	}
	if (i == npools && spare >= 0) {
		i = spare;
		pools[i] = (struct pool){.h = h, .d = d};
	} else if (i == npools) {
		if (npools == GF_POOLS) {
			static int warned;
			if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
				say("more than %d memory pools: allocations from the others are charged as allocated",
				    GF_POOLS);
			i = -1;
		} else {
			pools[i] = (struct pool){.h = h, .d = d};
			__atomic_store_n(&npools, i + 1, __ATOMIC_RELEASE); /* readers without pmu see it whole */
		}
	}
	pthread_mutex_unlock(&pmu);
	return i;
}

/* settle_pool charges pool i what the driver holds for it now; GF_REFUSED when the table would
 * not take what it grew by (that growth stays uncharged: the caller gives it back). */
static int settle_pool(int i)
{
	struct pool *p = &pools[i];
	uint64_t r = 0;
	/* The driver is asked under pmu, with its answer put to use: a look read before another
	 * thread's allocation grew the pool and used after that thread's own settle took the growth
	 * off the charge until the pool's next call. One cheap query, never a wait; its address is
	 * found first, so no lookup (the loader's lock) is taken under pmu. */
	attr_fn get = attr_getter();
	pthread_mutex_lock(&pmu);
	if (!p->gone && reserved(get, p->h, &r) != 0) {
		pthread_mutex_unlock(&pmu);
		return GF_OK; /* no answer: the per-allocation charges stand */
	}
	uint64_t target = r > p->live ? r : p->live;
	uint64_t old = p->held;
	p->held = target;
	pthread_mutex_unlock(&pmu);
	if (target < old) {
		gf_uncharge(&p->d->m, old - target);
		return GF_OK;
	}
	if (target == old)
		return GF_OK;
	int c = charge(p->d, target - old);
	if (c == GF_OK || c == GF_OK_OWED)
		return GF_OK;
	pthread_mutex_lock(&pmu);
	p->held -= target - old;
	pthread_mutex_unlock(&pmu);
	return c == GF_REFUSED ? GF_REFUSED : GF_OK;
}

void pools_settle(struct dev *d)
{
	for (int i = 0; i < __atomic_load_n(&npools, __ATOMIC_ACQUIRE); i++)
		if (pools[i].d == d)
			settle_pool(i);
}

/* pool_freed: an allocation of size bytes from pool i was freed; the pool may keep the memory,
 * so the pool is charged what the driver says it holds. */
static void pool_freed(int i, uint64_t size)
{
	pthread_mutex_lock(&pmu);
	pools[i].live = pools[i].live > size ? pools[i].live - size : 0;
	pthread_mutex_unlock(&pmu);
	settle_pool(i);
}

void give_freed(const struct freed *f)
{
	if (f->pool >= 0)
		pool_freed(f->pool, f->size);
	else
		gf_uncharge(&f->d->m, f->size);
}

void freed_by_driver(int had, const struct freed *f, int kind, uint64_t key, CUresult r)
{
	struct freed stale;
	if (had && r == CUDA_SUCCESS)
		give_freed(f);
	else if (had && track(f->d, kind, key, f->size, f->pool, &stale))
		give_freed(&stale);
}

static CUresult call(int api, int s, CUdeviceptr *p, size_t n, CUmemoryPool pl, CUstream st)
{
	if (api == A_ASYNC) {
		async_fn f = REAL(A_ASYNC, s, async_fn);
		return f ? f(p, n, st) : CUDA_ERROR_NOT_INITIALIZED;
	}
	pool_fn f = REAL(A_POOL, s, pool_fn);
	return f ? f(p, n, pl, st) : CUDA_ERROR_NOT_INITIALIZED;
}

/* give_back undoes an allocation whose pool grew past what the task may hold, and asks the
 * pool to return what no allocation uses. */
static void give_back(int i, CUdeviceptr p, CUstream st)
{
	static void *ff, *ft;
	free_async_fn f = (free_async_fn)sym(&ff, "cuMemFreeAsync");
	trim_fn trim = (trim_fn)sym(&ft, "cuMemPoolTrimTo");
	struct freed fr;
	int had = untrack(K_PTR, p, &fr);
	freed_by_driver(had, &fr, K_PTR, p, f ? f(p, st) : CUDA_ERROR_NOT_INITIALIZED);
	if (trim)
		trim(pools[i].h, 0);
	settle_pool(i);
}

static CUresult pooled(int api, int s, CUdeviceptr *p, size_t n, CUmemoryPool pl, CUstream st)
{
	struct dev *d = device(-1);
	if (!d)
		return call(api, s, p, n, pl, st);
	if (api == A_ASYNC) {
		static void *fc;
		cur_pool_fn cur = (cur_pool_fn)sym(&fc, "cuDeviceGetMemPool");
		if (!cur || cur(&pl, dev_ordinal(d)) != CUDA_SUCCESS)
			pl = NULL;
	}
	int i = pl ? pool_index(d, pl) : -1;
	uint64_t need = n;
	if (i >= 0) {
		settle_pool(i); /* what the pool gave back since counts before this is judged */
		/* What the pool keeps and no allocation uses is charged already (held) and serves this
		 * allocation first: only the rest may be new memory. Charged again, an honest job whose
		 * pool kept its last step's memory (PyTorch's cudaMallocAsync keeps it all) was refused
		 * its next step within its cap. A pool that grows past this anyway is charged for it by
		 * the settle below, and refused there. */
		pthread_mutex_lock(&pmu);
		uint64_t idle = pools[i].held > pools[i].live ? pools[i].held - pools[i].live : 0;
		pthread_mutex_unlock(&pmu);
		need = n > idle ? n - idle : 0;
	}
	int c = need > 0 ? charge(d, need) : GF_OK;
	if (c == GF_REFUSED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = call(api, s, p, n, pl, st);
	for (int t = 0; c == GF_OK_OWED && r == CUDA_ERROR_OUT_OF_MEMORY && t < SETTLE_TRIES; t++) {
		settle();
		r = call(api, s, p, n, pl, st);
	}
	if (c != GF_OK && c != GF_OK_OWED)
		return r;
	if (r != CUDA_SUCCESS) {
		gf_uncharge(&d->m, need);
		return r;
	}
	struct freed stale;
	if (i < 0) {
		if (track(d, K_PTR, *p, n, -1, &stale))
			give_freed(&stale);
		return r;
	}
	pthread_mutex_lock(&pmu);
	pools[i].live += n;
	pools[i].held += need;
	pthread_mutex_unlock(&pmu);
	if (track(d, K_PTR, *p, n, i, &stale))
		give_freed(&stale);
	if (settle_pool(i) != GF_REFUSED)
		return r;
	give_back(i, *p, st);
	*p = 0;
	return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult mem_alloc_async(int s, CUdeviceptr *p, size_t n, CUstream st)
{
	return pooled(A_ASYNC, s, p, n, NULL, st);
}

static CUresult mem_alloc_pool(int s, CUdeviceptr *p, size_t n, CUmemoryPool pl, CUstream st)
{
	return pooled(A_POOL, s, p, n, pl, st);
}

static CUresult mem_free_async(int s, CUdeviceptr p, CUstream st)
{
	free_async_fn f = REAL(A_FREEASYNC, s, free_async_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	FREED(K_PTR, p, f(p, st));
}

static int known(CUmemoryPool h)
{
	for (int i = 0; i < __atomic_load_n(&npools, __ATOMIC_ACQUIRE); i++)
		if (pools[i].h == h && !pools[i].gone)
			return i;
	return -1;
}

static CUresult pool_trim(int s, CUmemoryPool pl, size_t keep)
{
	trim_fn f = REAL(A_TRIM, s, trim_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = f(pl, keep);
	int i = known(pl);
	if (r == CUDA_SUCCESS && i >= 0)
		settle_pool(i);
	return r;
}

static CUresult pool_destroy(int s, CUmemoryPool pl)
{
	destroy_fn f = REAL(A_POOLDESTROY, s, destroy_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = f(pl);
	int i = known(pl);
	if (r == CUDA_SUCCESS && i >= 0) {
		pthread_mutex_lock(&pmu);
		pools[i].gone = 1;
		pthread_mutex_unlock(&pmu);
		settle_pool(i); /* only its live allocations remain, each given back at its free */
	}
	return r;
}

void pools_forget(void)
{
	pthread_mutex_init(&pmu, NULL);
	npools = 0;
}

DYNX(mem_alloc_async, (CUdeviceptr * p, size_t n, CUstream st), p, n, st)
DYNX(mem_free_async, (CUdeviceptr p, CUstream st), p, st)
DYNX(mem_alloc_pool, (CUdeviceptr * p, size_t n, CUmemoryPool pl, CUstream st), p, n, pl, st)
DYNX(pool_trim, (CUmemoryPool pl, size_t keep), pl, keep)
DYNX(pool_destroy, (CUmemoryPool pl), pl)

EXPORT(cuMemAllocAsync, mem_alloc_async, 2, (CUdeviceptr * p, size_t n, CUstream st), p, n, st)
EXPORT(cuMemAllocAsync_ptsz, mem_alloc_async, 3, (CUdeviceptr * p, size_t n, CUstream st), p, n, st)
EXPORT(cuMemFreeAsync, mem_free_async, 2, (CUdeviceptr p, CUstream st), p, st)
EXPORT(cuMemFreeAsync_ptsz, mem_free_async, 3, (CUdeviceptr p, CUstream st), p, st)
EXPORT(cuMemAllocFromPoolAsync, mem_alloc_pool, 2, (CUdeviceptr * p, size_t n, CUmemoryPool pl, CUstream st), p, n,
       pl, st)
EXPORT(cuMemAllocFromPoolAsync_ptsz, mem_alloc_pool, 3, (CUdeviceptr * p, size_t n, CUmemoryPool pl, CUstream st),
       p, n, pl, st)
EXPORT(cuMemPoolTrimTo, pool_trim, 2, (CUmemoryPool pl, size_t keep), pl, keep)
EXPORT(cuMemPoolDestroy, pool_destroy, 2, (CUmemoryPool pl), pl)
