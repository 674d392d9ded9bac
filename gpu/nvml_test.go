package gpu

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// gpuTests is set on the GPU machine, where NVML must work; elsewhere NVML must fail cleanly.
var gpuTests = os.Getenv("GPUFRAC_GPU_TESTS") == "1"

func TestNewNVML(t *testing.T) {
	b, err := NewNVML(nil)
	if !gpuTests {
		if err == nil {
			b.Close()
			t.Skip("NVML works on this machine: set GPUFRAC_GPU_TESTS=1 to run the GPU variant")
		}
		if !errors.Is(err, ErrNoNVML) {
			t.Fatalf("NewNVML without a GPU: %v, want an error wrapping ErrNoNVML", err)
		}
		t.Logf("as expected without a GPU: %v", err)
		return
	}
	if err != nil {
		t.Fatalf("NewNVML on the GPU machine: %v", err)
	}
	defer b.Close()
	ctx := context.Background()
	if b.Kind() != KindNVML || b.DriverVersion() == "" {
		t.Fatalf("Kind/DriverVersion = %q/%q", b.Kind(), b.DriverVersion())
	}
	devs, err := b.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) == 0 {
		t.Fatalf("no GPUs listed")
	}
	if n := watchedGPUs(b); n == 0 {
		t.Log("no GPU reports XID or ECC events: health comes from queries alone")
	} else {
		t.Logf("watching the XID and ECC events of %d GPU(s)", n)
	}
	for _, d := range devs {
		t.Logf("GPU %d: %s %s %s bus %s healthy=%v %s", d.Index, d.UUID, d.Model, d.MemoryBytes, d.PCIBusID, d.Healthy, d.HealthReason)
		if d.UUID == "" || d.MemoryBytes == 0 {
			t.Fatalf("device %+v lacks a UUID or memory", d)
		}
		// The GPU machine's GPU serves every other GPU test: a mark here is a false one (or
		// the machine needs a reset, which those tests would meet too).
		if !d.Healthy {
			t.Errorf("GPU %s listed unhealthy: %s", d.UUID, d.HealthReason)
		}
		used, err := b.MemoryUsed(ctx, d.UUID)
		if err != nil || used == 0 || used > d.MemoryBytes {
			t.Fatalf("MemoryUsed(%s) = %s, %v", d.UUID, used, err)
		}
		procs, err := b.Processes(ctx, d.UUID)
		if err != nil {
			t.Fatalf("Processes(%s): %v", d.UUID, err)
		}
		util, err := b.Utilization(ctx, d.UUID)
		if err != nil || util < 0 || util > 100 {
			t.Fatalf("Utilization(%s) = %d, %v", d.UUID, util, err)
		}
		temp, err := b.Temperature(ctx, d.UUID)
		if err != nil || temp < 0 || temp > 120 {
			t.Fatalf("Temperature(%s) = %d C, %v", d.UUID, temp, err)
		}
		// Every data-centre GPU reports its draw; a board idles above 1 W and draws no more
		// than a little past its limit.
		p, err := b.Power(ctx, d.UUID)
		if err != nil || p.UsageMilliwatts < 1000 || (p.LimitMilliwatts != 0 && p.UsageMilliwatts > p.LimitMilliwatts*3/2) {
			t.Fatalf("Power(%s) = %+v, %v", d.UUID, p, err)
		}
		t.Logf("  used %s, %d processes, utilization %d%%, %d C, %d / %d mW", used, len(procs), util, temp, p.UsageMilliwatts, p.LimitMilliwatts)
	}
	if _, err := b.MemoryUsed(ctx, "GPU-00000000-0000-0000-0000-000000000000"); !errors.Is(err, ErrUnknownDevice) {
		t.Fatalf("MemoryUsed of an unknown UUID: %v, want ErrUnknownDevice", err)
	}
	if _, err := b.Power(ctx, "GPU-00000000-0000-0000-0000-000000000000"); !errors.Is(err, ErrUnknownDevice) {
		t.Fatalf("Power of an unknown UUID: %v, want ErrUnknownDevice", err)
	}
	// Close waits for the event watch's current wait (200 ms at most) before it shuts NVML down.
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close has not returned after 10 s: the event watch did not stop")
	}
}

func BenchmarkNVMLProcesses(b *testing.B) {
	if !gpuTests {
		b.Skip("GPUFRAC_GPU_TESTS=1 runs this on a GPU machine")
	}
	be, err := NewNVML(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	ctx := context.Background()
	devs, err := be.Devices(ctx)
	if err != nil || len(devs) == 0 {
		b.Fatalf("Devices: %v", err)
	}
	for b.Loop() {
		if _, err := be.Processes(ctx, devs[0].UUID); err != nil {
			b.Fatal(err)
		}
	}
}
