package controller

import (
	"context"
	"fmt"
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
func (c *Controller) step(ctx context.Context, job *api.Job, group string, rec violations.Record, had uint64) policy.Step {
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
		ReachedBytes: max(rec.Reached(), rec.CapBytes), Fixed: fixed, WholeBytes: size.Bytes(rec.GPUUnits) * unit, UnitBytes: unit}
	return c.policyOf(ctx, rec.Template).Next(f)
}

// policyOf is the policy whose cap formula sizes a task's next guarantee: its template's (as
// the plugins size it), else Config.Policy, else the default. A store that cannot say is no
// reason to hold the task back: the fallback's formula still gives strictly more room.
func (c *Controller) policyOf(ctx context.Context, template string) policy.Policy {
	fallback := c.cfg.Policy
	if fallback.UnitBytes == 0 {
		fallback = policy.Default()
	}
	if c.cfg.Templates == nil || template == "" {
		return fallback
	}
	t, _, err := c.cfg.Templates.GetTemplate(ctx, template)
	if err != nil || t.Policy == "" {
		return fallback
	}
	p, _, err := c.cfg.Templates.GetPolicy(ctx, t.Policy)
	if err != nil {
		c.log.Debug("template's policy unreadable; the default cap formula sizes the next guarantee", "template", template, "policy", t.Policy, "error", err)
		return fallback
	}
	return p
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

// stopInPlace stops the allocation whose task broke its cap, once its job asks for more room:
// Nomad calls Reserve once per task, not on a restart in place (docs/plugin.md), so a task its
// restart policy starts again would run under the same units and break them again until the new
// version replaced it. Stopped, it is replaced at once by an allocation of the new version. A
// failure is reported and changes nothing else: the job's own update replaces it later.
func (c *Controller) stopInPlace(ctx context.Context, alloc *api.Allocation, ev Event, wq *api.WriteOptions) {
	switch alloc.ClientStatus {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return
	}
	if alloc.DesiredStatus == api.AllocDesiredStatusStop {
		return
	}
	q := (&api.QueryOptions{Namespace: wq.Namespace}).WithContext(ctx)
	if _, err := c.cfg.Client.Allocations().Stop(alloc, q); err != nil {
		ev.Kind, ev.Message = EventError, fmt.Sprintf("allocation %s not stopped (Nomad may restart its task in place under the old units until it is replaced): %v", alloc.ID, err)
		c.emit(ev)
		return
	}
	ev.Kind = EventStopped
	ev.Message = fmt.Sprintf("allocation %s stopped so its task is not restarted in place under the units it broke; the new version replaces it", alloc.ID)
	c.emit(ev)
}
