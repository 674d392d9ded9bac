/*
 * What a fenced task is told the GPU holds. Frameworks size themselves from one of three
 * answers: cuMemGetInfo (JAX, vLLM, CuPy, cuDNN's planning), cuDeviceTotalMem (PyTorch's
 * total_memory, DeepSpeed, launchers) or a fraction variable the task environment sets against
 * them (enforcer/env.go). All three describe one GPU: total is the task's guarantee (its cap),
 * free is what is left of it. A borrower past its guarantee sees 0 free: borrowed memory can be
 * taken back, so nothing should plan on it. NVML is left alone (docs/enforcement.md says why).
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>

#include "fence.h"

/* cap_of is the guarantee of the task on d, or 0 when d is not fenced. */
static uint64_t cap_of(struct dev *d, uint64_t *used)
{
	uint64_t cap = 0, u = 0;
	if (!d || gf_view(&d->m, &cap, &u) != GF_OK)
		return 0;
	if (used)
		*used = u;
	return cap;
}

typedef CUresult (*info_fn)(size_t *, size_t *);
static CUresult mem_get_info(int s, size_t *freeb, size_t *total)
{
	info_fn f = REAL(A_INFO, s, info_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	struct dev *d = device(-1);
	if (d)
		pools_settle(d); /* a pool may have given memory back at a synchronization since */
	CUresult r = f(freeb, total);
	uint64_t used = 0, cap;
	if (r != CUDA_SUCCESS || !freeb || !total || !(cap = cap_of(d, &used)))
		return r;
	/* Never a total larger than the GPU (cuDNN plans from it), never more free memory than
	 * the GPU really has. */
	uint64_t left = cap > used ? cap - used : 0;
	if (left < *freeb)
		*freeb = left;
	if (cap < *total)
		*total = cap;
	return r;
}

typedef CUresult (*total_fn)(size_t *, CUdevice);
static CUresult total_mem(int s, size_t *bytes, CUdevice dev)
{
	total_fn f = REAL(A_TOTAL, s, total_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = f(bytes, dev);
	uint64_t cap;
	if (r == CUDA_SUCCESS && bytes && (cap = cap_of(device(dev), NULL)) && cap < *bytes)
		*bytes = cap;
	return r;
}

/* The 3.0 ABI answers in 32 bits (saturated by the driver): the cap when it is smaller. */
typedef CUresult (*total1_fn)(unsigned int *, CUdevice);
static CUresult total_mem1(int s, unsigned int *bytes, CUdevice dev)
{
	total1_fn f = REAL(A_TOTAL1, s, total1_fn);
	if (!f)
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = f(bytes, dev);
	uint64_t cap;
	if (r == CUDA_SUCCESS && bytes && (cap = cap_of(device(dev), NULL)) && cap < *bytes)
		*bytes = (unsigned int)cap;
	return r;
}

DYNX(mem_get_info, (size_t * f, size_t *t), f, t)
DYNX(total_mem, (size_t * b, CUdevice dev), b, dev)
DYNX(total_mem1, (unsigned int *b, CUdevice dev), b, dev)

EXPORT(cuMemGetInfo_v2, mem_get_info, 2, (size_t * f, size_t *t), f, t)
EXPORT(cuDeviceTotalMem_v2, total_mem, 2, (size_t * b, CUdevice dev), b, dev)
EXPORT(cuDeviceTotalMem, total_mem1, 2, (unsigned int *b, CUdevice dev), b, dev)
