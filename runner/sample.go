package runner

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/gpufrac/gpufrac/probe"
)

// sampleGPU attributes one GPU's processes to the attempts running there, 50 times a second.
func (r *run) sampleGPU(ctx context.Context, g string) {
	defer r.wg.Done()
	tick := time.NewTicker(r.o.SampleInterval)
	defer tick.Stop()
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r.mu.Lock()
		var here []*active
		for a := range r.active {
			if a.l.gpu == g && a.tree != nil {
				here = append(here, a)
			}
		}
		r.mu.Unlock()
		if len(here) == 0 {
			continue
		}
		procs, err := r.o.Backend.Processes(ctx, g)
		if err != nil {
			if !warned && ctx.Err() == nil {
				r.log.Warn("cannot read GPU processes", "gpu", g, "error", err)
				warned = true
			}
			continue
		}
		t := r.o.Now().Sub(r.start).Seconds()
		for _, a := range here {
			a.record(probe.Sum(procs, a.tree), t)
			if a.l.borrowing && r.guard != nil {
				if u, ok := r.guard.FenceTask(g, a.token); ok && u.Waiting {
					a.waited(r.o.SampleInterval, t)
				}
			}
		}
	}
}

// sampleBusy reads each GPU's utilization five times a second.
func (r *run) sampleBusy(ctx context.Context) {
	defer r.wg.Done()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, g := range r.s.gpus {
			u, err := r.o.Backend.Utilization(ctx, g)
			if err != nil {
				continue
			}
			r.mu.Lock()
			r.busy[g] = append(r.busy[g], u)
			r.mu.Unlock()
		}
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
