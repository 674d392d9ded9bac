package node

import (
	"context"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
)

// HealthPeriod is how often a node Open built asks its GPU backend whether a GPU's health
// changed (a critical XID, a row remapping that waits for a reset), from Start to Close: the
// plugin looks as often. Without it `gpufrac run` knew a GPU's health only at its start, and
// went on admitting jobs onto a GPU that had fallen off the bus.
const HealthPeriod = time.Second

// watchHealth re-lists the GPUs every HealthPeriod and records in the ledger the health of those
// Open listed, when one's health or reason changed, until ctx ends. A GPU that vanishes keeps
// its last listing here (the enforcer reports it: its processes cannot be read), and one that
// appears is not taken on: the run chose its GPUs at its start.
func (n *Node) watchHealth(ctx context.Context, b gpu.Backend, last []gpu.Device) {
	t := time.NewTicker(HealthPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		devs, err := b.Devices(lctx)
		cancel()
		if err != nil {
			continue // the enforcer reports a backend it cannot read
		}
		next, changed := healthUpdate(last, devs)
		if len(changed) == 0 {
			continue
		}
		if err := SyncGPUs(n.led, next, nil); err != nil {
			n.log.Error("recording the GPU backend's health in the ledger failed", "error", err)
			continue
		}
		last = next
		for _, d := range changed {
			if d.Healthy {
				n.log.Info("GPU healthy again by the GPU backend", "gpu", d.UUID, "index", d.Index)
			} else {
				n.log.Error("GPU unhealthy by the GPU backend: nothing new is admitted on it", "gpu", d.UUID, "index", d.Index,
					"reason", d.HealthReason)
			}
		}
	}
}

// healthUpdate is last with the health of each GPU devs still lists, and those whose health or
// reason changed.
func healthUpdate(last, devs []gpu.Device) (next, changed []gpu.Device) {
	now := make(map[string]gpu.Device, len(devs))
	for _, d := range devs {
		now[d.UUID] = d
	}
	next = make([]gpu.Device, len(last))
	for i, was := range last {
		next[i] = was
		d, ok := now[was.UUID]
		if !ok || d.SameHealth(was) {
			continue
		}
		next[i].Healthy, next[i].HealthReason = d.Healthy, d.HealthReason
		changed = append(changed, next[i])
	}
	return next, changed
}
