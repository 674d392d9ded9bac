/*
 * A process's accounting under the fence: its task's accounting file on each GPU (attached at its
 * first allocation there), its charges, and what each of its allocations took, to give it back at
 * the free. The wrappers (fence.c, pool.c, view.c) build on it; it calls none of them: what a free
 * gives back is handed to the caller (struct freed), which knows whether a pool keeps it.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

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

/* gf_wait_note (charge.c) says once that an allocation has waited a while for memory. */
void gf_wait_note(struct gf_map *m, uint64_t n, uint64_t waited_ns)
{
	struct dev *d = (struct dev *)((char *)m - offsetof(struct dev, m));
	if (m->stage > 0) {
		say("an allocation of %.1f MiB on %s has waited %.1f s for its task's guarantee: the task was started "
		    "early (staged) while the memory it needs is still in use, and goes on once gpufrac run grants it",
		    mib(n), d->uuid, (double)waited_ns / 1e9);
		return;
	}
	say("an allocation of %.1f MiB on %s has waited %.1f s for memory that other tasks hold; it goes on when they free it, or "
	    "is refused when its wait runs out",
	    mib(n), d->uuid, (double)waited_ns / 1e9);
}

/* charge asks the table for n bytes (which reaps the dead before it refuses). */
int charge(struct dev *d, uint64_t n)
{
	int r = gf_charge(&d->m, n);
	if (r == GF_REFUSED && !__atomic_exchange_n(&d->warned_refusal, 1, __ATOMIC_RELAXED)) {
		uint64_t cap = 0, used = 0;
		gf_view(&d->m, &cap, &used);
		say("refused %.1f MiB on %s: the task holds %.1f MiB of its %.1f MiB cap: %s (after %.1f s of waiting)",
		    mib(n), d->uuid, mib(used), mib(cap), gf_why_text(d->m.why), (double)d->m.waited_ns / 1e9);
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
	/* K_HANDLE: the references its process holds (its creation's and each retain's), and the
	 * mappings of it: its memory lives until both are gone. K_MAP (key: the mapped address,
	 * size: the bytes mapped): the handle it maps (link) and when it was mapped (seq). */
	uint64_t link, seq;
	uint32_t refs, maps;
	int16_t dev;
	int16_t pool; /* a stream-ordered pool's index (pool.c), or -1 */
	uint8_t kind; /* 0 = empty, 0xff = deleted */
};

static struct rec *recs;
static size_t nrecs, cap_recs, dead_recs;
static uint64_t map_seq;

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

/* slot claims a free record for key, growing the table past 70% full; NULL where it cannot
 * grow. Under mu. */
static struct rec *slot(uint64_t key, int kind)
{
	if ((nrecs + dead_recs + 1) * 10 >= cap_recs * 7 && grow() != 0)
		return NULL;
	size_t j = hash(key, kind) & (cap_recs - 1);
	while (recs[j].kind && recs[j].kind != 0xff)
		j = (j + 1) & (cap_recs - 1);
	if (recs[j].kind == 0xff)
		dead_recs--;
	nrecs++;
	return &recs[j];
}

/* forget drops record r. Under mu. */
static void forget(struct rec *r)
{
	r->kind = 0xff;
	nrecs--;
	dead_recs++;
}

int track(struct dev *d, int kind, uint64_t key, uint64_t size, int pool, struct freed *stale)
{
	int had = 0;
	pthread_mutex_lock(&mu);
	struct rec *r = find(key, kind);
	if (r) {
		/* The driver reused an address whose free the fence never saw: that memory is gone. */
		*stale = (struct freed){&devs[r->dev], r->pool, r->size};
		had = 1;
	} else if (!(r = slot(key, kind))) {
		pthread_mutex_unlock(&mu);
		gf_uncharge(&d->m, size); /* cannot remember it: do not hold it against the task */
		return 0;
	}
	*r = (struct rec){.refs = 1};
	r->key = key;
	r->kind = (uint8_t)kind;
	r->size = size;
	r->pool = (int16_t)pool;
	r->dev = (int16_t)(d - devs);
	pthread_mutex_unlock(&mu);
	return had;
}

int untrack(int kind, uint64_t key, struct freed *out)
{
	pthread_mutex_lock(&mu);
	struct rec *r = find(key, kind);
	if (!r) {
		pthread_mutex_unlock(&mu);
		return 0; /* allocated before the fence attached, or not on a fenced GPU */
	}
	struct dev *d = &devs[r->dev];
	*out = (struct freed){d, r->pool, r->size};
	forget(r);
	int fenced = d->state == DEV_FENCED;
	pthread_mutex_unlock(&mu);
	return fenced;
}

/* ---- virtual memory management: a handle's memory lives while it is mapped ---- */

/* drop_ref takes one reference or mapping (maps) from handle record h and gives its bytes back
 * when none is left. Under mu: the table's lock comes after mu, as in an attach. */
static void drop_ref(struct rec *h, int maps)
{
	uint32_t *n = maps ? &h->maps : &h->refs;
	if (*n > 0)
		(*n)--;
	if (h->refs > 0 || h->maps > 0)
		return;
	struct dev *d = &devs[h->dev];
	forget(h);
	if (d->state == DEV_FENCED)
		gf_uncharge(&d->m, h->size);
}

/* unmap_rec forgets mapping m and drops its handle's mapping. Under mu. */
static void unmap_rec(struct rec *m)
{
	uint64_t h = m->link;
	forget(m);
	struct rec *hr = find(h, K_HANDLE);
	if (hr)
		drop_ref(hr, 1);
}

int handle_release(uint64_t h, struct freed *out)
{
	pthread_mutex_lock(&mu);
	struct rec *r = find(h, K_HANDLE);
	int how = 0;
	if (r && r->maps == 0 && r->refs <= 1) {
		*out = (struct freed){&devs[r->dev], -1, r->size};
		forget(r);
		how = devs[r->dev].state == DEV_FENCED ? 1 : 0;
	} else if (r && r->refs > 0) {
		r->refs--; /* a mapping or another reference keeps the memory */
		how = 2;
	}
	pthread_mutex_unlock(&mu);
	return how;
}

void handle_retained(uint64_t h)
{
	pthread_mutex_lock(&mu);
	struct rec *r = find(h, K_HANDLE);
	if (r)
		r->refs++;
	pthread_mutex_unlock(&mu);
}

void handle_mapped(uint64_t va, uint64_t size, uint64_t h)
{
	pthread_mutex_lock(&mu);
	struct rec *old = find(va, K_MAP);
	if (old)
		unmap_rec(old); /* its unmap is on its way (unmapped) or was never seen */
	struct rec *m;
	if (find(h, K_HANDLE) && (m = slot(va, K_MAP))) {
		*m = (struct rec){.key = va, .size = size, .link = h, .seq = ++map_seq, .kind = K_MAP};
		find(h, K_HANDLE)->maps++; /* found again: claiming the slot may have moved the table */
	}
	pthread_mutex_unlock(&mu);
}

uint64_t maps_now(void)
{
	pthread_mutex_lock(&mu);
	uint64_t n = map_seq;
	pthread_mutex_unlock(&mu);
	return n;
}

void handle_unmapped(uint64_t va, uint64_t size, uint64_t since)
{
	pthread_mutex_lock(&mu);
	/* The range holds whole mappings, end to end. One made after this unmap began is another
	 * thread's, made once the driver had unmapped this one (which it then forgot). */
	for (uint64_t a = va; a - va < size;) {
		struct rec *m = find(a, K_MAP);
		if (!m || m->seq > since || m->size == 0)
			break;
		a += m->size;
		unmap_rec(m);
	}
	pthread_mutex_unlock(&mu);
}

/* ---- waiting for the driver ---- */

/* A fenced allocation granted after borrowers gave its bytes back (GF_OK_OWED) may find the
 * driver still releasing a stopped borrower's memory: it is tried again this often, this many
 * times (2 s), before its out-of-memory error stands. */
#define SETTLE_NS 5000000L

void settle(void)
{
	struct timespec d = {0, SETTLE_NS};
	nanosleep(&d, NULL);
}

/* ---- fork and exit ---- */

void account_lock(void) { pthread_mutex_lock(&mu); }
void account_unlock(void) { pthread_mutex_unlock(&mu); }

void account_forget(void)
{
	for (int i = 0; i < GF_MAX_DEV; i++) {
		struct dev *d = &devs[i];
		if (d->state == DEV_FENCED) {
			/* The parent's slot and mappings are not the child's (the parent's liveness lock
			 * stays with the parent's open file). */
			gf_unmap(&d->m);
		}
		memset(d, 0, sizeof *d);
	}
	free(recs);
	recs = NULL;
	nrecs = cap_recs = dead_recs = 0;
	pthread_mutex_unlock(&mu);
}
