package gpu

import (
	"context"
	"errors"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// Backend kinds.
const (
	KindNVML      = "nvml"
	KindSimulated = "simulated"
)

// Device is one physical GPU.
type Device struct {
	Index       int
	UUID        string
	Model       string
	MemoryBytes size.Bytes
	PCIBusID    string
	// Minor is N in /dev/nvidiaN, the node an exec task needs; -1 when unknown.
	Minor        int
	Healthy      bool
	HealthReason string // why Healthy is false; empty when healthy
	// EventAt is when the event that took the GPU out of service came (a critical XID, a
	// double-bit ECC error); zero when no event did. An event's mark lasts as long as the
	// process that saw it, and a job that failed at about that time failed with its GPU.
	EventAt time.Time
}

// SameHealth says whether d and o report the same health, reason included: a health look (the
// plugin's, gpufrac run's) acts when a GPU's changed.
func (d Device) SameHealth(o Device) bool {
	return d.Healthy == o.Healthy && d.HealthReason == o.HealthReason
}

// Process is one process holding memory on a GPU. PIDs are host PIDs.
type Process struct {
	PID       int
	UsedBytes size.Bytes
}

// Power is a GPU's power reading, in milliwatts as NVML gives it.
type Power struct {
	UsageMilliwatts uint32
	// LimitMilliwatts is the enforced power limit; 0 when the driver did not say.
	LimitMilliwatts uint32
}

// Backend lists GPUs and what runs on them. Implementations are safe for concurrent use.
type Backend interface {
	// Kind is KindNVML or KindSimulated; callers print it so a simulated run is never mistaken
	// for a real one.
	Kind() string
	// DriverVersion is the driver's version string ("simulated" for the simulated backend).
	DriverVersion() string
	// Devices lists every GPU in index order.
	Devices(ctx context.Context) ([]Device, error)
	// MemoryUsed is the memory in use on one GPU, by every process and the driver.
	MemoryUsed(ctx context.Context, uuid string) (size.Bytes, error)
	// Processes lists the compute processes on one GPU with their memory.
	Processes(ctx context.Context, uuid string) ([]Process, error)
	// Utilization is the percent of time a kernel ran over the last sample period.
	Utilization(ctx context.Context, uuid string) (int, error)
	// Temperature is the GPU die's temperature in degrees Celsius.
	Temperature(ctx context.Context, uuid string) (int, error)
	// Power is the GPU's power draw and the limit the driver holds it to. An error means the
	// draw could not be read; a limit that could not be read is 0.
	Power(ctx context.Context, uuid string) (Power, error)
	// OpenGPM starts reading the GPU's performance monitor (GPM: Hopper and newer). The error
	// wraps ErrNoGPM when the GPU or driver has none.
	OpenGPM(ctx context.Context, uuid string) (GPMSampler, error)
	// Close releases the backend.
	Close() error
}

// GPM is what a GPU's performance monitor measured over one period. NVML's utilization says
// whether any kernel ran during a period; GPM says how much of the SMs did: a small job that
// keeps a kernel running all the time shows 100% utilization and a few percent SM activity.
type GPM struct {
	// Start and End bound the period; a sampler's periods follow each other without gaps.
	Start, End time.Time
	// SMUtil is the percent of the period the SMs were active (GPM_METRIC_SM_UTIL), averaged
	// over the SMs: 0 to 100.
	SMUtil float64
	// SMOccupancy is the percent of the SMs' warp slots occupied (GPM_METRIC_SM_OCCUPANCY), 0 to 100.
	SMOccupancy float64
}

// GPMSampler reads successive GPM periods of one GPU. Read and Close are safe for concurrent use.
type GPMSampler interface {
	// Read returns the metrics of the period since the previous Read (or since OpenGPM). NVML
	// needs periods of at least about 100 ms to give stable figures.
	Read(ctx context.Context) (GPM, error)
	// Close releases the sampler; Read fails after it.
	Close() error
}

// ErrNoGPM means a GPU has no performance monitor gpufrac can read (before Hopper, or a driver
// without GPM): SM activity is then unknown, never 0.
var ErrNoGPM = errors.New("GPU performance monitoring (GPM) is not available")

// ErrNoNVML means the NVIDIA management library could not be loaded or initialised: no driver,
// no GPU, or no permission. It is never turned into "zero GPUs" silently.
var ErrNoNVML = errors.New("NVML is not available")

// ErrUnknownDevice means a UUID names no GPU of this backend.
var ErrUnknownDevice = errors.New("unknown GPU")
