package enforcer

import (
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
		opts    EnvOptions
		want    map[string]string
		missing []string
	}{
		{
			name: "isolated exec task",
			mode: policy.ModeIsolated,
			want: map[string]string{
				EnvCUDADevices: "GPU-aaaa", EnvReservation: "tok123", EnvCapBytes: "10737418240",
				EnvGPUUUID: "GPU-aaaa", EnvMemoryFraction: "0.1250", EnvXLAFraction: "0.1250", EnvMode: "isolated",
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
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := TaskEnv(res, gpuState(tc.mode), tc.opts)
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
