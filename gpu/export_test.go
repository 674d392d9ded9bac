package gpu

import (
	"path/filepath"
	"strconv"
)

// What the external tests (package gpu_test, which can use internal/testutil) check directly:
// that a dead process's entry is removed from disk, not only left out of Processes, and how the
// simulator stores and defaults its sensor readings.
var (
	ProcPath        = (*Simulated).procPath
	WriteFileAtomic = writeFileAtomic
)

// LoadPath is where a process's declared SM load is stored; GPMPath the pinned GPM readings.
func LoadPath(s *Simulated, uuid string, pid int) string {
	return filepath.Join(s.dir, uuid, simLoadDir, strconv.Itoa(pid))
}

func GPMPath(s *Simulated, uuid string) string { return filepath.Join(s.dir, uuid, simGPMFile) }

const (
	SimDefaultPowerLimit = simDefaultPowerLimit
	SimSensorsFile       = simSensorsFile
)

// watchedGPUs is how many GPUs b's event watch registered: 0 for a backend without one.
func watchedGPUs(b Backend) int {
	w, ok := b.(interface{ watchedGPUs() int })
	if !ok {
		return 0
	}
	return w.watchedGPUs()
}

// WatchesEvents says whether b registered a GPU for XID and ECC events; GPUTests whether this is
// the GPU machine (GPUFRAC_GPU_TESTS=1).
func WatchesEvents(b Backend) bool { return watchedGPUs(b) > 0 }

var GPUTests = gpuTests
