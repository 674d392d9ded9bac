package runner

import (
	"fmt"

	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
)

// fillArm settles the run's arm: Options.Arm, else its Admission's, else the queue's, else
// packed; an arm other than packed must come with its rules.
func (o *Options) fillArm(q queue.Queue) error {
	if o.Admission != nil {
		if o.Arm == "" {
			o.Arm = o.Admission.Arm()
		}
		if o.Arm != o.Admission.Arm() {
			return fmt.Errorf("%w: arm %q with the admission rules of arm %q", ErrOptions, o.Arm, o.Admission.Arm())
		}
	}
	if o.Arm == "" {
		o.Arm = q.Arm
	}
	if o.Arm == "" {
		o.Arm = record.ArmPacked
	}
	if err := o.Arm.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrOptions, err)
	}
	if o.Arm != record.ArmPacked && o.Admission == nil {
		return fmt.Errorf("%w: arm %q is one of the benchmark's baselines: its admission rules come from the benchmark (bench/arms.Of)", ErrOptions, o.Arm)
	}
	if o.Arm == record.ArmPacked && o.Admission != nil {
		return fmt.Errorf("%w: arm %q is the runner's own rule: it takes no other admission rules", ErrOptions, o.Arm)
	}
	return nil
}
