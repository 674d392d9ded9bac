package policy

import (
	"fmt"

	"github.com/gpufrac/gpufrac/size"
)

// DefaultMaxAttempts bounds how often one job runs when its attempts fail: the first try, one
// with a larger guarantee, one alone with the GPU. Queue files and job specs may change it.
const DefaultMaxAttempts = 3

// Next step kinds of the ladder.
const (
	// StepRaise: the job runs again with a larger guarantee (Step.CapBytes).
	StepRaise = "raise"
	// StepAlone: the job runs again alone with a whole GPU.
	StepAlone = "alone"
	// StepExhausted: the job stops; Step.Why says why.
	StepExhausted = "exhausted"
)

// Failure is a failed attempt as the ladder sees it: the room it had and what it reached.
// The runner (gpufrac run) and the controller (Nomad) both describe their failures this way,
// so a job climbs the same ladder in either front end.
type Failure struct {
	// Attempt is the number of the attempt that failed (1 for the first); MaxAttempts the
	// job's bound (0: DefaultMaxAttempts).
	Attempt, MaxAttempts int
	// CapBytes is the guarantee the attempt had; Whole says it had a GPU to itself.
	CapBytes size.Bytes
	Whole    bool
	// ReachedBytes is the most memory the attempt was seen to hold or ask for (its peak, or
	// the violation's figure when larger).
	ReachedBytes size.Bytes
	// Fixed: the job's cap is a ceiling (cap_fixed); it is never given more room.
	Fixed bool
	// WholeBytes is the largest guarantee a GPU can give (its budget in whole units);
	// UnitBytes the unit guarantees are counted in (0: none, bytes as they are).
	WholeBytes, UnitBytes size.Bytes
	// NoRaise: the front end cannot give a larger guarantee than the one it had (the static
	// arm's fixed slots): the next step is the GPU alone.
	NoRaise bool
}

// Step is what the ladder decides after a failure.
type Step struct {
	Kind string
	// CapBytes is the next guarantee (StepRaise), in whole units; for StepAlone the GPU's.
	CapBytes size.Bytes
	// Attempt is the number of the attempt the step starts (0 for StepExhausted).
	Attempt, MaxAttempts int
	// Why says what led here, for people.
	Why string
}

// String says the step for people, as every front end prints it: its Head and why.
func (s Step) String() string {
	if s.Kind == StepExhausted {
		return s.Head() + ": " + s.Why
	}
	return s.Head() + " (" + s.Why + ")"
}

// Head is the room the step gives, in the words the next attempt's start repeats: "attempt 2
// of 3 with a 13GiB guarantee", "attempt 3 of 3 alone with the GPU", "exhausted".
func (s Step) Head() string {
	return Rung(s.Kind, s.Attempt, s.MaxAttempts, s.CapBytes)
}

// Rung names an attempt's room as Step.Head does; a front end starting an attempt says it with
// the guarantee it really got.
func Rung(kind string, attempt, maxAttempts int, capBytes size.Bytes) string {
	switch kind {
	case StepRaise:
		return fmt.Sprintf("attempt %d of %d with %s guarantee", attempt, maxAttempts, capBytes.A())
	case StepAlone:
		return fmt.Sprintf("attempt %d of %d alone with the GPU", attempt, maxAttempts)
	}
	return "exhausted"
}

// Next is the one rule after a failed attempt: strictly up, never the same room twice, and
// never past the bound. A larger guarantee (the cap formula over what it reached, at least one
// unit more than it had), then the GPU alone (when the larger guarantee would not fit beside
// others, or the next attempt is the last the bound allows), then a stop that says why.
func (p Policy) Next(f Failure) Step {
	maxA := f.MaxAttempts
	if maxA <= 0 {
		maxA = DefaultMaxAttempts
	}
	stop := func(why string) Step { return Step{Kind: StepExhausted, MaxAttempts: maxA, Why: why} }
	switch {
	case f.Whole:
		return stop(fmt.Sprintf("it failed alone with the whole GPU (%s), the most room there is", f.CapBytes))
	case f.Attempt >= maxA:
		return stop(fmt.Sprintf("%d of %d attempts used", f.Attempt, maxA))
	case f.Fixed:
		return stop(fmt.Sprintf("its %s cap is fixed (cap_fixed): it gets no more room", f.CapBytes))
	case f.WholeBytes > 0 && f.ReachedBytes > f.WholeBytes:
		return stop(fmt.Sprintf("it reached %s, more than a whole GPU's %s", f.ReachedBytes, f.WholeBytes))
	}
	next := Step{Attempt: f.Attempt + 1, MaxAttempts: maxA}
	want := p.Cap(f.ReachedBytes)
	if f.UnitBytes > 0 {
		want = roundUp(want, f.UnitBytes)
		want = max(want, roundUp(f.CapBytes, f.UnitBytes)+f.UnitBytes)
	} else {
		want = max(want, f.CapBytes+1)
	}
	switch {
	case f.NoRaise:
		next.Why = fmt.Sprintf("it reached %s in its %s slot", f.ReachedBytes, f.CapBytes)
	case f.WholeBytes > 0 && want >= f.WholeBytes:
		next.Why = fmt.Sprintf("it reached %s with %s guarantee; %s does not fit beside others", f.ReachedBytes, f.CapBytes.A(), want)
	case next.Attempt >= maxA:
		// The last attempt the bound allows gets the most room there is.
		next.Why = fmt.Sprintf("it reached %s with %s guarantee; its last attempt gets the most room", f.ReachedBytes, f.CapBytes.A())
	}
	if next.Why != "" {
		next.Kind, next.CapBytes = StepAlone, f.WholeBytes
		return next
	}
	next.Kind, next.CapBytes = StepRaise, want
	next.Why = fmt.Sprintf("it reached %s with %s guarantee; cap = %s", f.ReachedBytes, f.CapBytes.A(), p.CapFormula(f.ReachedBytes.String()))
	return next
}

func roundUp(b, unit size.Bytes) size.Bytes { return (b + unit - 1) / unit * unit }
