package record

import (
	"fmt"
	"slices"
)

// Outcome is how an attempt ended.
type Outcome string

// Outcomes of an attempt.
const (
	OutcomeOK           Outcome = "ok"
	OutcomeCapViolation Outcome = "cap-violation"
	OutcomeFailed       Outcome = "failed"
	// OutcomeProbe is a probe window that ended: the job runs again under its cap.
	OutcomeProbe    Outcome = "probe"
	OutcomeCanceled Outcome = "canceled"
	// OutcomeUnstaged is a staged start stopped before its guarantee was granted: a borrower's
	// wait was blocked by staged jobs alone (sched.Unstage). The job is queued again as it was;
	// the attempt does not count, and it lost CPU start-up, no GPU work.
	OutcomeUnstaged Outcome = "unstaged"
	// OutcomeCollateral is a failure that a GPU-wide event explains: the job failed on a GPU
	// the enforcer had marked unhealthy while it ran (under MPS, stopping one client can fault
	// the others). The job runs again; its neighbour's stop, not the job, was at fault.
	OutcomeCollateral Outcome = "collateral"
	// OutcomeExhausted is a job's end, never an attempt's: its attempts failed and the ladder
	// (policy.Policy.Next) gives it no more room, for the reason JobResult.Reason gives.
	OutcomeExhausted Outcome = "exhausted"
)

// Outcomes lists every outcome.
var Outcomes = []Outcome{OutcomeOK, OutcomeCapViolation, OutcomeFailed, OutcomeProbe, OutcomeCanceled, OutcomeCollateral, OutcomeExhausted, OutcomeUnstaged}

// Check says whether o is one of Outcomes.
func (o Outcome) Check() error { return check("outcome", o, Outcomes) }

// Failed says whether the attempt's time was lost work: it failed, broke its cap, or was
// harmed by a GPU-wide event.
func (o Outcome) Failed() bool {
	return o == OutcomeFailed || o == OutcomeCapViolation || o == OutcomeCollateral
}

// Arm is a set of admission rules: the day-to-day packed rule, or one of the benchmark's
// baselines it is measured against (docs/run.md).
type Arm string

// Arms: the admission rules.
const (
	// ArmExclusive runs one job at a time per GPU with the whole GPU and no cap.
	ArmExclusive Arm = "exclusive"
	// ArmPacked admits jobs while their measured caps fit, enforced in the policy's mode.
	ArmPacked Arm = "packed"
	// ArmStatic splits each GPU into 2 equal slots: every job's cap is half the budget.
	ArmStatic Arm = "static"
	// ArmUncapped runs up to max_tasks_per_gpu jobs at once with no caps and no watchdog.
	ArmUncapped Arm = "uncapped"
	// ArmUncappedRetry is ArmUncapped where a job whose attempt failed is started again a few
	// times: what a team without caps but with a retry loop runs instead.
	ArmUncappedRetry Arm = "uncapped-retry"
)

// Arms lists every arm.
var Arms = []Arm{ArmExclusive, ArmPacked, ArmStatic, ArmUncapped, ArmUncappedRetry}

// Check says whether a is one of Arms.
func (a Arm) Check() error { return check("arm", a, Arms) }

// Enforced says whether the arm caps jobs and runs the watchdog.
func (a Arm) Enforced() bool { return a == ArmPacked || a == ArmStatic }

// Profiles says whether a run reuses the footprints stored by earlier runs.
type Profiles string

// Footprint profile choices.
const (
	// ProfilesCold ignores stored profiles: the first job of each template is its probe.
	ProfilesCold Profiles = "cold"
	// ProfilesWarm reuses each template's stored profile and probes only templates without one.
	ProfilesWarm Profiles = "warm"
)

// ProfileChoices lists every Profiles value.
var ProfileChoices = []Profiles{ProfilesCold, ProfilesWarm}

// Check says whether p is one of ProfileChoices.
func (p Profiles) Check() error { return check("profiles", p, ProfileChoices) }

func check[T ~string](what string, v T, allowed []T) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	return fmt.Errorf("%s %q: want one of %q", what, string(v), allowed)
}
