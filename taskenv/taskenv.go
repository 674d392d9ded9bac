// Package taskenv names the environment variables a task is handed (by the Nomad plugin's
// Reserve and by gpufrac run) and read back from it (by the watchdog, the probe, the simulated
// backend and the preload library). It imports nothing of the module, so every side can use it;
// the preload library's C reads the same names from taskenv.h, generated from this file
// (go generate ./taskenv) and checked against it by TestCHeaderIsGenerated.
package taskenv

import "strings"

// What a reserved task receives. They are a contract with users' job specs.
const (
	// Reservation is the task's reservation token. A task of several device requests carries
	// only the last one's (Nomad merges the environments): ReservationKey has each GPU's.
	Reservation = "GPUFRAC_RESERVATION"
	// ReservationPrefix starts ReservationKey.
	ReservationPrefix = "GPUFRAC_RESERVATION_"
	CapBytes          = "GPUFRAC_CAP_BYTES"
	GPUUUID           = "GPUFRAC_GPU_UUID"
	MemoryFraction    = "GPUFRAC_MEMORY_FRACTION"
	Mode              = "GPUFRAC_MODE"
	XLAFraction       = "XLA_PYTHON_CLIENT_MEM_FRACTION"
	CUDADevices       = "CUDA_VISIBLE_DEVICES"
	NVIDIADevices     = "NVIDIA_VISIBLE_DEVICES"
	MPSPipeDir        = "CUDA_MPS_PIPE_DIRECTORY"
	MPSLogDir         = "CUDA_MPS_LOG_DIRECTORY"
	MPSMemLimit       = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
)

// What puts a task's processes under the allocation fence.
const (
	// FenceDir is the directory of the GPUs' fence tables.
	FenceDir = "GPUFRAC_FENCE_DIR"
	// FenceLibrary is the preload library's path, for a task that sets its own LD_PRELOAD.
	FenceLibrary = "GPUFRAC_FENCE_LIBRARY"
	Preload      = "LD_PRELOAD"
	// FenceDebug makes the library say where it placed each process.
	FenceDebug = "GPUFRAC_FENCE_DEBUG"
)

// What gpufrac run adds to every job, and what simulated GPUs and jobs read.
const (
	Template = "GPUFRAC_TEMPLATE"
	Job      = "GPUFRAC_JOB"
	Result   = "GPUFRAC_RESULT"
	// SimDir is the simulated backend's state directory.
	SimDir = "GPUFRAC_SIM_DIR"
	// SimJob marks a process started to run a simulated job.
	SimJob = "GPUFRAC_SIMJOB"
)

// ReservationKey is the per-GPU twin of Reservation: GPUFRAC_RESERVATION_<uuid> with '-' turned
// into '_'. Nomad merges the environments of a task's device requests and the last one wins on
// a shared key, so a task that holds reservations on two GPUs carries only the last
// Reservation; its per-GPU keys differ and all survive.
func ReservationKey(uuid string) string {
	return ReservationPrefix + strings.ReplaceAll(uuid, "-", "_")
}

// TokenFor finds a process's reservation on GPU uuid in its environment the way the preload
// library reads one environment: the per-GPU key first, then Reservation when GPUUUID names
// this GPU.
func TokenFor(uuid string, getenv func(string) string) string {
	if t := getenv(ReservationKey(uuid)); t != "" {
		return t
	}
	if strings.EqualFold(getenv(GPUUUID), uuid) {
		return getenv(Reservation)
	}
	return ""
}

// Owned says whether gpufrac sets key itself for every attempt of a job, over whatever the job
// asked for: a job's own value would be lost without a word, so a queue refuses it. LD_PRELOAD
// is not owned: a job's own preload is kept after the fence's. Variables only read from a task
// (GPUFRAC_FENCE_DEBUG) or set for simulated jobs by the caller are not owned either.
func Owned(key string) bool {
	switch key {
	case Reservation, CapBytes, GPUUUID, MemoryFraction, Mode, XLAFraction, CUDADevices, NVIDIADevices,
		MPSPipeDir, MPSLogDir, MPSMemLimit, FenceDir, FenceLibrary, Template, Job, Result, SimDir:
		return true
	}
	return strings.HasPrefix(key, ReservationPrefix)
}
