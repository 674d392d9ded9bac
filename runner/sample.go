package runner

import (
	"context"
	"time"

	"github.com/gpufrac/gpufrac/attribution"
	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/procfs"
	"github.com/gpufrac/gpufrac/size"
)

// sample supervises the attempts' GPU memory with one sampler per GPU and one attribution rule:
// in the arms that cap, the watchdog's own samples (it samples at least every SampleInterval
// while the run follows it, so a job's recorded peak keeps the full rate); in the others, which
// run no watchdog, a sampler of the runner's per GPU.
func (r *run) sample(ctx context.Context) {
	if r.guard != nil {
		last := gaps{} // Follow calls from the watchdog's one goroutine
		stop := r.guard.Follow(r.o.SampleInterval, func(s enforcer.Sample) {
			r.take(s.GPU, s.Use, last.since(s.GPU, s.Time, r.o.SampleInterval))
		})
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			<-ctx.Done()
			stop()
		}()
		return
	}
	for _, g := range r.s.GPUs() {
		r.wg.Add(1)
		go r.sampleGPU(ctx, g)
	}
}

// sampleGPU attributes one GPU's processes to the attempts running there, every SampleInterval,
// where no watchdog samples them.
func (r *run) sampleGPU(ctx context.Context, g string) {
	defer r.wg.Done()
	attr := attribution.New(procfs.Linux(""))
	last := gaps{}
	tick := time.NewTicker(r.o.SampleInterval)
	defer tick.Stop()
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var jobs []attribution.Task
		for _, o := range r.on(g) {
			jobs = append(jobs, attribution.Task{Token: o.a.token, GPU: g, Root: o.a.proc.PID})
		}
		if len(jobs) == 0 {
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
		attr.NewPass()
		r.take(g, attr.Split(g, procs, attribution.NewTasks(jobs...)).Use, last.since(g, time.Now(), r.o.SampleInterval))
	}
}

// onGPU is an attempt running on a GPU, as a sampler sees it: whether it borrows changes when a
// staged attempt is granted (granted, on the main loop), so it is read under r.mu.
type onGPU struct {
	a         *active
	borrowing bool
}

// on lists the attempts running on GPU g.
func (r *run) on(g string) []onGPU {
	r.mu.Lock()
	defer r.mu.Unlock()
	var here []onGPU
	for a := range r.active {
		if a.l.GPU == g && a.proc != nil {
			here = append(here, onGPU{a, a.l.Borrowing})
		}
	}
	return here
}

// take records a sample of GPU g, d after the GPU's previous one, for the attempts running
// there: use says what each attempt's processes held.
func (r *run) take(g string, use func(token string) (size.Bytes, bool), d time.Duration) {
	here := r.on(g)
	t := r.o.Now().Sub(r.start).Seconds()
	for _, o := range here {
		a := o.a
		b, _ := use(a.token)
		waiting := false
		if o.borrowing && r.guard != nil {
			if u, ok := r.guard.FenceTask(g, a.token); ok && u.Waiting {
				waiting = true
				a.waited(d, t, u.Owed || u.Grace)
			}
		}
		a.record(b, t, d, waiting)
	}
	r.mu.Lock()
	r.samples[g]++
	close(r.sampled)
	r.sampled = make(chan struct{})
	r.mu.Unlock()
}

// sampleCount is how many samples of GPU g have been taken.
func (r *run) sampleCount(g string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.samples[g]
}

// sampleAfter waits until GPU g has been sampled more than n times. After an attempt's process
// ended (n counted then), the pass that read the GPU while it lived may still be attributing
// what it read, and for a short job that sample is its peak, or its only one; passes are taken
// one after another, so the next sample in is that pass's or a later one's. A GPU that is no
// longer sampled (it cannot be read) holds the attempt's record back no longer than bound.
func (r *run) sampleAfter(g string, n uint64, bound time.Duration) {
	t := time.NewTimer(bound)
	defer t.Stop()
	for {
		r.mu.Lock()
		got, next := r.samples[g], r.sampled
		r.mu.Unlock()
		if got > n {
			return
		}
		select {
		case <-next:
		case <-t.C:
			return
		}
	}
}

// gaps are the times of each GPU's latest sample: a borrowing attempt's wait is counted in the
// time between samples, whoever took them.
type gaps map[string]time.Time

// since notes a sample of GPU g at at and says how long after the previous one it came; first
// for the first.
func (l gaps) since(g string, at time.Time, first time.Duration) time.Duration {
	prev, ok := l[g]
	l[g] = at
	if !ok || !at.After(prev) {
		return first
	}
	return at.Sub(prev)
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
		for _, g := range r.s.GPUs() {
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
