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
