package runner

import (
	"fmt"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/sched"
	"github.com/gpufrac/gpufrac/size"
)

// settle updates the job and its template's footprint after an attempt. A failure that is
// the job's memory (a broken cap, a watchdog kill, a fenced out-of-memory, a borrower whose
// wait ran out) climbs the ladder (ladder.go); nothing runs a job past its bound.
func (r *run) settle(j *sched.Job, a *active, at *record.Attempt) {
	t := j.Template
	if a.l.Probe {
		r.s.ProbeEnded(t, j)
	}
	switch at.Outcome {
	case record.OutcomeUnstaged:
		r.s.Unstaged(j)
		return // queued again as it was
	case record.OutcomeProbe:
		j.ProbeStops++
		r.learn(t, at, ledger.ProfileProbe)
		return // the job runs again under its new cap
	case record.OutcomeCollateral:
		if !r.stopAt(j, at) {
			return // a neighbour's stop faulted it: it runs again as it was
		}
		j.Done, j.Final = true, record.OutcomeExhausted
		return
	case record.OutcomeFailed:
		if r.retry(j, at) {
			return
		}
	case record.OutcomeCapViolation:
		// The violation proves the template needs at least what the job reached: its other
		// jobs get more room from now on. What it held, not what it asked for: that figure is
		// the task's own word (its fence file), good for its own next attempt, never for
		// another job's.
		raised := max(at.PeakBytes, at.CapBytes)
		if a.violation != nil {
			raised = max(raised, a.violation.PeakBytes)
		}
		r.s.Raised(t, raised)
		r.recordProfile(t, raised, at, ledger.ProfileViolation)
		if step := r.climb(j, a, at); step.Kind != policy.StepExhausted {
			return
		}
		j.Done, j.Final = true, record.OutcomeExhausted
		return
	case record.OutcomeOK:
		// A probe that grew past the cap its window earned, on borrowed memory, and finished.
		grewPast := a.l.Probe && a.windowPeak > 0 && r.o.Policy.Cap(a.windowPeak) < at.PeakBytes
		held := a.heldAtLevel()
		heldPeak := heldFootprint(held, a.l.Window, at.Duration())
		var fp size.Bytes
		if !heldPeak {
			fp = r.heldBeforeRise(a, at, grewPast)
		}
		if grewPast && heldPeak {
			at.Detail += fmt.Sprintf("; its template takes the %s it reached after its window and held, running, for %s (its window showed %s)",
				at.PeakBytes, held.Round(100*time.Millisecond), a.windowPeak)
			r.learn(t, at, ledger.ProfileProbe)
		} else if fp > 0 {
			// It rose to its end: its template takes what it held before, a guarantee beside
			// which its jobs borrow the rest as this one did (one that then finds none climbs
			// the ladder).
			at.Detail += fmt.Sprintf("; its template takes the %s it held before it rose, borrowing, to %s at its end", fp, at.PeakBytes)
			r.learnBytes(t, fp, at, ledger.ProfileProbe)
		} else if grewPast {
			// It held no level long: the window's footprint stands (recapProbe recorded it).
			at.Detail += fmt.Sprintf("; its template keeps the %s its window showed (it reached %s borrowing)", a.windowPeak, at.PeakBytes)
		} else if a.l.Probe {
			r.learn(t, at, ledger.ProfileProbe)
		} else if a.l.Whole && j.Whole {
			// The re-run alone measured the real footprint; the ledger never lowers a raised one.
			r.s.Raised(t, at.PeakBytes)
			r.recordProfile(t, at.PeakBytes, at, ledger.ProfileViolation)
		}
	}
	j.Done = true
	j.Final = at.Outcome
}

// levelSlack: a use within 1/levelSlack (5%) of the level an attempt rose to is still that
// level: allocators round up, and a training step's buffers come and go.
const levelSlack = 20

// heldFootprint says whether a probe that grew past the cap its window earned, borrowing, and
// finished held what it reached as a footprint rather than leaking into it: it stayed at its
// last level, running (not waiting in the fence), for a probe window or a quarter of its run,
// whichever is less. A window that closes while the fence holds the job's growth back measures
// what its neighbours let it reach: on the H200 (busy queue, cold, 2026-12-06) embed-0.6b's
// showed 8.19 GiB of its 11.61 and lora-1.7b's 31.33 of 45.3, each job then held its peak to its
// end; the benchmark's leaker grows to its end and holds its top for half a second.
func heldFootprint(held, window, run time.Duration) bool {
	return held > 0 && held >= footprintHold(window, run)
}

// footprintHold is how long a level must be held, running, to count as a footprint rather
// than a moment of growth: a probe window, or a quarter of the run where that is less.
func footprintHold(window, run time.Duration) time.Duration {
	return min(window, run/4)
}

// heldBeforeRise is the footprint a borrowing probe that finished keeps for its template when
// it rose at its end and did not hold that peak (settle asks only then: heldFootprint): where
// it grew past the cap its window earned (grewPast), or its window saw the rise and a cap on
// the peak is more than any GPU grants (its template's jobs would run alone). It is the highest
// level the probe held for footprintHold, if a cap on that fits a GPU; 0 where the peak (or,
// with nothing held that long, the window's footprint) stands.
//
// Neither the peak nor the window's figure is a footprint there. Where the window closes during
// the rise it catches the rise mid-way: the simulated H200's leaker left 108 GiB on start-up seed
// 1 and the next, warm run staged it for a 126 GiB guarantee (58.0 s against the cold run's 41.9
// s); the H200's own left 27.9 GiB. Where the window sees the whole rise, the template is a
// whole-GPU one: on the H100 (start-up seed 1, 2026-12-06) the leaker filled its 74 GiB 1.2 s
// before its window would have closed in one run and 0.1 s after it closed in another, and each
// warm run that followed ran it alone for about 25 s (79.8 s and 82.0 s, against 45.0 s and
// 48.6 s cold). Which of these happens is a matter of speed.
func (r *run) heldBeforeRise(a *active, at *record.Attempt, grewPast bool) size.Bytes {
	if !a.l.Probe || !a.l.Borrowing {
		return 0
	}
	whole := r.largestWhole()
	if whole == 0 || !grewPast && r.o.Policy.Cap(at.PeakBytes) <= whole {
		return 0
	}
	fp := a.levelHeldFor(footprintHold(a.l.Window, at.Duration()))
	if fp == 0 || fp >= at.PeakBytes || r.o.Policy.Cap(fp) > whole {
		return 0
	}
	return fp
}

// largestWhole is the largest cap any of the run's GPUs can grant (sched.WholeBytes); 0 if the
// ledger answers for none.
func (r *run) largestWhole() size.Bytes {
	var whole size.Bytes
	for _, g := range r.s.GPUs() {
		if st, err := r.led.State(g); err == nil {
			whole = max(whole, sched.WholeBytes(st))
		}
	}
	return whole
}

// climb applies the ladder after a failed attempt of j and says the step in the attempt's
// record: a larger guarantee, the GPU alone (after the rest of the queue), or a stop. The step
// decides the next attempt's room, so what the run prints before it is what it starts with.
func (r *run) climb(j *sched.Job, a *active, at *record.Attempt) policy.Step {
	reached := at.PeakBytes
	if a.violation != nil {
		reached = max(reached, a.violation.Reached())
	}
	var unit size.Bytes
	if st, err := r.led.State(a.l.GPU); err == nil {
		unit = st.UnitBytes
	}
	whole := r.largestWhole()
	// A baseline's caps are its own (Admission.Share): the ladder raises only the packed rule's.
	f := policy.Failure{Attempt: j.Attempts, MaxAttempts: j.Limit(), CapBytes: at.CapBytes, Whole: a.l.Whole,
		ReachedBytes: reached, Fixed: j.FixedCap, WholeBytes: whole, UnitBytes: unit, NoRaise: r.o.Admission != nil}
	step := r.o.Policy.Next(f)
	at.Next, at.NextKind, at.NextCapBytes = step.String(), step.Kind, 0
	switch step.Kind {
	case policy.StepRaise:
		j.Room, j.Whole = step.CapBytes, false
		at.NextCapBytes = step.CapBytes
		r.s.Grow(j.Template, step.CapBytes)
	case policy.StepAlone:
		j.Whole = true
		at.Next += ", after the rest of the queue"
	default:
		j.Reason = step.Why
	}
	j.Next = step
	return step
}

// stopAt ends a job whose attempts reached its bound for a reason the ladder does not see (a
// collateral failure that would run it again): true when it stopped it.
func (r *run) stopAt(j *sched.Job, at *record.Attempt) bool {
	if j.Attempts < j.Limit() {
		return false
	}
	j.Reason = fmt.Sprintf("%d of %d attempts used", j.Attempts, j.Limit())
	at.Next, at.NextKind = "exhausted: "+j.Reason, policy.StepExhausted
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
