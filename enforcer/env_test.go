package enforcer

import (
	"strconv"
	"testing"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

func TestTaskEnv(t *testing.T) {
	gpuState := func(mode policy.Mode) ledger.GPUState {
		return ledger.GPUState{GPUInfo: ledger.GPUInfo{UUID: "GPU-aaaa", TotalBytes: 80 * size.GiB}, Mode: mode}
	}
	res := ledger.Reservation{Token: "tok123", GPU: "GPU-aaaa", CapBytes: 10 * size.GiB}
	cases := []struct {
		name    string
		mode    policy.Mode
		limit   size.Bytes // the reservation's borrowing limit
		opts    EnvOptions
		want    map[string]string
		missing []string
	}{
		{
			name: "isolated exec task",
			mode: policy.ModeIsolated,
			want: map[string]string{
				EnvCUDADevices: "GPU-aaaa", EnvReservation: "tok123", EnvCapBytes: "10737418240",
				EnvGPUUUID: "GPU-aaaa", EnvMemoryFraction: "0.1250", EnvXLAFraction: "0.0937", EnvMode: "isolated",
				"GPUFRAC_RESERVATION_GPU_aaaa": "tok123",
			},
			missing: []string{EnvNVIDIADevices, EnvMPSMemLimit, EnvMPSPipeDir},
		},
		{
			name: "mps docker task",
			mode: policy.ModeMPS,
			opts: EnvOptions{MPSPipeDir: "/run/gpufrac/mps/GPU-aaaa/pipe", MPSLogDir: "/run/gpufrac/mps/GPU-aaaa/log", DockerRuntime: true},
			want: map[string]string{
				EnvNVIDIADevices: "GPU-aaaa", EnvMPSMemLimit: "GPU-aaaa=10240M",
				EnvMPSPipeDir: "/run/gpufrac/mps/GPU-aaaa/pipe", EnvMPSLogDir: "/run/gpufrac/mps/GPU-aaaa/log",
			},
		},
		{
			// Its cap is the fence's; the pinned limit is what it may borrow up to, or the driver
			// would refuse its first borrowed byte.
			name:  "mps borrower",
			mode:  policy.ModeMPS,
			limit: 78 * size.GiB,
			opts:  EnvOptions{MPSPipeDir: "/run/gpufrac/mps/GPU-aaaa/pipe"},
			want:  map[string]string{EnvMPSMemLimit: "GPU-aaaa=79872M", EnvCapBytes: "10737418240"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := res
			r.LimitBytes = tc.limit
			env := TaskEnv(r, gpuState(tc.mode), tc.opts)
			for k, v := range tc.want {
				if env[k] != v {
					t.Errorf("%s = %q, want %q", k, env[k], v)
				}
			}
			for _, k := range tc.missing {
				if _, ok := env[k]; ok {
					t.Errorf("%s is set to %q, want it absent", k, env[k])
				}
			}
		})
	}
}

func TestFractionRoundsDown(t *testing.T) {
	cases := []struct {
		capBytes, total size.Bytes
		want            float64
	}{
		{1, 3, 0.3333},
		{2, 3, 0.6666},
		{5, 4, 1},
		{139 * size.GiB, 140 * size.GiB, 0.9928},
	}
	for _, tc := range cases {
		if got := fraction(tc.capBytes, tc.total); got != tc.want {
			t.Errorf("fraction(%d, %d) = %v, want %v", tc.capBytes, tc.total, got, tc.want)
		}
	}
}

// The fraction variables are of the total the task reads. Under the fence that total is already
// the cap (cuMemGetInfo, cuDeviceTotalMem), so JAX gets its default 75% of the cap and a tool
// told GPUFRAC_MEMORY_FRACTION gets the whole cap; without the fence (the table alone, or MPS,
// whose pinned limit leaves total at the whole GPU) they are shares of the GPU.
func TestFractionsAreOfTheTotalTheTaskSees(t *testing.T) {
	res := ledger.Reservation{Token: "tok123", GPU: "GPU-aaaa", CapBytes: 10 * size.GiB}
	fenced := EnvOptions{FenceDir: "/run/gpufrac/fence", FenceLibrary: "/run/gpufrac/fence/libgpufrac-fence.so"}
	cases := []struct {
		name        string
		mode        policy.Mode
		total       size.Bytes
		opts        EnvOptions
		memory, xla string
		bytesLimit  size.Bytes // what JAX preallocates: the fraction times the total it reads
	}{
		{"fence on, isolated", policy.ModeIsolated, 140 * size.GiB, fenced, "1.0000", "0.7500", 7680 * size.MiB},
		{"fence on, mps", policy.ModeMPS, 140 * size.GiB, fenced, "1.0000", "0.7500", 7680 * size.MiB},
		{"fence on, total unknown", policy.ModeIsolated, 0, fenced, "1.0000", "0.7500", 7680 * size.MiB},
		{"fence off, mps", policy.ModeMPS, 140 * size.GiB, EnvOptions{}, "0.0714", "0.0535", 7669 * size.MiB},
		{"table only (simulated)", policy.ModeIsolated, 80 * size.GiB, EnvOptions{FenceDir: "/x"}, "0.1250", "0.0937", 7675 * size.MiB},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := ledger.GPUState{GPUInfo: ledger.GPUInfo{UUID: "GPU-aaaa", TotalBytes: tc.total}, Mode: tc.mode}
			env := TaskEnv(res, g, tc.opts)
			if env[EnvMemoryFraction] != tc.memory || env[EnvXLAFraction] != tc.xla {
				t.Fatalf("%s=%q %s=%q, want %q and %q", EnvMemoryFraction, env[EnvMemoryFraction], EnvXLAFraction, env[EnvXLAFraction], tc.memory, tc.xla)
			}
			seen := res.CapBytes // what cuMemGetInfo reports as total under the fence
			if _, on := env["LD_PRELOAD"]; !on {
				seen = tc.total
			}
			xla, err := strconv.ParseFloat(env[EnvXLAFraction], 64)
			if err != nil {
				t.Fatal(err)
			}
			got := size.Bytes(xla * float64(seen))
			if got/size.MiB != tc.bytesLimit/size.MiB || got > res.CapBytes {
				t.Fatalf("JAX would preallocate %s of the %s it reads, want %s (within the 10GiB cap)", got, seen, tc.bytesLimit)
			}
		})
	}
}
