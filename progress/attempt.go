package progress

import (
	"fmt"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// Start is what the line of an attempt's start says of it.
type Start struct {
	Job, Template string
	GPUIndex      int
	// Cap is the reservation's guarantee, Limit the most it may hold when it borrows.
	Cap, Limit size.Bytes
	Capped     bool // the cap is enforced
	Whole      bool // the job has the GPU to itself
	Borrowing  bool // it may use memory past its cap that no other job's guarantee covers
	Probe      bool // it measures its template's footprint
	InPlace    bool // a probe beside other jobs, under a protective cap
	Window     time.Duration
	// ReRun is the ladder's rung that sent it ("alone ...", "raised ..."), for a re-run.
	ReRun string
	// Staged is the guarantee a staged start waits for (sched/stage.go); 0: not staged.
	Staged size.Bytes
}

// Started prints the line of an attempt's start.
func (p *Printer) Started(s Start) {
	what := "guarantee " + s.Cap.String()
	if !s.Borrowing {
		what = "cap " + s.Cap.String()
	}
	span := "its whole run"
	if s.Window > 0 {
		span = "its first " + s.Window.String()
	}
	switch {
	case s.Probe && s.Staged > 0:
		what = fmt.Sprintf("PROBE STAGED on %s: starts up now; once its %s guarantee is granted it borrows the rest, "+
			"and %s from then measures %q", s.Cap, s.Staged, span, s.Template)
	case s.Probe && s.InPlace:
		what = fmt.Sprintf("PROBE in place (protective cap %s) for %s to measure %q", s.Cap, span, s.Template)
		if s.Borrowing {
			what = fmt.Sprintf("PROBE in place (%s guarantee, borrowing the rest) for %s to measure %q", s.Cap.A(), span, s.Template)
		}
	case s.Probe && s.Window > 0:
		what = fmt.Sprintf("PROBE alone for %s to measure %q", s.Window, s.Template)
	case s.Probe:
		what = fmt.Sprintf("PROBE alone: its whole run measures %q", s.Template)
	case s.Staged > 0:
		what = fmt.Sprintf("STAGED on %s: starts up now, its first allocation past that waits for its %s guarantee", s.Cap, s.Staged)
	case s.ReRun != "":
		what = "RE-RUN " + s.ReRun
	case s.Whole:
		what = "whole GPU"
	case !s.Capped:
		what = "no cap"
	}
	if s.Borrowing && !s.Probe {
		what += fmt.Sprintf(", may borrow up to %s", s.Limit)
	}
	p.Line("%-8s %-20s GPU%d  %s", "start", s.Job, s.GPUIndex, what)
}

// Finished prints the line of an attempt's end: window is a probe's window, capLabel the cap
// its template has now (UnitsLabel).
func (p *Printer) Finished(at record.Attempt, window time.Duration, capLabel string) {
	tag := at.Outcome
	msg := fmt.Sprintf("peak %s in %.1fs", at.PeakBytes, at.Duration().Seconds())
	switch at.Outcome {
	case record.OutcomeProbe:
		tag = "probed"
		msg = fmt.Sprintf("peak %s in its first %s -> cap %s", at.PeakBytes, window, capLabel)
	case record.OutcomeOK:
		if at.Probe {
			msg += fmt.Sprintf(" -> %q measured: cap %s", at.Template, capLabel)
		}
	case record.OutcomeCapViolation:
		tag = "CAP"
		msg = brokeCap(at)
	case record.OutcomeCollateral:
		tag = "COLLAT"
		msg = fmt.Sprintf("exit %d after %.1fs: %s (log %s)", at.ExitCode, at.Duration().Seconds(), at.Detail, at.Log)
		if at.Next != "" {
			msg += "; next: " + at.Next
		}
	case record.OutcomeUnstaged:
		tag = "unstaged"
		msg = fmt.Sprintf("after %.1fs: %s", at.Duration().Seconds(), at.Detail)
	case record.OutcomeFailed:
		tag = "FAILED"
		msg = fmt.Sprintf("exit %d after %.1fs: %s (log %s)", at.ExitCode, at.Duration().Seconds(), at.Detail, at.Log)
	}
	p.Line("%-8s %-20s GPU%d  %s", tag, at.Job, at.GPUIndex, msg)
}

// brokeCap says how an attempt broke its cap and what comes next.
func brokeCap(at record.Attempt) string {
	msg := fmt.Sprintf("broke its %s cap (peak %s)", at.CapBytes, at.PeakBytes)
	if v := at.Violation; v != nil {
		// The attempt's peak (the highest of the runner's and the watchdog's samples) is the
		// one figure the detail, attempts.csv and the report give too.
		msg = fmt.Sprintf("broke its %s cap at %s: %s", v.CapBytes, at.PeakBytes, v.Action)
		switch {
		case v.Action == enforcer.ActionOOMInProcess && at.LimitBytes > at.CapBytes && v.AskedBytes > at.LimitBytes:
			// Alone, or with room to spare, a borrower meets its own limit, not a neighbour.
			msg = fmt.Sprintf("out of memory inside the job at peak %s: it asked for %s, past its %s limit", at.PeakBytes, v.AskedBytes, at.LimitBytes)
		case v.Action == enforcer.ActionOOMInProcess && at.LimitBytes > at.CapBytes:
			// A borrower is refused where more would reach into a neighbour's guarantee,
			// not at its own.
			msg = fmt.Sprintf("out of memory inside the job at peak %s: past its %s guarantee only other jobs' guarantees were left", at.PeakBytes, v.CapBytes)
			if at.BorrowWait > 0 {
				msg += fmt.Sprintf(" (it waited %.1fs in all for memory to come free)", at.BorrowWait.Seconds())
			}
		case v.Action == enforcer.ActionOOMInProcess:
			msg = fmt.Sprintf("hit its %s cap (%s): out of memory inside the job, peak %s", v.CapBytes, v.HeldBy, at.PeakBytes)
		case at.LimitBytes > at.CapBytes && v.Reclaimed:
			msg = fmt.Sprintf("held %s, past its %s guarantee, and a neighbour's guarantee needed back what it borrowed: %s", at.PeakBytes, v.CapBytes, v.Action)
		case at.LimitBytes > at.CapBytes:
			// A borrower the watchdog stopped held more than its guarantee and its loans:
			// memory the fence never charged (a process without its token, a pool's slack).
			msg = fmt.Sprintf("held %s, past its %s guarantee and what the fence lent it (memory the fence never saw): %s", at.PeakBytes, v.CapBytes, v.Action)
		}
		if !v.ContainedAt.IsZero() && !v.CrossedAt.IsZero() {
			msg += fmt.Sprintf(", contained in %.2fs", v.ContainedAt.Sub(v.CrossedAt).Seconds())
		}
	} else {
		msg += ": " + at.Detail
	}
	if !at.WholeGPU {
		msg += "; " + neighbours(at)
	}
	return msg + "; next: " + at.Next
}

// neighbours says what a cap violation meant for the other jobs of its GPU. An allocation the
// fence refused never reached them. Under MPS a stop by signal is a GPU-wide event (their
// failures count as collateral and re-run). A job the watchdog stopped outside MPS held memory
// the fence never saw until the stop, so a neighbour may have been refused memory meanwhile:
// saying "untouched" there would be a claim nobody checked.
func neighbours(at record.Attempt) string {
	v := at.Violation
	switch {
	case v == nil || v.Action == enforcer.ActionOOMInProcess:
		return "neighbours untouched"
	case v.Mode == policy.ModeMPS:
		return "stopped under MPS: a GPU-wide event, a neighbour that fails now is re-run"
	default:
		return "a neighbour that ran out of memory before the stop is re-run as it was"
	}
}

// UnitsLabel says a cap as the ledger grants it, in whole units, and the formula's figure it
// was rounded up from: "3GiB (2.55GiB rounded up to 3 units of 1GiB)". A small footprint's cap
// is mostly the margin and the rounding, and this says so where the cap shows.
func UnitsLabel(pol policy.Policy, c size.Bytes) string {
	u, granted := pol.Units(c), pol.Granted(c)
	if granted == c {
		return fmt.Sprintf("%s (%d units of %s)", c, u, pol.UnitBytes)
	}
	return fmt.Sprintf("%s (%s rounded up to %d units of %s)", granted, c, u, pol.UnitBytes)
}
