package runner

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
)

// maxCollateral bounds how often one job is re-run after collateral failures.
const maxCollateral = 3

// collateralLead is how long before the enforcer's mark a failure still counts: the enforcer
// signals the task first and marks the GPU next (microseconds apart), and the runner sees an exit
// up to a sampling period late.
const collateralLead = 250 * time.Millisecond

// gpuEvents records the enforcer's GPU-wide events; the enforcer's event goroutine writes, the
// run's loop and the attempts' goroutines read.
type gpuEvents struct {
	mu   sync.Mutex
	list []wideEvent
}

// wideEvent is a GPU-wide event and, for a neighbour over its cap, the violator's reservation,
// whose own failure is not collateral.
type wideEvent struct {
	record.GPUEvent
	token string
}

// note records a gpu-health event at its time (the run stamps one that came without, onEvent).
func (g *gpuEvents) note(ev enforcer.Event, index int) {
	t := ev.Time
	g.mu.Lock()
	defer g.mu.Unlock()
	switch ev.Stage {
	case enforcer.StageUnhealthy:
		g.list = append(g.list, wideEvent{GPUEvent: record.GPUEvent{GPU: ev.GPU, GPUIndex: index, Reason: ev.Message, Start: t}})
	case enforcer.StageHealthy:
		for i := range g.list {
			if g.list[i].GPU == ev.GPU && g.list[i].End.IsZero() {
				g.list[i].End = t
			}
		}
	}
}

// overCap opens (stage "crossed") or closes ("contained") a neighbour-over-its-cap window at the
// event's time.
func (g *gpuEvents) overCap(ev enforcer.Event, index int, job string) {
	t := ev.Time
	g.mu.Lock()
	defer g.mu.Unlock()
	switch ev.Stage {
	case enforcer.StageCrossed:
		g.list = append(g.list, wideEvent{token: ev.Token, GPUEvent: record.GPUEvent{GPU: ev.GPU, GPUIndex: index, Start: t, Neighbour: true,
			Reason: fmt.Sprintf("job %s over its cap (%s in use) until the watchdog's kill", job, ev.Bytes)}})
	case enforcer.StageContained:
		for i := range g.list {
			if g.list[i].token == ev.Token && g.list[i].End.IsZero() {
				g.list[i].End = t
			}
		}
	}
}

// covering is the latest event on gpu that explains a failure of an attempt that ran from start
// until its process ended at end: the attempt was on the GPU before the mark was cleared, the mark
// came before the failure (or within collateralLead after it), and the failure came while the GPU
// was marked or within after of the mark's clearing. A neighbour's window explains only an
// out-of-memory failure (oom) of another task (not token's).
func (g *gpuEvents) covering(gpu, token string, oom bool, start, end time.Time, after time.Duration) (record.GPUEvent, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := len(g.list) - 1; i >= 0; i-- {
		e := g.list[i]
		if e.GPU != gpu || e.Start.After(end.Add(collateralLead)) {
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

func (g *gpuEvents) all() []record.GPUEvent {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]record.GPUEvent, len(g.list))
	for i, e := range g.list {
		out[i] = e.GPUEvent
	}
	return out
}

// collateralAfter is how long after a GPU is marked healthy again a failure still counts: the
// mark is cleared once the GPU's clients are gone, a watchdog interval or two after the last
// one left, and a faulted neighbour may take a moment longer to end its own wrapper.
func (r *run) collateralAfter() time.Duration {
	return time.Second + 3*r.o.Policy.WatchdogInterval
}

// collateral records a failed attempt, whose process ended at exited, as collateral damage of a
// GPU-wide event when one explains it (its outcome and detail). A job that has been re-run
// maxCollateral times already stays failed, its detail naming the last event.
func (r *run) collateral(j *jobState, at *record.Attempt, token string, oom bool, exited time.Time) {
	if exited.IsZero() {
		exited = at.End
	}
	e, ok := r.wide.covering(at.GPU, token, oom, at.Start, exited, r.collateralAfter())
	if !ok {
		return
	}
	if j.collateral >= maxCollateral {
		at.Detail = fmt.Sprintf("%s; after %s (not re-run: %d collateral failures already)", at.Detail, e, j.collateral)
		return
	}
	j.collateral++
	why := at.Detail
	at.Outcome = record.OutcomeCollateral
	at.Detail = fmt.Sprintf("failed during a %s; re-run", e)
	if why != "" {
		at.Detail += " (its last words: " + why + ")"
	}
}

// neighbours says what a cap violation meant for the other jobs of its GPU: under MPS a stop by
// signal is a GPU-wide event (their failures count as collateral and re-run); otherwise the
// violator failed alone.
func neighbours(at record.Attempt) string {
	if v := at.Violation; v != nil && v.Mode == policy.ModeMPS && v.Action != enforcer.ActionOOMInProcess {
		return "stopped under MPS: a GPU-wide event, a neighbour that fails now is re-run"
	}
	return "neighbours untouched"
}

// writeCollateral adds the GPU-wide events and the collateral failures to the run's summary.
func writeCollateral(w io.Writer, res *record.Result) {
	for _, e := range res.GPUEvents {
		end := "still marked at the end"
		if !e.End.IsZero() {
			end = fmt.Sprintf("healthy again after %.1fs", e.End.Sub(e.Start).Seconds())
		}
		fmt.Fprintf(w, "%s (%s)\n", e, end)
	}
	if res.Collateral == 0 {
		return
	}
	var jobs []string
	for _, a := range res.Attempts {
		if a.Outcome == record.OutcomeCollateral {
			jobs = append(jobs, a.Job)
		}
	}
	fmt.Fprintf(w, "collateral failures (a neighbour's stop under MPS, re-run): %d (%s)\n", res.Collateral, strings.Join(jobs, ", "))
}
