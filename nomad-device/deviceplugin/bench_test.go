package deviceplugin

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/size"
)

// BenchmarkReserve is one Nomad Reserve call end to end inside the plugin: admission in the
// ledger (committed to disk with fsync in a temp state_dir), GPU preparation and the task
// environment. The scheduler reusing the same units each time is the steady state: every call
// also ends the previous reservation.
func BenchmarkReserve(b *testing.B) {
	s, _ := newSimB(b)
	m := s.runtime().fingerprint()
	ids := []string{m.DeviceGroup[0].Devices[0].ID, m.DeviceGroup[0].Devices[1].ID, m.DeviceGroup[0].Devices[2].ID}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := s.Reserve(ctx, ids)
		if err != nil || len(res.Envs) == 0 {
			b.Fatal(err)
		}
	}
}

func newSimB(b *testing.B) (*Server, string) {
	dir := b.TempDir()
	s := NewServer(Options{})
	b.Cleanup(s.Shutdown)
	cfg, err := ParseConfig(nil)
	if err != nil {
		b.Fatal(err)
	}
	cfg.GPUBackend, cfg.SimulatedGPUs, cfg.StateDir, cfg.SimulatedDir = gpu.KindSimulated, []string{"H100=80GiB"}, dir, dir+"/sim"
	s.cfg = &cfg
	return s, dir
}

// BenchmarkFingerprint8GPUs builds the full fingerprint message of a node with 8 GPUs of 141
// units each (an 8 x H200 node with the default 1GiB unit and 2GiB headroom), as the plugin does
// on every ledger change: read the ledger's states and turn them into protobuf.
func BenchmarkFingerprint8GPUs(b *testing.B) {
	l, err := ledger.Open("", ledger.Options{NoPersist: true})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var gpus []ledger.GPUInfo
	for i := 0; i < 8; i++ {
		gpus = append(gpus, ledger.GPUInfo{UUID: gpu.SimUUID(i, "H200"), Index: i, Model: "NVIDIA H200",
			TotalBytes: 143 * size.GiB, PCIBusID: "00000000:1A:00.0", Healthy: true})
	}
	if err := l.SyncGPUs(gpus); err != nil {
		b.Fatal(err)
	}
	info := groupInfo{backend: "nvml", driver: "570.124.06", policy: "default"}
	msg := buildFingerprint(l.States(), info)
	if n := len(msg.DeviceGroup); n != 8 || len(msg.DeviceGroup[7].Devices) != 141 {
		b.Fatalf("%d groups of %d units, want 8 of 141", n, len(msg.DeviceGroup[7].Devices))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		msg = buildFingerprint(l.States(), info)
	}
	b.ReportMetric(float64(proto.Size(msg)), "wire-bytes")
}
