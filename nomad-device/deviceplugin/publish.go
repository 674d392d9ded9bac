package deviceplugin

import (
	"os"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
	"github.com/gpufrac/gpufrac/policy/violations"
)

// republishWindow is how far back the ledger's violations are published again at start: a
// violation the plugin could not publish before it restarted still reaches the controller, and
// create-only writes make the ones already published no-ops.
const republishWindow = 24 * time.Hour

// startPublisher publishes every contained violation under gpufrac/violations/, retrying while
// the Nomad API is unreachable. It never publishes the reservation token.
func (rt *runtime) startPublisher(enf *enforcer.Enforcer, l *ledger.Ledger) {
	vt := rt.cfg.Violations
	if vt == nil {
		return
	}
	log := rt.log.Named("violations")
	conn, err := nomadvars.NewAPIClient(vt.connection())
	if err != nil {
		log.Error("violations cannot be published: the controller will not see them", "error", err)
		return
	}
	node, _ := os.Hostname()
	queue := make(chan violations.Record, 256)
	// Following before the backlog is read: a violation in between is queued twice at worst,
	// and a create-only write makes the second a no-op.
	rt.followViolations(enf, func(v ledger.Violation) {
		select {
		case queue <- record(v, l, node):
		default:
			log.Error("violation not published: too many waiting", "task", v.Task.String())
		}
	})
	for _, v := range l.Violations() {
		if time.Since(v.CrossedAt) < republishWindow {
			select {
			case queue <- record(v, l, node):
			default:
			}
		}
	}
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		vars := conn.Variables()
		for {
			var r violations.Record
			select {
			case <-rt.ctx.Done():
				return
			case r = <-queue:
			}
			for backoff := time.Second; ; backoff = min(2*backoff, 30*time.Second) {
				path, err := violations.Publish(vars, conn.Namespace, r)
				if err == nil {
					log.Info("violation published", "path", path, "alloc_id", r.AllocID, "task", r.Task, "namespace", conn.Namespace)
					break
				}
				log.Warn("publishing a violation failed; retrying", "path", path, "error", err, "retry", backoff)
				select {
				case <-rt.ctx.Done():
					return
				case <-time.After(backoff):
				}
			}
		}
	}()
}

// record is what a violation publishes: no token, and the GPU's whole budget in units for the
// controller's re-run on a whole GPU.
func record(v ledger.Violation, l *ledger.Ledger, node string) violations.Record {
	r := violations.Record{AllocID: v.Task.AllocID, Namespace: v.Task.Namespace, Job: v.Task.JobName, Task: v.Task.TaskName, Template: v.Task.Template,
		GPU: v.GPU, Node: node, CapBytes: v.CapBytes, PeakBytes: v.PeakBytes, AskedBytes: v.AskedBytes, Action: v.Action, Mode: string(v.Mode),
		CrossedAt: v.CrossedAt, ContainedAt: v.ContainedAt}
	if st, err := l.State(v.GPU); err == nil {
		r.GPUUnits, r.UnitBytes = st.Units, st.UnitBytes
	}
	return r
}
