package runner

import (
	"fmt"
	"strings"
	"time"
)

// waitingFor says, when nothing runs and nothing can be admitted, what the run waits for (the
// budget other processes hold on each GPU) and until when it waits before the jobs left fail.
func (r *run) waitingFor(until time.Time) string {
	var parts []string
	for _, g := range r.s.gpus {
		st, err := r.led.State(g)
		if err != nil {
			continue
		}
		var who []string
		for _, res := range st.Reservations {
			w := res.Task.String()
			if res.Holder != nil {
				w += " of gpufrac run " + res.Holder.String()
			}
			who = append(who, w)
		}
		switch {
		case r.s.refused[g] != nil:
			parts = append(parts, fmt.Sprintf("GPU%d: %s free of %s, but the allocation fence left the guarantee out (%v)",
				st.Index, st.BudgetBytes-min(st.BudgetBytes, st.ReservedBytes), st.BudgetBytes, r.s.refused[g]))
		case !st.Healthy:
			parts = append(parts, fmt.Sprintf("GPU%d is unhealthy (%s)", st.Index, st.HealthReason))
		case len(who) > 0:
			parts = append(parts, fmt.Sprintf("GPU%d: %s of its %s budget held by %d reservation(s) of other processes (%s)",
				st.Index, st.ReservedBytes, st.BudgetBytes, len(who), strings.Join(who, ", ")))
		default:
			parts = append(parts, fmt.Sprintf("GPU%d: %s free of %s", st.Index, st.BudgetBytes-min(st.BudgetBytes, st.ReservedBytes), st.BudgetBytes))
		}
	}
	if r.s.ledgerErr != nil {
		parts = append([]string{fmt.Sprintf("the ledger cannot record a reservation (%v)", r.s.ledgerErr)}, parts...)
	}
	return fmt.Sprintf("nothing can be admitted: %s; waiting for them to end until %s (then the jobs left fail; see `gpufrac status`)",
		strings.Join(parts, "; "), until.Format("15:04:05"))
}
