package gpu

// What the external tests (package gpu_test, which can use internal/testutil) check directly:
// that a dead process's entry is removed from disk, not only left out of Processes, and how the
// simulator stores and defaults its sensor readings.
var (
	ProcPath        = (*Simulated).procPath
	WriteFileAtomic = writeFileAtomic
)

const (
	SimDefaultPowerLimit = simDefaultPowerLimit
	SimSensorsFile       = simSensorsFile
)
