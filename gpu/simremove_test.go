package gpu_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/size"
)

// A removed GPU is gone for every process sharing the directory: not listed, and every query
// about it fails naming the GPU and the reason, while the other GPU is untouched. Brought back,
// it is listed and answers again, with the usage recorded before it went.
func TestSimulatedRemovedGPU(t *testing.T) {
	ctx := context.Background()
	s, devs := testutil.NewSim(t, "2xH100=80GiB")
	other := testutil.AttachSim(t, s.Dir())
	gone, kept := devs[0].UUID, devs[1].UUID
	if err := s.SetUsage(gone, os.Getpid(), size.GiB); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRemoved(gone, true, "XID 79: fell off the bus"); err != nil {
		t.Fatal(err)
	}
	devs, err := other.Devices(ctx)
	if err != nil || len(devs) != 1 || devs[0].UUID != kept {
		t.Fatalf("Devices after the removal: %+v, %v; want only %s", devs, err, kept)
	}
	queries := map[string]func() error{
		"Processes":   func() error { _, err := other.Processes(ctx, gone); return err },
		"MemoryUsed":  func() error { _, err := other.MemoryUsed(ctx, gone); return err },
		"Utilization": func() error { _, err := other.Utilization(ctx, gone); return err },
	}
	for name, q := range queries {
		if err := q(); err == nil || !strings.Contains(err.Error(), gone) || !strings.Contains(err.Error(), "XID 79") ||
			!strings.Contains(err.Error(), "NVML_ERROR_GPU_IS_LOST") {
			t.Errorf("%s of the removed GPU: %v; want an error naming it, NVML's code and the reason", name, err)
		}
	}
	if _, err := other.Processes(ctx, kept); err != nil {
		t.Errorf("Processes of the GPU still there: %v", err)
	}

	if err := s.SetRemoved(gone, false, ""); err != nil {
		t.Fatal(err)
	}
	if devs, err := other.Devices(ctx); err != nil || len(devs) != 2 || devs[0].UUID != gone || !devs[0].Healthy {
		t.Fatalf("Devices once it is back: %+v, %v", devs, err)
	}
	if used, err := other.MemoryUsed(ctx, gone); err != nil || used != size.GiB+gpu.SimDriverReserve {
		t.Fatalf("MemoryUsed once it is back: %s, %v; want the 1GiB recorded plus the driver's", used, err)
	}
	if err := s.SetRemoved("GPU-nope", true, "x"); err == nil {
		t.Error("SetRemoved of an unknown GPU succeeded")
	}
}
