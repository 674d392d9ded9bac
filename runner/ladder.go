package runner

import (
	"fmt"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// settle updates the job and its template's footprint after an attempt. A failure that is
// the job's memory (a broken cap, a watchdog kill, a fenced out-of-memory, a borrower whose
// wait ran out) climbs the ladder (ladder.go); nothing runs a job past its bound.
func (r *run) settle(j *jobState, a *active, at *record.Attempt) {
	t := j.Template
	if a.l.probe {
		r.s.probeEnded(t, j)
	}
	switch at.Outcome {
	case record.OutcomeProbe:
		j.probeStops++
		r.learn(t, at, ledger.ProfileProbe)
		return // the job runs again under its new cap
	case record.OutcomeCollateral:
		if !r.stopAt(j, at) {
			return // a neighbour's stop faulted it: it runs again as it was
		}
		j.done, j.final = true, record.OutcomeExhausted
		return
	case record.OutcomeFailed:
		if r.retry(j, at) {
			return
		}
	case record.OutcomeCapViolation:
		// The violation proves the template needs at least what the job reached: its other
		// jobs get more room from now on.
		raised := max(at.PeakBytes, at.CapBytes)
		if a.violation != nil {
			raised = max(raised, a.violation.PeakBytes)
		}
		r.s.raised(t, raised)
		r.recordProfile(t, raised, at, ledger.ProfileViolation)
		if step := r.climb(j, a, at); step.Kind != policy.StepExhausted {
			return
		}
		j.done, j.final = true, record.OutcomeExhausted
		return
	case record.OutcomeOK:
		if a.l.probe {
			r.learn(t, at, ledger.ProfileProbe)
		} else if a.l.whole && j.whole {
			// The re-run alone measured the real footprint; the ledger never lowers a raised one.
			r.s.raised(t, at.PeakBytes)
			r.recordProfile(t, at.PeakBytes, at, ledger.ProfileViolation)
		}
	}
	j.done = true
	j.final = at.Outcome
}

// bound sets the job's ladder from its queue: its own max_attempts and cap_fixed, else its
// template's, else the queue's bound, else policy.DefaultMaxAttempts.
func (j *jobState) bound(q queue.Queue) {
	spec := q.Templates[j.Template]
	j.maxAttempts = policy.DefaultMaxAttempts
	for _, n := range []int{q.MaxAttempts, spec.MaxAttempts, j.MaxAttempts} {
		if n > 0 {
			j.maxAttempts = n
		}
	}
	j.capFixed = j.CapFixed || spec.CapFixed
}

// limit is the job's bound in attempt numbers: a probe window the runner ended is not a
// failure, so it does not use one up.
func (j *jobState) limit() int { return j.maxAttempts + j.probeStops }

// climb applies the ladder after a failed attempt of j and says the step in the attempt's
// record: a larger guarantee, the GPU alone (after the rest of the queue), or a stop. The step
// decides the next attempt's room, so what the run prints before it is what it starts with.
func (r *run) climb(j *jobState, a *active, at *record.Attempt) policy.Step {
	reached := at.PeakBytes
	if a.violation != nil {
		reached = max(reached, a.violation.PeakBytes)
	}
	var whole, unit size.Bytes
	if st, err := r.led.State(a.l.gpu); err == nil {
		whole, unit = wholeBytes(st), st.UnitBytes
	}
	for _, g := range r.s.gpus {
		if st, err := r.led.State(g); err == nil {
			whole = max(whole, wholeBytes(st))
		}
	}
	// A baseline's caps are its own (Admission.Share): the ladder raises only the packed rule's.
	f := policy.Failure{Attempt: j.attempts, MaxAttempts: j.limit(), CapBytes: at.CapBytes, Whole: a.l.whole,
		ReachedBytes: reached, Fixed: j.capFixed, WholeBytes: whole, UnitBytes: unit, NoRaise: r.s.adm != nil}
	step := r.o.Policy.Next(f)
	at.Next, at.NextKind, at.NextCapBytes = step.String(), step.Kind, 0
	switch step.Kind {
	case policy.StepRaise:
		j.room, j.whole = step.CapBytes, false
		at.NextCapBytes = step.CapBytes
		r.s.grow(j.Template, step.CapBytes)
	case policy.StepAlone:
		j.whole = true
		at.Next += ", after the rest of the queue"
	default:
		j.reason = step.Why
	}
	j.next = step
	return step
}

// stopAt ends a job whose attempts reached its bound for a reason the ladder does not see (a
// collateral failure that would run it again): true when it stopped it.
func (r *run) stopAt(j *jobState, at *record.Attempt) bool {
	if j.attempts < j.limit() {
		return false
	}
	j.reason = fmt.Sprintf("%d of %d attempts used", j.attempts, j.limit())
	at.Next, at.NextKind = "exhausted: "+j.reason, policy.StepExhausted
	return true
}

// borrowedAt fills an attempt's limit and what it borrowed at its peak, from its reservation.
func borrowedAt(at *record.Attempt, res ledger.Reservation, borrowing bool) {
	if !borrowing || !at.Capped || at.WholeGPU {
		return
	}
	at.LimitBytes = res.Limit()
	if at.PeakBytes > at.CapBytes {
		at.BorrowedBytes = at.PeakBytes - at.CapBytes
	}
}

// grow records that a job of template t needed a guarantee of c: the template's jobs that start
// from now on start there too (a declared cap is where a job starts, not a ceiling), except
// those whose cap is fixed.
func (s *sched) grow(t string, c size.Bytes) { s.grown[t] = max(s.grown[t], c) }

// capFor is the cap job j starts with: its template's, grown by the ladder unless j's is fixed.
func (s *sched) capFor(j *jobState) (size.Bytes, bool) {
	c, ok := s.capOf(j.Template)
	if g := s.grown[j.Template]; g > c && !j.capFixed {
		return g, true
	}
	return c, ok
}
