// Package arms holds the benchmark's baseline admission rules, which packing is measured
// against: one job per GPU (exclusive), two fixed slots of half a GPU (static), co-location
// without caps (uncapped) and the same with a retry loop (uncapped-retry). The runner has one
// rule of its own, packed; these replace it through sched.Admission (runner.Options.Admission).
package arms

import (
	"fmt"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/runner"
	"github.com/gpufrac/gpufrac/sched"
	"github.com/gpufrac/gpufrac/size"
)

// StaticSlots is how many equal memory slots the static arm splits a GPU into.
const StaticSlots = 2

// Retries is how often the uncapped-retry arm starts a failed job again (a job runs at most
// 1+Retries attempts), as a retry loop around each job would.
const Retries = 3

// Of returns the rules of a baseline arm, or an error naming an arm that has none here (packed
// is the runner's own rule).
func Of(a record.Arm) (sched.Admission, error) {
	switch a {
	case record.ArmExclusive:
		return exclusive{}, nil
	case record.ArmStatic:
		return static{}, nil
	case record.ArmUncapped:
		return uncapped{arm: a}, nil
	case record.ArmUncappedRetry:
		return uncapped{arm: a, retries: Retries}, nil
	}
	if err := a.Check(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("arm %q is the runner's own rule, not a baseline", a)
}

// Options is o with the rules of its arm, when that is a baseline: what a caller that takes an
// arm by name (a flag, a queue file's arm) does before runner.Run. arm is the arm asked for
// ("" = packed).
func Options(o runner.Options, arm record.Arm) (runner.Options, error) {
	o.Arm = arm
	if arm == "" || arm == record.ArmPacked {
		return o, nil
	}
	adm, err := Of(arm)
	if err != nil {
		return o, err
	}
	o.Admission = adm
	return o, nil
}

// exclusive runs one job at a time per GPU with the whole GPU and no cap.
type exclusive struct{}

func (exclusive) Arm() record.Arm                          { return record.ArmExclusive }
func (exclusive) PerGPU(int) int                           { return 1 }
func (exclusive) Alone(bool) bool                          { return true }
func (exclusive) Share(ledger.GPUState) (size.Bytes, bool) { return 0, false }
func (exclusive) Retries() int                             { return 0 }

// static splits each GPU into StaticSlots equal slots: every job's cap is a slot, and a job that
// breaks it runs again alone with the whole GPU.
type static struct{}

func (static) Arm() record.Arm          { return record.ArmStatic }
func (static) PerGPU(policyMax int) int { return min(StaticSlots, policyMax) }
func (static) Alone(rerun bool) bool    { return rerun }
func (static) Retries() int             { return 0 }
func (static) Share(st ledger.GPUState) (size.Bytes, bool) {
	return size.Bytes(st.Units/StaticSlots) * st.UnitBytes, true
}

// uncapped runs up to max_tasks_per_gpu jobs at once with no caps and no watchdog; with
// retries, a job whose attempt failed is started again at once, up to that many times.
type uncapped struct {
	arm     record.Arm
	retries int
}

func (u uncapped) Arm() record.Arm                        { return u.arm }
func (uncapped) PerGPU(policyMax int) int                 { return policyMax }
func (uncapped) Alone(bool) bool                          { return false }
func (uncapped) Share(ledger.GPUState) (size.Bytes, bool) { return 0, false }
func (u uncapped) Retries() int                           { return u.retries }
