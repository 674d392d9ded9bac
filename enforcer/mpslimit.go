package enforcer

import (
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/size"
)

// pinnedLimit reads a process's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for GPU uuid. ok is false when no
// entry applies or the value cannot be read: then the driver does not bound the process below its
// GPU budget, and the watchdog treats it as unlimited.
func pinnedLimit(v, uuid string) (size.Bytes, bool) {
	limit, ok, err := gpu.ParseMPSLimit(v, uuid)
	return limit, ok && err == nil
}
