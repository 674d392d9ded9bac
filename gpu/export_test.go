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
