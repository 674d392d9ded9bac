package enforcer

import (
	"testing"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/size"
)

func TestLedgerGPU(t *testing.T) {
	d := gpu.Device{Index: 3, UUID: "GPU-x", Model: "H200", MemoryBytes: 141 * size.GiB, PCIBusID: "0000:1b:00.0",
		Minor: 3, Healthy: false, HealthReason: "lost"}
	want := ledger.GPUInfo{UUID: "GPU-x", Index: 3, Model: "H200", TotalBytes: 141 * size.GiB, PCIBusID: "0000:1b:00.0",
		Healthy: false, HealthReason: "lost"}
	if got := LedgerGPU(d); got != want {
		t.Fatalf("LedgerGPU = %+v, want %+v", got, want)
	}
}
