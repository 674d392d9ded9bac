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
				c.allocUpdated(a)
			}
		}
		sleep(ctx, c.cfg.Retry)
	}
}

func (c *Controller) allocUpdated(a *api.Allocation) {
	if a.ClientStatus != api.AllocClientStatusRunning || a.Job == nil || a.Job.Version == nil {
		return
	}
	k := a.Namespace + "/" + a.JobID
	c.mu.Lock()
	p, ok := c.pending[k]
	if ok && a.TaskGroup == p.group && *a.Job.Version >= p.version {
		delete(c.pending, k)
	} else {
		ok = false
	}
	c.mu.Unlock()
	if !ok {
		return
	}
	ev := p.ev
	ev.Kind, ev.Alloc = EventReplaced, a.ID
	ev.Message = fmt.Sprintf("allocation %s of job version %d runs with %d units", a.ID, *a.Job.Version, ev.ToUnits)
	c.emit(ev)
}
