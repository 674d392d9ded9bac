package enforcer

import (
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
)

// LedgerGPU is what the ledger records of a GPU the backend lists. The plugin, `gpufrac run`
// and `gpufrac probe` all fill the ledger's inventory through it, so a field the backend gains
// reaches the ledger in one place.
func LedgerGPU(d gpu.Device) ledger.GPUInfo {
	return ledger.GPUInfo{UUID: d.UUID, Index: d.Index, Model: d.Model, TotalBytes: d.MemoryBytes,
		PCIBusID: d.PCIBusID, Healthy: d.Healthy, HealthReason: d.HealthReason}
}
