package enforcer

import (
	"strconv"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
	"github.com/gpufrac/gpufrac/taskenv"
)

// Environment variables a reserved task receives (spelled in taskenv, which the preload
// library's C shares). They are a contract with users' job specs.
const (
	EnvReservation    = taskenv.Reservation
	EnvCapBytes       = taskenv.CapBytes
	EnvGPUUUID        = taskenv.GPUUUID
	EnvMemoryFraction = taskenv.MemoryFraction
	EnvMode           = taskenv.Mode
	EnvXLAFraction    = taskenv.XLAFraction
	EnvCUDADevices    = taskenv.CUDADevices
	EnvNVIDIADevices  = taskenv.NVIDIADevices
	EnvMPSPipeDir     = taskenv.MPSPipeDir
	EnvMPSLogDir      = taskenv.MPSLogDir
	EnvMPSMemLimit    = taskenv.MPSMemLimit
)

// ReservationKey is the per-GPU twin of GPUFRAC_RESERVATION (taskenv.ReservationKey): the
// watchdog ties a task's processes on each GPU to that GPU's reservation through it, so a task
// of two device blocks keeps both alive.
func ReservationKey(uuid string) string { return taskenv.ReservationKey(uuid) }

// EnvOptions are the node-level choices that shape a task's environment.
type EnvOptions struct {
	// MPSPipeDir and MPSLogDir are where the GPU's MPS control daemon listens (mps mode only).
	MPSPipeDir string
	MPSLogDir  string
	// DockerRuntime sets NVIDIA_VISIBLE_DEVICES, which makes Nomad's docker driver switch the
	// container to the NVIDIA runtime. Off for exec and raw_exec tasks.
	DockerRuntime bool
	// FenceDir and FenceLibrary put every process of the task under the allocation fence
	// (LD_PRELOAD); empty = no fence.
	FenceDir     string
	FenceLibrary string
}

// TaskEnv is the environment of a task that holds reservation r on GPU g. The same function
// serves the Nomad plugin's Reserve and gpufrac run, so both hand jobs identical settings.
func TaskEnv(r ledger.Reservation, g ledger.GPUState, o EnvOptions) map[string]string {
	env := map[string]string{
		EnvCUDADevices: g.UUID,
		EnvReservation: r.Token,
		// A staged task is told the cap it is promised: it sizes itself at its start.
		EnvCapBytes: strconv.FormatUint(uint64(r.Promised()), 10),
		EnvGPUUUID:  g.UUID,
		EnvMode:     string(g.Mode),

		ReservationKey(g.UUID): r.Token,
	}
	// The fractions are of the total the task reads. Under the fence (LD_PRELOAD) cuMemGetInfo
	// and cuDeviceTotalMem already answer the cap, so the task's share of that total is all of
	// it; without the fence (MPS's pinned limit clamps free memory, not total) the total is the
	// whole GPU and the share is cap / GPU. A fraction of the cap applied to a total that is
	// already the cap would shrink the task twice.
	preloaded := o.FenceDir != "" && o.FenceLibrary != ""
	if g.TotalBytes > 0 || preloaded {
		share := 1.0
		if !preloaded {
			share = fraction(r.Promised(), g.TotalBytes)
		}
		env[EnvMemoryFraction] = formatFraction(share)
		// JAX preallocates this fraction of the total: its own default share (the rest is for
		// the CUDA context, cuDNN and XLA's workspace), of the cap instead of the GPU.
		env[EnvXLAFraction] = formatFraction(jaxShare * share)
	}
	if o.DockerRuntime {
		env[EnvNVIDIADevices] = g.UUID
	}
	if o.FenceDir != "" {
		env[taskenv.FenceDir] = o.FenceDir
	}
	if o.FenceDir != "" && o.FenceLibrary != "" {
		// LD_PRELOAD is inherited by every child, so a task's launcher, its workers and their
		// children all load the fence. GPUFRAC_FENCE_LIBRARY lets a task that sets its own
		// LD_PRELOAD keep the fence in it.
		env[taskenv.Preload] = o.FenceLibrary
		env[taskenv.FenceLibrary] = o.FenceLibrary
	}
	if g.Mode == policy.ModeMPS {
		if o.MPSPipeDir != "" {
			env[EnvMPSPipeDir] = o.MPSPipeDir
		}
		if o.MPSLogDir != "" {
			env[EnvMPSLogDir] = o.MPSLogDir
		}
		// A borrower's pinned limit is what it may borrow up to: the fence holds its cap.
		env[EnvMPSMemLimit] = MPSLimit(g.UUID, r.Limit())
	}
	return env
}

// MPSLimit formats a per-client pinned memory limit for one GPU. The limit is rounded down to
// whole MiB so the client never gets more than its cap.
func MPSLimit(uuid string, capBytes size.Bytes) string {
	return uuid + "=" + strconv.FormatUint(uint64(capBytes/size.MiB), 10) + "M"
}

// jaxShare is what JAX preallocates of the memory it sees when not told otherwise.
const jaxShare = 0.75

// fraction rounds down to 4 decimals so a framework sized from it stays under the cap.
func fraction(capBytes, total size.Bytes) float64 {
	f := float64(capBytes) / float64(total)
	if f > 1 {
		f = 1
	}
	return roundDown(f)
}

// roundDown keeps 4 decimals; the epsilon keeps a float product like 0.6*10000 = 5999.99... at 6000.
func roundDown(f float64) float64 { return float64(int64(f*10000+1e-6)) / 10000 }

func formatFraction(f float64) string { return strconv.FormatFloat(roundDown(f), 'f', 4, 64) }
