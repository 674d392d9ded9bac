// Package collateral records the GPU-wide events of a run (a GPU marked unhealthy after a forced
// stop, a neighbour over its cap in isolated mode) and says which failed attempt one of them
// explains: such an attempt is collateral damage, not the job's own failure, and runs again.
package collateral

import (
	"fmt"
	"sync"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/record"
)

// MaxReruns bounds how often one job is re-run after collateral failures.
const MaxReruns = 3

// Lead is how long before the enforcer's mark a failure still counts: the enforcer signals the
// task first and marks the GPU next (microseconds apart), and the runner sees an exit up to a
// sampling period late.
const Lead = 250 * time.Millisecond

// Events are the enforcer's GPU-wide events of one run; one goroutine (the enforcer's events)
// writes, others read.
type Events struct {
	mu   sync.Mutex
	list []event
}

// event is a GPU-wide event and, for a neighbour over its cap, the violator's reservation,
// whose own failure is not collateral. byBackend: the GPU backend's verdict, not the
// enforcer's mark; each one's return to health ends only its own.
type event struct {
	record.GPUEvent
	token     string
	byBackend bool
}

// Note records a gpu-health event at its time (the caller stamps one that came without).
func (g *Events) Note(ev enforcer.Event, index int) {
	g.health(ev.GPU, index, ev.Stage == enforcer.StageHealthy, ev.Message, ev.Time, false)
}

// Backend records a change of a GPU's health by the GPU backend (a critical XID, a double-bit
// ECC error, a row remapping that waits for a reset). The window opens at the event's time
// where the backend gives one, else at now: a look notices the mark later than the fault
// that a job failed of, and the fault's own time is what places the failure inside it.
func (g *Events) Backend(d gpu.Device, index int, now time.Time) {
	at := now
	if !d.EventAt.IsZero() && d.EventAt.Before(now) {
		at = d.EventAt
	}
	g.health(d.UUID, index, d.Healthy, d.HealthReason, at, true)
}

func (g *Events) health(uuid string, index int, healthy bool, reason string, t time.Time, byBackend bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !healthy {
		g.list = append(g.list, event{GPUEvent: record.GPUEvent{GPU: uuid, GPUIndex: index, Reason: reason, Start: t}, byBackend: byBackend})
		return
	}
	for i := range g.list {
		if e := &g.list[i]; e.GPU == uuid && e.End.IsZero() && e.byBackend == byBackend {
			e.End = t
		}
	}
}

// OverCap opens (stage "crossed") or closes ("contained") a neighbour-over-its-cap window at the
// event's time; job names the violator.
func (g *Events) OverCap(ev enforcer.Event, index int, job string) {
	t := ev.Time
	g.mu.Lock()
	defer g.mu.Unlock()
	switch ev.Stage {
	case enforcer.StageCrossed:
		g.list = append(g.list, event{token: ev.Token, GPUEvent: record.GPUEvent{GPU: ev.GPU, GPUIndex: index, Start: t, Neighbour: true,
			Reason: fmt.Sprintf("job %s over its cap (%s in use) until the watchdog's kill", job, ev.Bytes)}})
	case enforcer.StageContained:
		for i := range g.list {
			if g.list[i].token == ev.Token && g.list[i].End.IsZero() {
				g.list[i].End = t
			}
		}
	}
}

// Covering is the latest event on gpu that explains a failure of an attempt that ran from start
// until its process ended at end: the attempt was on the GPU before the mark was cleared, the mark
// came before the failure (or within Lead after it), and the failure came while the GPU was
// marked or within after of the mark's clearing. A neighbour's window explains only an
// out-of-memory failure (oom) of another task (not token's).
func (g *Events) Covering(gpu, token string, oom bool, start, end time.Time, after time.Duration) (record.GPUEvent, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := len(g.list) - 1; i >= 0; i-- {
		e := g.list[i]
		if e.GPU != gpu || e.Start.After(end.Add(Lead)) {
			continue
		}
		if e.Neighbour && (!oom || e.token == token) {
			continue
		}
		if !e.End.IsZero() && (start.After(e.End) || end.After(e.End.Add(after))) {
			continue
		}
		return e.GPUEvent, true
	}
	return record.GPUEvent{}, false
}

// Explaining is the event that explains the failure of attempt at, whose process ended at
// exited (at's end where that is unknown): Covering over the attempt's run.
func (g *Events) Explaining(at *record.Attempt, token string, oom bool, exited time.Time, after time.Duration) (record.GPUEvent, bool) {
	if exited.IsZero() {
		exited = at.End
	}
	return g.Covering(at.GPU, token, oom, at.Start, exited, after)
}

// Judge makes a failed attempt, whose process ended at exited, collateral damage of the event
// that explains it (Covering), its outcome and detail saying so, and says whether it did. A job
// re-run MaxReruns times already (reruns) stays failed, its detail naming the last event.
func (g *Events) Judge(at *record.Attempt, token string, oom bool, exited time.Time, after time.Duration, reruns int) bool {
	e, ok := g.Explaining(at, token, oom, exited, after)
	if !ok {
		return false
	}
	if reruns >= MaxReruns {
		at.Detail = fmt.Sprintf("%s; after %s (not re-run: %d collateral failures already)", at.Detail, e, reruns)
		return false
	}
	why := at.Detail
	at.Outcome = record.OutcomeCollateral
	at.Detail = fmt.Sprintf("failed during a %s; re-run", e)
	if why != "" {
		at.Detail += " (its last words: " + why + ")"
	}
	return true
}

// All are the events recorded, for the run's result.
func (g *Events) All() []record.GPUEvent {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]record.GPUEvent, len(g.list))
	for i, e := range g.list {
		out[i] = e.GPUEvent
	}
	return out
}
