package runner

import (
	"fmt"
	"time"

	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/sched"
)

// stagePlan is how many jobs a GPU the run stages, and the line that says so or why it stages
// none though asked to: a --stage that cannot work must not pass unnoticed.
func stagePlan(o Options, fenced bool, borrowRule string) (int, string) {
	if o.Stage == 0 {
		return 0, ""
	}
	why := ""
	switch {
	case o.Arm != record.ArmPacked:
		why = "the " + string(o.Arm) + " arm"
	case !fenced:
		why = "no allocation fence: nothing would hold a staged job's allocations"
	case o.modeOf() == policy.ModeMPS && borrowRule != node.BorrowWait && borrowRule != node.BorrowNow:
		// Without borrowing a client's pinned limit is its cap, fixed at its start: a staged
		// client could never take the guarantee it is granted later. With borrowing the pinned
		// limit is the budget and the fence holds the caps, as in isolated mode.
		why = "mps mode without borrowing: a client's pinned limit is fixed at its start"
	case borrowRule == node.BorrowLend:
		why = "--borrow lend admits jobs onto borrowed memory already"
	}
	switch {
	case why != "" && o.StageByDefault:
		return 0, ""
	case why != "":
		return 0, "staging: off (" + why + ")"
	}
	return o.Stage, fmt.Sprintf("staging: up to %d job(s) a GPU start before their memory is free, on 1GiB each, "+
		"their first large allocation waiting for their guarantee", o.Stage)
}

// probeCapNote is the run's line on Options.ProbeCap where it holds no probe: only an in-place
// probe that does not borrow runs under a protective cap, and a --probe-cap given where none
// does was taken without a word, as if it had been.
func probeCapNote(o Options, borrows bool) string {
	why := ""
	switch {
	case o.ProbeCap == 0:
	case o.Arm != record.ArmPacked:
		why = "the " + string(o.Arm) + " arm probes nothing"
	case borrows:
		why = "a probe that borrows holds a small guarantee and no protective cap; --borrow off gives probes one"
	case o.modeOf() == policy.ModeMPS:
		why = "in mps mode a probe runs alone, on the whole GPU"
	}
	if why == "" {
		return ""
	}
	return "probes: --probe-cap does nothing here (" + why + ")"
}

// probeKnownNote is the run's line on Options.ProbeKnown, when it was asked for: what it does, or
// why it does nothing here (a probe borrows only where jobs may borrow).
func probeKnownNote(o Options, borrows bool) string {
	switch {
	case !o.ProbeKnown:
		return ""
	case !borrows:
		return "probes: --probe-guarantee known does nothing here (nobody borrows, so no probe starts on a small guarantee)"
	}
	return "probes: a probe that starts where a job borrows is guaranteed the median of the caps known then " +
		"(at most half the budget, where it fits), and borrows past it"
}

// stageRound serves the staged jobs (sched/stage.go) before a round admits new ones: those whose
// guarantees fit now are granted them, and a staged job that alone blocks a borrower's wait is
// stopped.
func (r *run) stageRound() {
	for _, g := range r.s.Grants() {
		if a := r.activeOf(g.Job); a != nil {
			r.granted(a, g)
		}
	}
	for _, j := range r.s.Unstage(r.o.Now()) {
		r.mu.Lock()
		a := r.activeLocked(j)
		if a != nil {
			a.unstaged = true // under r.mu: onEvent reads it
		}
		r.mu.Unlock()
		if a != nil {
			a.halt()
		}
	}
}

// granted moves a staged attempt onto its granted reservation: the cap its record shows from
// now on, and a line that says when.
func (r *run) granted(a *active, g sched.Granted) {
	from := a.l.Res.CapBytes
	r.mu.Lock() // the samplers read a.l under it (on)
	a.l.Res, a.l.Staged = g.Res, false
	a.l.Borrowing = g.Res.LimitBytes > g.Res.CapBytes
	r.mu.Unlock()
	if a.grant != nil {
		close(a.grant)
	}
	now := r.o.Now()
	a.a.CapBytes = g.Res.CapBytes
	a.a.CapChanges = append(a.a.CapChanges, record.CapChange{At: now, From: from, To: g.Res.CapBytes})
	a.a.Detail = fmt.Sprintf("staged on %s for %.1fs, then granted %s", from, now.Sub(a.a.Start).Seconds(), g.Res.CapBytes)
	r.prog.Line("%-8s %-20s GPU%d  guarantee %s granted after %.1fs staged", "granted", g.Job.Name, a.a.GPUIndex,
		g.Res.CapBytes, now.Sub(a.a.Start).Seconds())
}

// activeCount is how many attempts run, and how many of them are staged.
func (r *run) activeCount() (n, staged int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for a := range r.active {
		if a.l.Staged {
			staged++
		}
	}
	return len(r.active), staged
}

// stopStaged stops every staged attempt, queued again as it was (the run gives up after).
func (r *run) stopStaged() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for a := range r.active {
		if a.l.Staged {
			a.unstaged = true
			a.halt()
		}
	}
}

// activeOf is the running attempt of job j, or nil.
func (r *run) activeOf(j *sched.Job) *active {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.activeLocked(j)
}

// activeLocked is activeOf, under r.mu.
func (r *run) activeLocked(j *sched.Job) *active {
	for a := range r.active {
		if a.l.Job == j {
			return a
		}
	}
	return nil
}

// halt stops the attempt, once, whoever asks first (an interrupt, an unstage).
func (a *active) halt() { a.closeStop.Do(func() { close(a.stop) }) }

// unstageGrace is how long a staged job stopped for a borrower has after SIGINT: it has done CPU
// start-up only, and a Python job blocked in its allocation (inside the fence's wait, in C) does
// not run its handler until the call returns, so the full StopGrace would keep the borrower
// waiting 10 s for nothing. Isolated GPUs only: a SIGKILL there faults no neighbour. Under MPS
// the staged job's promise is withdrawn first (sched.unstageOn), which ends its waiting
// allocation inside it, and it has the whole StopGrace to leave by itself.
const unstageGrace = 500 * time.Millisecond

// DefaultStage is how many jobs a GPU gpufrac run stages unless told otherwise: on the H200 six
// covered the next wave of the benchmark's queues (docs/benchmarks.md, 2026-12-05).
const DefaultStage = 6

// maxStage bounds Options.Stage: each staged job holds a process, a CUDA context and CPU.
const maxStage = 16
