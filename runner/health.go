package runner

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu"
)

// failureLook bounds the look at the GPUs' health when a job fails: NVML answers in
// milliseconds, and a backend that hangs must not hold the run's loop for long.
const failureLook = 2 * time.Second

// backendHealth hears of a change of a GPU's health by the GPU backend (the node's look): the
// run records it as a GPU-wide event from the fault's own time, so a job that failed with its
// GPU is re-run as collateral damage, says so, and notes a GPU taken out for the rest of the
// process.
func (r *run) backendHealth(d gpu.Device) {
	g, ok := r.gpus[d.UUID]
	if !ok {
		return // not a GPU of this run
	}
	r.wide.Backend(d, g.Index, r.o.Now())
	r.mu.Lock()
	if !d.Healthy && !d.EventAt.IsZero() {
		r.lasting[d.UUID] = d.HealthReason
	} else {
		delete(r.lasting, d.UUID)
	}
	r.mu.Unlock()
	if d.Healthy {
		r.healthLine(g.Index, enforcer.StageHealthy, "healthy again by the GPU backend")
		return
	}
	r.healthLine(g.Index, enforcer.StageUnhealthy, d.HealthReason)
}

// healthLine is the progress line of a change of a GPU's health, the enforcer's or the
// backend's alike.
func (r *run) healthLine(index int, stage enforcer.Stage, message string) {
	r.prog.Line("%-8s GPU%d  %s: %s", enforcer.EventGPUHealth, index, stage, message)
}

// lookAtFailure looks at the GPUs' health before a failed attempt is judged. A fault that
// kills every job on a GPU (an XID) ends them within moments of the event, before the node's
// next look (one a second) has noticed it; judged first, they would be the jobs' own failures.
func (r *run) lookAtFailure() {
	ctx, cancel := context.WithTimeout(context.Background(), failureLook)
	defer cancel()
	r.node.LookHealth(ctx)
}

// outOfService says why none of the run's GPUs can take a job again in this process (each one
// an event took out: a critical XID, a double-bit ECC error), or "" while one still may.
func (r *run) outOfService() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lasting) < len(r.gpus) {
		return ""
	}
	var why []string
	for u, g := range r.gpus {
		reason, ok := r.lasting[u]
		if !ok {
			return ""
		}
		why = append(why, fmt.Sprintf("GPU%d: %s", g.Index, reason))
	}
	sort.Strings(why)
	return "no GPU left to run on: every GPU of the run is out of service until it is reset and gpufrac restarts (" + strings.Join(why, "; ") + ")"
}
