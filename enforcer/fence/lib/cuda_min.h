/*
 * The few CUDA driver types the fence needs, declared here so it builds with the system C
 * compiler alone (no CUDA toolkit). Layouts follow the driver API's public headers; only the
 * leading fields the fence reads are declared where a struct is passed by pointer.
 */
#ifndef GPUFRAC_CUDA_MIN_H
#define GPUFRAC_CUDA_MIN_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef uint64_t cuuint64_t;
typedef void *CUstream;
typedef void *CUmemoryPool;
typedef void *CUarray;
typedef void *CUmipmappedArray;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3

typedef struct {
	unsigned char bytes[16];
} CUuuid;

/* CUmemAllocationProp: type, requested handle types, then the location {type, id}. */
typedef struct {
	int type;
	int requestedHandleTypes;
	int locationType;
	int locationId;
} CUmemAllocationPropHead;
#define CU_MEM_LOCATION_TYPE_DEVICE 1

typedef struct {
	size_t Width;
	size_t Height;
	int Format;
	unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct {
	size_t Width;
	size_t Height;
	size_t Depth;
	int Format;
	unsigned int NumChannels;
	unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

#endif
