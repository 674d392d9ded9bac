/* How the fence finds the driver's real entry points and speaks (lookup.c): the bottom of the
 * library's files but say.c and libc.c. The wrappers (fence.c, view.c, pool.c) call the real entry points through
 * it, and interpose.c records there what it swapped for a wrapper; nothing here calls either. */
#ifndef GPUFRAC_FENCE_LOOKUP_H
#define GPUFRAC_FENCE_LOOKUP_H

#include <stddef.h>

/* The wrapped entry points. */
enum api {
	A_ALLOC,
	A_PITCH,
	A_MANAGED,
	A_FREE,
	A_INFO,
	A_CREATE,
	A_RELEASE,
	A_MAP,
	A_UNMAP,
	A_RETAIN,
	A_ASYNC,
	A_FREEASYNC,
	A_POOL,
	A_ARRAY,
	A_ARRAY3D,
	A_ARRAYDESTROY,
	A_MIPMAP,
	A_MIPMAPDESTROY,
	A_TOTAL,
	A_TOTAL1,
	A_TRIM,
	A_POOLDESTROY,
	A_GPA1,
	A_GPA2,
	A_N
};

/* Slots 0 and 1 hold what dlsym and cuGetProcAddress hand out (a plain and a per-thread-stream
 * variant have one signature and two addresses); 2 and 3 back the exported names. */
#define SLOTS 4

/* One driver name the fence wraps. */
struct gf_name {
	const char *sym; /* as dlsym and the exported symbols spell it */
	const char *gpa; /* as cuGetProcAddress is asked for it */
	int minver;      /* older ABIs of the same name take 32-bit sizes: left alone */
	int api;
	int slot; /* the exported name's slot */
};
extern const struct gf_name gf_names[];
extern const size_t gf_nnames;

/* real_of is the driver's address behind slot of api, or NULL before it was handed out. */
void *real_of(int api, int slot);
/* gf_real_claim records p as slot s's driver address of api unless another is there already:
 * 1 when slot s now holds p. */
int gf_real_claim(int api, int s, void *p);
/* driver_sym finds a driver entry point the fence calls itself (unwrapped). */
void *driver_sym(const char *name);

#define REAL(api, slot, type) ((type)real_of(api, slot))

#endif
