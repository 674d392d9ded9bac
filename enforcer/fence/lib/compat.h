/*
 * The oldest glibc the library can load into. LD_PRELOAD reaches every process of a task, and a
 * task's image may carry an older glibc than the machine that built the library: a preloaded
 * object that needs a symbol version its process's glibc lacks stops the process at start
 * ("version `GLIBC_2.34' not found"). So on x86_64 the library binds the first versions of what
 * it calls (dlopen and friends moved into libc in 2.34, fstat and stat became symbols in 2.33; both are
 * still exported under their old versions) and names libdl and libpthread, where older glibcs
 * keep them: it needs GLIBC_2.17 at most (TestLibraryNeedsNoNewGlibc). The build passes this file
 * to every source with -include, the table's files included.
 */
#ifndef GPUFRAC_FENCE_COMPAT_H
#define GPUFRAC_FENCE_COMPAT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <features.h>

#if defined(__x86_64__) && defined(__GLIBC__)
#include <sys/stat.h>

__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
__asm__(".symver dladdr,dladdr@GLIBC_2.2.5");
__asm__(".symver dlvsym,dlvsym@GLIBC_2.2.5");
__asm__(".symver pthread_once,pthread_once@GLIBC_2.2.5");

/* fstat before 2.33: __fxstat with the kernel's struct stat (_STAT_VER_LINUX, 1 on x86_64). */
extern int __fxstat(int ver, int fd, struct stat *st);
__asm__(".symver __fxstat,__fxstat@GLIBC_2.2.5");
static inline int gf_fstat(int fd, struct stat *st) { return __fxstat(1, fd, st); }
#define fstat gf_fstat
/* stat likewise: __xstat. */
extern int __xstat(int ver, const char *path, struct stat *st);
__asm__(".symver __xstat,__xstat@GLIBC_2.2.5");
static inline int gf_stat(const char *path, struct stat *st) { return __xstat(1, path, st); }
#define stat(path, st) gf_stat(path, st)
#endif

#endif
