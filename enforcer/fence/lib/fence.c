/*
 * libgpufrac-fence.so: loaded with LD_PRELOAD into every process of a task, it refuses a device
 * allocation that would take the task (all its processes on that GPU) past its cap, with
 * CUDA_ERROR_OUT_OF_MEMORY, so the violator fails inside its own process and no neighbour
 * ever meets a full GPU. docs/enforcement.md says what it fences and what it cannot see.
 *
 * This half does the accounting: each process's view of each GPU's table, what it allocated,
 * and the wrappers of the allocation entry points. interpose.c hands those wrappers out in
 * place of the driver's; lookup.c keeps the driver's addresses they call.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../control.h"
#include "../state.h"
#include "fence.h"

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

/* ---- the process's view of each GPU ---- */

static struct dev devs[GF_MAX_DEV];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* devices' attach and the record table */

typedef CUresult (*ctx_get_device_fn)(CUdevice *);
typedef CUresult (*device_get_uuid_fn)(CUuuid *, CUdevice);

static void uuid_string(const CUuuid *u, char *out, size_t n)
{
	const unsigned char *b = u->bytes;
	snprintf(out, n, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
		 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

static int attach_state(struct dev *d, CUdevice ordinal);

int dev_ordinal(struct dev *d) { return (int)(d - devs); }

/* attach settles d's state once: other threads read it without the lock, so it goes from
 * unknown straight to its final value. */
static void attach(struct dev *d, CUdevice ordinal)
{
	__atomic_store_n(&d->state, attach_state(d, ordinal), __ATOMIC_RELEASE);
}

static int attach_state(struct dev *d, CUdevice ordinal)
{
	device_get_uuid_fn get_uuid = (device_get_uuid_fn)driver_sym("cuDeviceGetUuid_v2");
	if (!get_uuid)
		get_uuid = (device_get_uuid_fn)driver_sym("cuDeviceGetUuid");
	CUuuid u;
	if (!get_uuid || get_uuid(&u, ordinal) != CUDA_SUCCESS) {
		say("cannot read the UUID of device %d; this process runs under the watchdog alone", ordinal);
		return DEV_OPEN;
	}
	uuid_string(&u, d->uuid, sizeof d->uuid);
	return gf_place(d->uuid, &d->m) == 0 ? DEV_FENCED : DEV_OPEN; /* identity.c */
}

/* device returns the fenced view of the GPU of the calling thread's context, or NULL. */
struct dev *device(int ordinal)
{
	if (gf_passive()) {
		gf_note_driver();
		return NULL;
	}
	if (ordinal < 0) {
		static ctx_get_device_fn get;
		if (!get)
			get = (ctx_get_device_fn)driver_sym("cuCtxGetDevice");
		CUdevice dev;
		if (!get || get(&dev) != CUDA_SUCCESS)
			return NULL;
		ordinal = dev;
	}
	if (ordinal >= GF_MAX_DEV)
		return NULL;
	struct dev *d = &devs[ordinal];
	int st = __atomic_load_n(&d->state, __ATOMIC_ACQUIRE);
	if (st == DEV_UNKNOWN) {
		pthread_mutex_lock(&mu);
		if (d->state == DEV_UNKNOWN)
			attach(d, ordinal);
		st = d->state;
		pthread_mutex_unlock(&mu);
	}
	return st == DEV_FENCED ? d : NULL;
}

/* charge asks the table for n bytes; dead processes of the task are reaped before a refusal. */
int charge(struct dev *d, uint64_t n)
{
	int r = gf_charge(&d->m, n);
	if (r == GF_REFUSED && gf_reap(&d->m, d->m.task) > 0)
		r = gf_charge(&d->m, n);
	if (r == GF_REFUSED && !__atomic_exchange_n(&d->warned_refusal, 1, __ATOMIC_RELAXED)) {
		uint64_t cap = 0, used = 0;
		gf_view(&d->m, &cap, &used);
		say("refused %.1f MiB on %s: the task holds %.1f MiB of its %.1f MiB cap", mib(n), d->uuid, mib(used),
		    mib(cap));
	}
	if (r == GF_NOTASK) {
		static int warned;
		if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
			say("the reservation on %s ended or this process lost its slot; running unfenced", d->uuid);
	}
	return r;
}

/* ---- what each process allocated, to give it back on free ---- */

struct rec {
	uint64_t key;
	uint64_t size;
	int16_t dev;
	int16_t pool; /* a stream-ordered pool's index (pool.c), or -1 */
	uint8_t kind; /* 0 = empty, 0xff = deleted */
};

static struct rec *recs;
static size_t nrecs, cap_recs, dead_recs;

static size_t hash(uint64_t key, int kind)
{
	key ^= (uint64_t)kind << 56;
	key *= 0x9e3779b97f4a7c15ULL;
	return (size_t)(key >> 17);
}

static int grow(void)
{
	size_t ncap = cap_recs ? cap_recs * 2 : 1024;
	struct rec *n = calloc(ncap, sizeof *n);
	if (!n)
		return -1;
	for (size_t i = 0; i < cap_recs; i++) {
		if (recs[i].kind == 0 || recs[i].kind == 0xff)
			continue;
		size_t j = hash(recs[i].key, recs[i].kind) & (ncap - 1);
		while (n[j].kind)
			j = (j + 1) & (ncap - 1);
		n[j] = recs[i];
	}
	free(recs);
	recs = n;
	cap_recs = ncap;
	dead_recs = 0;
	return 0;
}

static struct rec *find(uint64_t key, int kind)
{
	if (!cap_recs)
		return NULL;
	for (size_t j = hash(key, kind) & (cap_recs - 1);; j = (j + 1) & (cap_recs - 1)) {
		if (recs[j].kind == 0)
			return NULL;
		if (recs[j].kind == kind && recs[j].key == key)
			return &recs[j];
	}
}

void track(struct dev *d, int kind, uint64_t key, uint64_t size, int pool)
{
	uint64_t stale = 0;
	struct dev *stale_dev = NULL;
	int stale_pool = -1;
	pthread_mutex_lock(&mu);
	struct rec *r = find(key, kind);
	if (r) {
		/* The driver reused an address whose free the fence never saw: that memory is gone. */
		stale = r->size;
		stale_dev = &devs[r->dev];
		stale_pool = r->pool;
	} else if ((nrecs + dead_recs + 1) * 10 >= cap_recs * 7 && grow() != 0) {
		pthread_mutex_unlock(&mu);
		gf_uncharge(&d->m, size); /* cannot remember it: do not hold it against the task */
		return;
	} else {
		size_t j = hash(key, kind) & (cap_recs - 1);
		while (recs[j].kind && recs[j].kind != 0xff)
			j = (j + 1) & (cap_recs - 1);
		if (recs[j].kind == 0xff)
			dead_recs--;
		r = &recs[j];
		nrecs++;
	}
	r->key = key;
	r->kind = (uint8_t)kind;
	r->size = size;
	r->pool = (int16_t)pool;
	r->dev = (int16_t)(d - devs);
	pthread_mutex_unlock(&mu);
	if (stale_dev && stale_pool >= 0)
		pool_freed(stale_dev, stale_pool, stale);
	else if (stale_dev)
		gf_uncharge(&stale_dev->m, stale);
}

void untrack(int kind, uint64_t key)
{
	pthread_mutex_lock(&mu);
	struct rec *r = find(key, kind);
	if (!r) {
		pthread_mutex_unlock(&mu);
		return; /* allocated before the fence attached, or not on a fenced GPU */
	}
	struct dev *d = &devs[r->dev];
	uint64_t size = r->size;
	int pool = r->pool;
	r->kind = 0xff;
	nrecs--;
	dead_recs++;
	int fenced = d->state == DEV_FENCED;
	pthread_mutex_unlock(&mu);
	if (fenced && pool >= 0)
		pool_freed(d, pool, size); /* the pool may keep the memory: pool.c charges what it holds */
	else if (fenced)
		gf_uncharge(&d->m, size);
}

/* ---- the wrappers ---- */

/* A fenced allocation granted after borrowers gave its bytes back (GF_OK_OWED) may find the
 * driver still releasing a stopped borrower's memory: it is tried again this often, this many
 * times (2 s), before its out-of-memory error stands. */
#define SETTLE_NS 5000000L

void settle(void)
{
	struct timespec d = {0, SETTLE_NS};
	nanosleep(&d, NULL);
}

/* guarded runs one allocation of n bytes on device d under the fence. */
#define GUARDED(d, n, call, kind, key)                                                                  \
	do {                                                                                            \
		int c_ = (d) ? charge((d), (n)) : GF_NOTASK;                                            \
		if (c_ == GF_REFUSED)                                                                   \
			return CUDA_ERROR_OUT_OF_MEMORY;                                                \
		CUresult r_ = (call);                                                                   \
		for (int t_ = 0; c_ == GF_OK_OWED && r_ == CUDA_ERROR_OUT_OF_MEMORY && t_ < SETTLE_TRIES; t_++) { \
			settle();                                                                       \
			r_ = (call);                                                                    \
		}                                                                                       \
		if (c_ == GF_OK || c_ == GF_OK_OWED) {                                                  \
			if (r_ == CUDA_SUCCESS)                                                         \
				track((d), (kind), (uint64_t)(key), (n), -1);                             \
			else                                                                            \
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
	CUresult r = f(p);
	if (r == CUDA_SUCCESS)
		untrack(K_PTR, p);
	return r;
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
	CUresult r = f(h);
	if (r == CUDA_SUCCESS)
		untrack(K_HANDLE, h);
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
	CUresult r = f(a);
	if (r == CUDA_SUCCESS)
		untrack(K_ARRAY, (uintptr_t)a);
	return r;
}

typedef CUresult (*mipmap_fn)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned int);
static CUresult mipmap_create(int s, CUmipmappedArray *a, const CUDA_ARRAY3D_DESCRIPTOR *ds, unsigned int levels)
{
	mipmap_fn f = REAL(A_MIPMAP, s, mipmap_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	/* Every level below the first is at most a quarter of the one above: 4/3 bounds the sum. */
	uint64_t n = ds ? array_bytes(ds->Width, ds->Height, ds->Depth, ds->Format, ds->NumChannels) / 3 * 4 : 0;
	GUARDED(ds ? device(-1) : NULL, n, f(a, ds, levels), K_MIPMAP, (uintptr_t)*a);
}

typedef CUresult (*mipmap_destroy_fn)(CUmipmappedArray);
static CUresult mipmap_destroy(int s, CUmipmappedArray a)
{
	mipmap_destroy_fn f = REAL(A_MIPMAPDESTROY, s, mipmap_destroy_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = f(a);
	if (r == CUDA_SUCCESS)
		untrack(K_MIPMAP, (uintptr_t)a);
	return r;
}

DYNX(mem_alloc, (CUdeviceptr * p, size_t n), p, n)
DYNX(mem_alloc_pitch, (CUdeviceptr * p, size_t *pi, size_t w, size_t h, unsigned int e), p, pi, w, h, e)
DYNX(mem_alloc_managed, (CUdeviceptr * p, size_t n, unsigned int fl), p, n, fl)
DYNX(mem_free, (CUdeviceptr p), p)
DYNX(mem_create, (CUmemGenericAllocationHandle * h, size_t n, const void *pr, unsigned long long fl), h, n, pr, fl)
DYNX(mem_release, (CUmemGenericAllocationHandle h), h)
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
EXPORT(cuArrayCreate_v2, array_create, 2, (CUarray * a, const CUDA_ARRAY_DESCRIPTOR *d), a, d)
EXPORT(cuArray3DCreate_v2, array3d_create, 2, (CUarray * a, const CUDA_ARRAY3D_DESCRIPTOR *d), a, d)
EXPORT(cuArrayDestroy, array_destroy, 2, (CUarray a), a)
EXPORT(cuMipmappedArrayCreate, mipmap_create, 2,
       (CUmipmappedArray * a, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int l), a, d, l)
EXPORT(cuMipmappedArrayDestroy, mipmap_destroy, 2, (CUmipmappedArray a), a)

/* ---- life cycle ---- */

static void before_fork(void) { pthread_mutex_lock(&mu); }
static void after_fork_parent(void) { pthread_mutex_unlock(&mu); }

/* A forked child has no CUDA context of its parent's and must not speak for the parent's slot:
 * it drops the inherited mappings (the parent's liveness lock stays with the parent's open
 * file) and attaches afresh when it allocates. */
static void after_fork_child(void)
{
	for (int i = 0; i < GF_MAX_DEV; i++) {
		struct dev *d = &devs[i];
		if (d->state == DEV_FENCED) {
			/* The parent's slot and mappings are not the child's: it attaches anew. */
			gf_control_close(&d->m);
			munmap(d->m.t, sizeof *d->m.t);
			close(d->m.fd);
		}
		memset(d, 0, sizeof *d);
	}
	free(recs);
	recs = NULL;
	nrecs = cap_recs = dead_recs = 0;
	pools_forget();
	pthread_mutex_unlock(&mu);
}

__attribute__((constructor)) static void fence_init(void)
{
	real_dlsym();
	gf_at_fork(before_fork, after_fork_parent, after_fork_child);
}

/* A clean exit gives its bytes back at once instead of waiting for a reaper. */
__attribute__((destructor)) static void fence_fini(void)
{
	for (int i = 0; i < GF_MAX_DEV; i++)
		if (devs[i].state == DEV_FENCED) {
			devs[i].state = DEV_OPEN;
			gf_detach(&devs[i].m);
		}
}
