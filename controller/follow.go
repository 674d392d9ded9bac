package controller

import (
	"context"
	"fmt"

	"github.com/hashicorp/nomad/api"
)

// followAllocations reads Nomad's event stream (topic Allocation) and reports, for each job
// this controller re-registered, when an allocation of the new version runs.
func (c *Controller) followAllocations(ctx context.Context) {
	var index uint64
	for ctx.Err() == nil {
		q := (&api.QueryOptions{Namespace: "*"}).WithContext(ctx)
		ch, err := c.cfg.Client.EventStream().Stream(ctx, map[api.Topic][]string{api.TopicAllocation: {"*"}}, index, q)
		if err != nil {
			c.log.Debug("event stream unavailable; retrying", "error", err)
			sleep(ctx, c.cfg.Retry)
			continue
		}
		for evs := range ch {
			if evs.Err != nil {
				break
			}
			index = evs.Index + 1
			for _, e := range evs.Events {
				a, err := e.Allocation()
				if err != nil || a == nil {
					continue
				}
				c.allocUpdated(ctx, a)
			}
		}
		sleep(ctx, c.cfg.Retry)
	}
}

func (c *Controller) allocUpdated(ctx context.Context, a *api.Allocation) {
	if a.ClientStatus != api.AllocClientStatusRunning || !c.awaits(a) {
		return
	}
	version, err := jobVersion(ctx, c.cfg.Client, a)
	if err != nil {
		// A later event of this allocation, or of another of the new version, tries again.
		c.log.Debug("cannot tell the job version of a running allocation", "alloc", a.ID, "job", a.JobID, "error", err)
		return
	}
	var replaced []Event
	c.mu.Lock()
	for k, p := range c.pending {
		if k.awaits(a) && version >= p.version {
			delete(c.pending, k)
			replaced = append(replaced, p.ev)
		}
	}
	c.mu.Unlock()
	for _, ev := range replaced {
		ev.Kind, ev.Alloc = EventReplaced, a.ID
		ev.Message = fmt.Sprintf("allocation %s of job version %d runs with %d units", a.ID, version, ev.ToUnits)
		c.emit(ev)
	}
}

// awaits says whether a re-registration waits for an allocation of a's group.
func (c *Controller) awaits(a *api.Allocation) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.pending {
		if k.awaits(a) {
			return true
		}
	}
	return false
}

// awaits says whether a is an allocation of the group k's re-registration raised.
func (k pendingKey) awaits(a *api.Allocation) bool {
	return k.ns == a.Namespace && k.job == a.JobID && k.group == a.TaskGroup
}

// jobVersion is the version of the job an allocation runs. Nomad's allocation events carry no
// job (the server drops it to keep them small), so it is read from the allocation itself.
func jobVersion(ctx context.Context, client *api.Client, a *api.Allocation) (uint64, error) {
	if a.Job == nil || a.Job.Version == nil {
		full, _, err := client.Allocations().Info(a.ID, (&api.QueryOptions{Namespace: a.Namespace}).WithContext(ctx))
		if err != nil {
			return 0, fmt.Errorf("reading allocation %s: %w", a.ID, err)
		}
		a = full
	}
	if a.Job == nil || a.Job.Version == nil {
		return 0, fmt.Errorf("allocation %s names no job version", a.ID)
	}
	return *a.Job.Version, nil
}
