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

// healthLook is what the looks at the backend's health share: the listing the last one
// recorded, and who hears of a change.
type healthLook struct {
	// turn lets one look run at a time; a channel, not a mutex, so that a look on demand waits
	// for a stuck one no longer than its context allows.
	turn chan struct{}
	// last is the backend's listing as the ledger has it, for the GPUs Open listed.
	last []gpu.Device
	// onChange hears of each GPU whose health changed (Options.OnHealth), after the ledger
	// recorded it.
	onChange func(gpu.Device)
	// every is the period of Start's looks (HealthPeriod unless Options.HealthPeriod).
	every time.Duration
}

// watchHealth looks at the backend's health every period until ctx ends.
func (n *Node) watchHealth(ctx context.Context) {
	t := time.NewTicker(n.health.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.LookHealth(ctx)
	}
}

// LookHealth lists the GPUs now and records in the ledger the health of those Open listed,
// when one's health or reason changed, then hands each changed GPU to Options.OnHealth. Start
// looks every HealthPeriod; a caller that must know the health of this instant (a job has
// just failed: with its GPU?) looks itself rather than wait for the next look. A GPU that
// vanishes keeps its last listing here (the enforcer reports it: its processes cannot be
// read), and one that appears is not taken on: the node chose its GPUs when it opened. Only a
// node Open built looks; for others it does nothing.
func (n *Node) LookHealth(ctx context.Context) {
	if n.backend == nil {
		return
	}
	select {
	case n.health.turn <- struct{}{}:
		defer func() { <-n.health.turn }()
	case <-ctx.Done():
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	devs, err := n.backend.Devices(lctx)
	cancel()
	if err != nil {
		return // the enforcer reports a backend it cannot read
	}
	next, changed := healthUpdate(n.health.last, devs)
	if len(changed) == 0 {
		return
	}
	if err := SyncGPUs(n.led, next, nil); err != nil {
		n.log.Error("recording the GPU backend's health in the ledger failed", "error", err)
		return
	}
	n.health.last = next
	for _, d := range changed {
		if d.Healthy {
			n.log.Info("GPU healthy again by the GPU backend", "gpu", d.UUID, "index", d.Index)
		} else {
			n.log.Error("GPU unhealthy by the GPU backend: nothing new is admitted on it", "gpu", d.UUID, "index", d.Index,
				"reason", d.HealthReason)
		}
		if n.health.onChange != nil {
			n.health.onChange(d)
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
		next[i].Healthy, next[i].HealthReason, next[i].EventAt = d.Healthy, d.HealthReason, d.EventAt
		changed = append(changed, next[i])
	}
	return next, changed
}
