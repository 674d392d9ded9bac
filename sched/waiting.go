package sched

import (
	"fmt"
	"github.com/gpufrac/gpufrac/size"
	"strings"
	"time"
)

// Waiting says, when nothing runs and nothing can be admitted, what the run waits for (the
// budget other processes hold on each GPU, or its own reservations that were not released) and
// until when it waits before the jobs left fail.
func (s *Sched) Waiting(until time.Time) string {
	var parts []string
	self := s.led.Holder()
	for _, g := range s.gpus {
		st, err := s.led.State(g)
		if err != nil {
			continue
		}
		var who, mine []string
		for _, res := range st.Reservations {
			w := res.Task.String()
			switch {
			case res.HeldBy(self):
				// Nothing of this run is running: a release the ledger could not record
				// (a full disk) left it, and blaming other processes would send the
				// operator looking for one that is not there.
				mine = append(mine, w)
			case res.Holder != nil:
				who = append(who, w+" of gpufrac run "+res.Holder.String())
			default:
				who = append(who, w)
			}
		}
		unreleased := ""
		if len(mine) > 0 {
			unreleased = fmt.Sprintf("%d reservation(s) of this run's ended jobs that were not released (%s)", len(mine), strings.Join(mine, ", "))
		}
		switch {
		case s.refused[g] != nil:
			parts = append(parts, fmt.Sprintf("GPU%d: %s free of %s, but the allocation fence left the guarantee out (%v)",
				st.Index, st.BudgetBytes-min(st.BudgetBytes, st.ReservedBytes), st.BudgetBytes, s.refused[g]))
		case !st.Healthy:
			parts = append(parts, fmt.Sprintf("GPU%d is unhealthy (%s)", st.Index, st.HealthReason))
		case len(who) > 0:
			p := fmt.Sprintf("GPU%d: %s of its %s budget held by %d reservation(s) of other processes (%s)",
				st.Index, st.ReservedBytes, st.BudgetBytes, len(who), strings.Join(who, ", "))
			if unreleased != "" {
				p += " and " + unreleased
			}
			parts = append(parts, p)
		case unreleased != "":
			parts = append(parts, fmt.Sprintf("GPU%d: %s of its %s budget held by %s", st.Index, st.ReservedBytes, st.BudgetBytes, unreleased))
		default:
			parts = append(parts, fmt.Sprintf("GPU%d: %s free of %s", st.Index, st.BudgetBytes-min(st.BudgetBytes, st.ReservedBytes), st.BudgetBytes))
		}
	}
	if s.ledgerErr != nil {
		parts = append([]string{fmt.Sprintf("the ledger cannot record a reservation (%v)", s.ledgerErr)}, parts...)
	}
	return fmt.Sprintf("nothing can be admitted: %s; waiting for them to end until %s (then the jobs left fail; see `gpufrac status`)",
		strings.Join(parts, "; "), until.Format("15:04:05"))
}

// WaitReason says what a waiting job waits for, in the scheduler's terms.
func (s *Sched) WaitReason(j *Job, maxBudget size.Bytes) string {
	kind, c := s.need(j, maxBudget)
	switch kind {
	case needWait:
		return fmt.Sprintf("the probe of its template %q to finish", j.Template)
	case needCapped:
		if why := s.slotWait(); why != "" {
			return why
		}
		if c == 0 {
			return "half a GPU's budget to fit beside the jobs running"
		}
		if j.Room > 0 {
			return fmt.Sprintf("room for %s beside the jobs running", j.Next.Head()) + s.smWaitNote(j.Template)
		}
		// The ledger grants whole units: say the guarantee the job will be started with.
		if s.pol.UnitBytes > 0 {
			c = s.pol.Granted(c)
		}
		return fmt.Sprintf("room for its %s guarantee beside the jobs running", c) + s.smWaitNote(j.Template)
	case needWhole:
		if j.Whole {
			return "a GPU to itself (" + j.Next.Head() + ", after a broken cap: once the rest of the queue is admitted)"
		}
		return "a GPU to itself"
	case needProbe:
		return fmt.Sprintf("a GPU to probe its template %q", j.Template)
	default:
		return "a free slot"
	}
}

// slotWait is what every job beside others waits for when the count of jobs at once, not
// memory, holds them: the run's bound, or every GPU at max_tasks_per_gpu. "" when a GPU has a
// slot. Said as room, it sent an operator looking for memory that was free.
func (s *Sched) slotWait() string {
	jobs := func(n int) string {
		if n == 1 {
			return "1 job"
		}
		return fmt.Sprintf("%d jobs", n)
	}
	if s.maxTotal > 0 && s.total >= s.maxTotal {
		return fmt.Sprintf("a free slot (at most %s at once in this run)", jobs(s.maxTotal))
	}
	for _, g := range s.gpus {
		if s.running[g] < s.perGPU {
			return ""
		}
	}
	return fmt.Sprintf("a free slot (at most %s at once on a GPU: max_tasks_per_gpu)", jobs(s.perGPU))
}

// Stuck is why the jobs left fail when nothing was admitted for after with nothing running:
// the fence's refusal still standing on some GPU (the first in order), else the budget that
// other processes may hold.
func (s *Sched) Stuck(after time.Duration) string {
	for _, g := range s.gpus {
		if err := s.refused[g]; err != nil {
			return fmt.Sprintf("not admitted for %s with no job running: the allocation fence left its guarantee out (%v)", after, err)
		}
	}
	return fmt.Sprintf("not admitted for %s with no job running (another process may hold the GPU budget: see `gpufrac status`)", after)
}

// smWaitNote adds the compute budget to what a job waits for, while there is one: memory alone
// does not say why a job that would fit waits.
func (s *Sched) smWaitNote(t string) string {
	b := s.smBudget()
	if b == 0 {
		return ""
	}
	d, known := s.SMDemand(t)
	how := "measured"
	if !known {
		how = "the median of those measured"
	}
	return fmt.Sprintf(", and for its %.0f%% SM demand (%s) within the %.0f%% compute budget", d, how, b)
}
