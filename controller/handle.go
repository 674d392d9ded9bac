package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/violations"
	"github.com/gpufrac/gpufrac/size"
)

// Handle acts on one violation variable. It is idempotent: a violation marked handled, or whose
// allocation the job's meta already records, causes no second registration. An error means
// "try again later" (API down, permission denied, a concurrent job change); every final outcome
// is written back to the variable (not in a dry run).
func (c *Controller) Handle(ctx context.Context, path string) error {
	vars := c.cfg.Client.Variables()
	v, _, err := vars.Read(path, (&api.QueryOptions{Namespace: c.cfg.Namespace}).WithContext(ctx))
	if err != nil {
		if errors.Is(err, api.ErrVariablePathNotFound) {
			c.markDone(path)
			return nil
		}
		return fmt.Errorf("reading violation %s: %w", path, err)
	}
	// Before decoding: a record that does not decode is marked handled too, and must not be
	// reported and written again by every controller started later.
	if v.Items[violations.KeyHandled] != "" {
		c.markDone(path)
		return nil
	}
	rec, err := violations.Decode(v.Items)
	if err != nil {
		c.emit(Event{Kind: EventSkipped, Violation: path, Message: err.Error()})
		if c.cfg.DryRun {
			c.markDone(path)
			return nil
		}
		return c.finish(ctx, v, "skipped: "+err.Error())
	}
	ev := Event{Violation: path, Alloc: rec.AllocID, Task: rec.Task, Job: rec.Job}
	outcome, err := c.act(ctx, rec, &ev)
	if err != nil {
		return fmt.Errorf("violation %s: %w", path, err)
	}
	// Once per violation: a retried one (API down, 403) is observed when it is finally acted on.
	if !rec.CrossedAt.IsZero() && rec.ContainedAt.After(rec.CrossedAt) {
		c.contain.Observe(rec.ContainedAt.Sub(rec.CrossedAt).Seconds())
	}
	if c.cfg.DryRun {
		c.markDone(path)
		return nil
	}
	return c.finish(ctx, v, outcome)
}

// act decides and does what one violation calls for, emits its event and returns the outcome
// to record.
func (c *Controller) act(ctx context.Context, rec violations.Record, ev *Event) (string, error) {
	skip := func(msg string) (string, error) {
		ev.Kind, ev.Message = EventSkipped, msg
		c.emit(*ev)
		return "skipped: " + msg, nil
	}
	if rec.AllocID == "" {
		return skip("the plugin could not tie the violation to an allocation")
	}
	ev.Namespace = rec.Namespace
	alloc, gone, err := c.allocation(ctx, rec)
	if err != nil {
		return "", err
	}
	if gone != "" {
		return skip(gone)
	}
	ev.Namespace, ev.Job, ev.Group = alloc.Namespace, alloc.JobID, alloc.TaskGroup
	if rec.Action == violations.ActionOOMInProcess {
		switch f, why := fateOf(alloc, rec, time.Now()); f {
		case fateCompleted:
			return skip(why)
		case fateRunning:
			return "", fmt.Errorf("%w: task %s of allocation %s has not ended since the fence refused it", errNotYet, rec.Task, rec.AllocID)
		}
	}
	wq := (&api.WriteOptions{Namespace: alloc.Namespace}).WithContext(ctx)
	job, _, err := c.cfg.Client.Jobs().Info(alloc.JobID, (&api.QueryOptions{Namespace: alloc.Namespace}).WithContext(ctx))
	if statusOf(err) == http.StatusNotFound {
		return skip("job " + alloc.JobID + " was deleted")
	}
	if err != nil {
		return "", fmt.Errorf("reading job %s in namespace %s: %w", alloc.JobID, alloc.Namespace, err)
	}
	if job.Stop != nil && *job.Stop {
		return skip("job " + alloc.JobID + " is stopped")
	}
	dev, devName, err := findDevice(job, alloc, rec)
	if err != nil {
		return skip(err.Error())
	}
	ev.Device = devName
	metaKey := MetaEscalated + alloc.TaskGroup + "." + rec.Task
	if job.Meta[metaKey] == rec.AllocID {
		return skip("already re-registered for this allocation")
	}
	var had uint64
	if alloc.Job != nil {
		if d, _, err := findDevice(alloc.Job, alloc, rec); err == nil && d.Count != nil {
			had = *d.Count
		}
	}
	cur := uint64(1)
	if dev.Count != nil {
		cur = *dev.Count
	}
	if had == 0 {
		had = cur
	}
	whole := uint64(rec.GPUUnits)
	ev.FromUnits = had
	if whole == 0 {
		return skip("the violation does not say how many units the GPU has")
	}
	if rec.UnitBytes == 0 {
		// Any node's plugin token may write here: a record without a unit must not stop the
		// controller (the ladder's count is a cap divided by it).
		return skip("the violation does not say the GPU's unit size (item " + violations.KeyUnitBytes + ")")
	}
	if cur > had {
		out, err := skip(fmt.Sprintf("the job already asks for %d units (the allocation had %d)", cur, had))
		if !c.cfg.DryRun {
			// Another allocation of the group broke its cap first and raised the count: this one
			// would be restarted in place under the units it broke until the update reaches it.
			ev.ToUnits = cur
			c.stopInPlace(ctx, alloc, *ev, wq)
		}
		return out, err
	}
	step := c.step(ctx, job, alloc.TaskGroup, rec, had)
	if step.Kind == policy.StepExhausted {
		ev.Kind, ev.ToUnits = EventExhausted, had
		ev.Message = fmt.Sprintf("the task broke its cap with %d units; %s: it is not re-registered again", had, step.String())
		c.emit(*ev)
		return "exhausted: " + step.Why, nil
	}
	to := whole
	if step.Kind == policy.StepRaise {
		to = uint64(step.CapBytes / rec.UnitBytes)
	}
	if to <= had || to > whole {
		// Only figures no plugin writes get here (sizes that overflow): never re-register a
		// job with less room than it broke, or more units than its GPU has.
		return skip(fmt.Sprintf("the violation's figures (unit %s, %d units on the GPU, cap %s) give %d units for a task that had %d",
			rec.UnitBytes, whole, rec.CapBytes, to, had))
	}
	c.raiseTemplate(ctx, rec, *ev)
	ev.ToUnits = to
	if c.cfg.DryRun {
		ev.Kind = EventWouldReregister
		ev.Message = fmt.Sprintf("would re-register job %s with %s count %d -> %d: %s", alloc.JobID, devName, had, to, step)
		c.emit(*ev)
		return "", nil
	}
	dev.Count = &to
	if job.Meta == nil {
		job.Meta = map[string]string{}
	}
	job.Meta[metaKey] = rec.AllocID
	job.Meta[MetaAttempt+alloc.TaskGroup+"."+rec.Task] = strconv.Itoa(step.Attempt)
	next := *job.Version + 1
	ev.Version = next
	// The new version is expected before it is registered: Nomad may place and start its
	// allocation before EnforceRegister returns here, and that event must find what it completes.
	key := pendingKey{ns: alloc.Namespace, job: alloc.JobID, group: alloc.TaskGroup, task: rec.Task}
	c.mu.Lock()
	prev, hadPrev := c.pending[key]
	c.pending[key] = pending{version: next, ev: *ev}
	c.mu.Unlock()
	// The modify-index check makes a concurrent change to the job (an operator's `nomad job
	// run`) win: this violation is then tried again against the new version.
	resp, _, err := c.cfg.Client.Jobs().EnforceRegister(job, *job.JobModifyIndex, wq)
	if err != nil {
		c.mu.Lock()
		if hadPrev {
			c.pending[key] = prev
		} else {
			delete(c.pending, key)
		}
		c.mu.Unlock()
		return "", fmt.Errorf("re-registering job %s: %w", alloc.JobID, err)
	}
	ev.Kind = EventReregistered
	ev.Message = fmt.Sprintf("job %s re-registered with %s count %d -> %d for %s; evaluation %s", alloc.JobID, devName, had, to, step, resp.EvalID)
	c.emit(*ev)
	c.stopInPlace(ctx, alloc, *ev, wq)
	return fmt.Sprintf("reregistered: %s count %d -> %d (%s), job version %d", devName, had, to, step.Head(), next), nil
}

// allocation reads the violation's allocation in the namespace the record names, or in every
// namespace (the wildcard) for a record published before plugins wrote one; gone says why it is
// taken as deleted. A namespace-scoped read answers 404 for an allocation that exists in
// another namespace, so a 404 is taken as deletion only where the read was in the
// allocation's own namespace or in all of them. A 403 says the controller's token may not read
// jobs in that namespace: the allocation exists and the violation waits, reported as an error
// that names both, until the token is given read-job there.
func (c *Controller) allocation(ctx context.Context, rec violations.Record) (alloc *api.Allocation, gone string, err error) {
	ns, where := rec.Namespace, "namespace "+rec.Namespace
	if ns == "" {
		ns, where = api.AllNamespacesNamespace, "any namespace (the violation names none)"
	}
	alloc, _, err = c.cfg.Client.Allocations().Info(rec.AllocID, (&api.QueryOptions{Namespace: ns}).WithContext(ctx))
	switch statusOf(err) {
	case 0:
		if err != nil {
			return nil, "", fmt.Errorf("reading allocation %s in %s: %w", rec.AllocID, where, err)
		}
		return alloc, "", nil
	case http.StatusNotFound:
		return nil, "allocation " + rec.AllocID + " no longer exists in " + where, nil
	case http.StatusForbidden:
		return nil, "", fmt.Errorf("reading allocation %s in %s: permission denied: the controller's token needs read-job there: %w",
			rec.AllocID, where, err)
	default:
		return nil, "", fmt.Errorf("reading allocation %s in %s: %w", rec.AllocID, where, err)
	}
}

// findDevice is the task's gpufrac device request that holds the violating GPU's units. The
// allocation lists its devices in the order of the task's requests, so the one with IDs on
// that GPU names the request; a task with one gpufrac device needs no such match.
func findDevice(job *api.Job, alloc *api.Allocation, rec violations.Record) (*api.RequestedDevice, string, error) {
	var task *api.Task
	for _, tg := range job.TaskGroups {
		if tg.Name != nil && *tg.Name == alloc.TaskGroup {
			for _, t := range tg.Tasks {
				if t.Name == rec.Task {
					task = t
				}
			}
		}
	}
	if task == nil {
		return nil, "", fmt.Errorf("job %s has no task %q in group %q", alloc.JobID, rec.Task, alloc.TaskGroup)
	}
	var devs []*api.RequestedDevice
	if task.Resources != nil {
		devs = task.Resources.Devices
	}
	var ours []int
	for i, d := range devs {
		if isGPUFrac(d.Name) {
			ours = append(ours, i)
		}
	}
	if len(ours) == 0 {
		return nil, "", fmt.Errorf("task %s of job %s asks for no gpufrac device: left alone", rec.Task, alloc.JobID)
	}
	if ar := alloc.AllocatedResources; ar != nil && ar.Tasks[rec.Task] != nil {
		for i, ad := range ar.Tasks[rec.Task].Devices {
			if i >= len(devs) || !isGPUFrac(devs[i].Name) {
				continue
			}
			for _, id := range ad.DeviceIDs {
				if strings.HasPrefix(id, rec.GPU+"-") {
					return devs[i], devs[i].Name, nil
				}
			}
		}
	}
	if len(ours) == 1 {
		return devs[ours[0]], devs[ours[0]].Name, nil
	}
	return nil, "", fmt.Errorf("task %s of job %s has %d gpufrac devices and none holds GPU %s: cannot tell which broke its cap",
		rec.Task, alloc.JobID, len(ours), rec.GPU)
}

// raiseTemplate stores what the violation proved the template needs (at least its cap and
// peak). A failure is reported; it does not hold back the re-registration.
func (c *Controller) raiseTemplate(ctx context.Context, rec violations.Record, ev Event) {
	if c.cfg.Templates == nil || rec.Template == "" {
		return
	}
	// What it held, not what it asked for (the task's own word, from its fence file): a
	// template is other tasks' footprint too, and no task may change what another is granted.
	raised := max(rec.PeakBytes, rec.CapBytes)
	var was size.Bytes
	var raising bool
	// Another writer (gpufrac probe, terraform apply) may change the template between the read
	// and the write: EditTemplate then reads it again, and the decision is made afresh from
	// their version, which may already hold enough.
	err := policy.EditTemplate(ctx, c.cfg.Templates, rec.Template, func(t *policy.Template, exists bool) (bool, error) {
		// An absent template is not made here: a violation tells its footprint, not the policy
		// and the rest that a template says. EditTemplate reports it absent.
		raising = exists && raised > t.PeakBytes
		if !raising {
			return false, nil
		}
		was = t.PeakBytes
		t.PeakBytes = raised
		return !c.cfg.DryRun, nil
	})
	switch {
	case err != nil && raising:
		ev.Kind, ev.Message = EventError, fmt.Sprintf("template %s not raised from %s: %v", rec.Template, was, err)
	case err != nil:
		ev.Kind, ev.Message = EventError, fmt.Sprintf("template %s not raised: %v", rec.Template, err)
	case !raising:
		return
	case c.cfg.DryRun:
		ev.Kind, ev.Message = EventTemplateRaised, fmt.Sprintf("would raise %s footprint %s -> %s (source: violation)", rec.Template, was, raised)
	default:
		ev.Kind, ev.Message = EventTemplateRaised, fmt.Sprintf("template %s footprint %s -> %s (source: violation)", rec.Template, was, raised)
	}
	c.emit(ev)
}

// finish writes the outcome into the violation variable (check-and-set on the version read).
func (c *Controller) finish(ctx context.Context, v *api.Variable, outcome string) error {
	// The plugin's items stay as written; only the outcome is added.
	items := make(map[string]string, len(v.Items)+3)
	for k, val := range v.Items {
		items[k] = val
	}
	items[violations.KeyHandled] = outcome
	items[violations.KeyHandledBy] = c.cfg.Name
	items[violations.KeyHandledAt] = time.Now().UTC().Format(time.RFC3339Nano)
	nv := &api.Variable{Namespace: v.Namespace, Path: v.Path, Items: items, ModifyIndex: v.ModifyIndex}
	if _, _, err := c.cfg.Client.Variables().CheckedUpdate(nv, (&api.WriteOptions{Namespace: c.cfg.Namespace}).WithContext(ctx)); err != nil {
		return fmt.Errorf("marking violation %s handled: %w", v.Path, err)
	}
	c.markDone(v.Path)
	return nil
}

func (c *Controller) markDone(path string) {
	c.mu.Lock()
	c.done[path] = true
	c.mu.Unlock()
}
