/*
 * What the fence needs from the C library, found at run time so that no glibc-only symbol is a
 * hard dependency. LD_PRELOAD reaches every process of a task, GPU or not: a musl process (an
 * Alpine image, a busybox helper) must start and run as if the fence were not there. There the
 * fence is passive: it forwards dlsym and wraps nothing, and the watchdog alone watches the
 * process (it says so once, when the process first reaches for the driver).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <string.h>

#include "fence.h"

/* glibc only: weak, so a C library without them leaves them null instead of failing the load. */
extern void *dlvsym(void *, const char *, const char *) __attribute__((weak));
extern int __register_atfork(void (*)(void), void (*)(void), void (*)(void), void *) __attribute__((weak));
extern void *__dso_handle __attribute__((weak));

static int passive;

int gf_passive(void) { return __atomic_load_n(&passive, __ATOMIC_ACQUIRE); }

void gf_note_driver(void)
{
	static int said;
	if (gf_passive() && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		say("this process's C library is not glibc: the fence is passive here (allocations unfenced, "
		    "the watchdog watches the task)");
}

void gf_at_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void))
{
	/* glibc's pthread_atfork is this call with the caller's DSO handle (so dlclose drops it). */
	if (__register_atfork)
		__register_atfork(prepare, parent, child, &__dso_handle);
}

/* ---- another C library's dlsym, read from its dynamic symbol table ---- */

struct want {
	const void *self; /* an address inside the fence: its own dlsym is not the one */
	void *found;
};

/* Dynamic entries are relocated by glibc's loader but not by musl's: an entry below the load
 * base is an offset from it. */
static const void *dyn_addr(ElfW(Addr) base, ElfW(Addr) v) { return (const void *)(v < base ? base + v : v); }

static uint32_t sym_count(ElfW(Addr) base, const ElfW(Dyn) *dyn)
{
	const uint32_t *sysv = NULL, *gnu = NULL;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		if (dyn->d_tag == DT_HASH)
			sysv = dyn_addr(base, dyn->d_un.d_ptr);
		else if (dyn->d_tag == DT_GNU_HASH)
			gnu = dyn_addr(base, dyn->d_un.d_ptr);
	}
	if (sysv)
		return sysv[1]; /* nchain: one entry per symbol */
	if (!gnu)
		return 0;
	/* The GNU table: the highest symbol a bucket starts at, then along its chain to the end bit. */
	uint32_t nbuckets = gnu[0], symoffset = gnu[1], bloom = gnu[2];
	const uint32_t *buckets = gnu + 4 + bloom * (sizeof(ElfW(Addr)) / 4);
	const uint32_t *chain = buckets + nbuckets;
	uint32_t last = 0;
	for (uint32_t i = 0; i < nbuckets; i++)
		if (buckets[i] > last)
			last = buckets[i];
	if (last < symoffset)
		return symoffset;
	while (!(chain[last - symoffset] & 1))
		last++;
	return last + 1;
}

static int find_dlsym(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct want *w = arg;
	const ElfW(Dyn) *dyn = NULL;
	int self = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		ElfW(Addr) start = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)start;
		else if (ph->p_type == PT_LOAD && (ElfW(Addr))w->self >= start && (ElfW(Addr))w->self < start + ph->p_memsz)
			self = 1;
	}
	if (!dyn || self)
		return 0;
	const ElfW(Sym) *syms = NULL;
	const char *strs = NULL;
	for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
		if (d->d_tag == DT_SYMTAB)
			syms = dyn_addr(info->dlpi_addr, d->d_un.d_ptr);
		else if (d->d_tag == DT_STRTAB)
			strs = dyn_addr(info->dlpi_addr, d->d_un.d_ptr);
	}
	if (!syms || !strs)
		return 0;
	uint32_t n = sym_count(info->dlpi_addr, dyn);
	for (uint32_t i = 1; i < n; i++) {
		const ElfW(Sym) *s = &syms[i];
		if (s->st_shndx != SHN_UNDEF && (s->st_info & 0xf) == STT_FUNC && strcmp(strs + s->st_name, "dlsym") == 0) {
			w->found = (void *)(info->dlpi_addr + s->st_value);
			return 1;
		}
	}
	return 0;
}

dlsym_fn gf_find_dlsym(void)
{
	if (dlvsym) {
		dlsym_fn f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
		if (!f)
			f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
		return f;
	}
	/* Not glibc: the fence's own dlsym hides the C library's, which is found by reading the
	 * loaded objects' symbol tables. The process keeps a working dlsym; the fence steps aside. */
	__atomic_store_n(&passive, 1, __ATOMIC_RELEASE);
	struct want w = {(const void *)gf_find_dlsym, NULL};
	dl_iterate_phdr(find_dlsym, &w);
	if (!w.found)
		say("this process's C library is not glibc and its dlsym was not found: dlsym answers nothing");
	return (dlsym_fn)w.found;
}

/* ---- the real dlsym, found once ---- */

/* Read by interpose.c's dlsym stub by name, from assembly. */
__attribute__((visibility("hidden"), used)) dlsym_fn gf_real_dlsym;
static pthread_once_t real_once = PTHREAD_ONCE_INIT;

static void find_real_dlsym(void) { __atomic_store_n(&gf_real_dlsym, gf_find_dlsym(), __ATOMIC_RELEASE); }

dlsym_fn real_dlsym(void)
{
	pthread_once(&real_once, find_real_dlsym);
	return gf_real_dlsym;
}
