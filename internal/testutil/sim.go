package testutil

import (
	"context"
	"testing"

	"github.com/gpufrac/gpufrac/gpu"
)

// NewSim is a new simulated machine with gpus (entries of gpu.ParseSimSpec, such as
// "2xH100=80GiB") in a directory the test removes, and its devices in index order.
func NewSim(t testing.TB, gpus ...string) (*gpu.Simulated, []gpu.Device) {
	t.Helper()
	s, err := gpu.NewSimulated(gpu.SimConfig{GPUs: gpus, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	devs, err := s.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s, devs
}

// AttachSim is another handle on the simulated GPUs kept in dir, as a second process opens
// them: what the test sets through it (a task's memory, a fault) every other handle sees.
func AttachSim(t testing.TB, dir string) *gpu.Simulated {
	t.Helper()
	s, err := gpu.NewSimulated(gpu.SimConfig{Dir: dir})
	if err != nil {
		t.Fatalf("attaching to the simulated GPUs in %s: %v", dir, err)
	}
	return s
}
