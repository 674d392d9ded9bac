package controller

import (
	"strconv"

	"github.com/hashicorp/nomad/api"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/violations"
	"github.com/gpufrac/gpufrac/size"
)

// Meta keys of the ladder in a Nomad job. MetaAttempt (per task group and task, written by the
// controller) is the number of the allocation now running: 1 until the first re-registration.
// MetaMaxAttempts and MetaCapFixed are the user's, read from the task's meta, else its group's,
// else the job's: the same bound and the same ceiling as a queue file's max_attempts and
// cap_fixed.
const (
	MetaAttempt     = "gpufrac_attempt."
	MetaMaxAttempts = "gpufrac_max_attempts"
	MetaCapFixed    = "gpufrac_cap_fixed"
)

// step is the ladder's decision (policy.Policy.Next, the rule gpufrac run applies too) for a
// violation of a task that held had units.
func (c *Controller) step(job *api.Job, group string, rec violations.Record, had uint64) policy.Step {
	task := findTask(job, group, rec.Task)
	meta := func(k string) string {
		if task != nil {
			if v, ok := task.Meta[k]; ok {
				return v
			}
		}
		for _, tg := range job.TaskGroups {
			if tg.Name != nil && *tg.Name == group {
				if v, ok := tg.Meta[k]; ok {
					return v
				}
			}
		}
		return job.Meta[k]
	}
	attempt := 1
	if n, err := strconv.Atoi(job.Meta[MetaAttempt+group+"."+rec.Task]); err == nil && n > 0 {
		attempt = n
	}
	maxA, _ := strconv.Atoi(meta(MetaMaxAttempts))
	fixed, _ := strconv.ParseBool(meta(MetaCapFixed))
	unit := rec.UnitBytes
	f := policy.Failure{Attempt: attempt, MaxAttempts: maxA, CapBytes: size.Bytes(had) * unit, Whole: had >= uint64(rec.GPUUnits),
		ReachedBytes: max(rec.PeakBytes, rec.CapBytes), Fixed: fixed, WholeBytes: size.Bytes(rec.GPUUnits) * unit, UnitBytes: unit}
	return c.policy().Next(f)
}

func (c *Controller) policy() policy.Policy {
	if c.cfg.Policy.UnitBytes != 0 {
		return c.cfg.Policy
	}
	return policy.Default()
}

func findTask(job *api.Job, group, name string) *api.Task {
	for _, tg := range job.TaskGroups {
		if tg.Name != nil && *tg.Name == group {
			for _, t := range tg.Tasks {
				if t.Name == name {
					return t
				}
			}
		}
	}
	return nil
}
