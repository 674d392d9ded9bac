package simjob

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/gpufrac/gpufrac/size"
	"github.com/gpufrac/gpufrac/taskenv"
)

// Fence is one process's slot in the allocation fence's table of its GPU, as a simulated job
// meets it: what the preload library is to a CUDA program. The fence (enforcer/fence) supplies
// it through UseFence, so this package, below enforcer/, imports nothing of it.
type Fence interface {
	// Charge asks for n bytes: false when the fence refuses them (the task would pass its cap).
	Charge(n size.Bytes) bool
	Uncharge(n size.Bytes)
	// View is the task's cap and what all its processes hold.
	View() (capBytes, used size.Bytes, ok bool)
	// Refusal says why the last refused charge was refused and how long it waited first.
	Refusal() (why string, waited time.Duration)
	Detach()
}

// AttachFunc claims a process slot for token's task in the fence table of GPU uuid in dir.
type AttachFunc func(dir, uuid, token string) (Fence, error)

var attachFn atomic.Pointer[AttachFunc]

// UseFence makes attach how simulated jobs of this process reach the fence. Without it a job
// whose task has a fence directory says so and runs under the watchdog alone.
func UseFence(attach AttachFunc) { attachFn.Store(&attach) }

// attachFence mirrors the preload library: at its first allocation (not at its start, so a
// task in its CPU start-up has not claimed its guarantee yet) a task with a fence directory
// and a reservation on this GPU attaches to its table; one that cannot attach says why once
// and runs unfenced.
func (j *job) attachFence() {
	if j.fenceTried {
		return
	}
	j.fenceTried = true
	dir := os.Getenv(taskenv.FenceDir)
	if dir == "" {
		return
	}
	attach := attachFn.Load()
	if attach == nil {
		fmt.Fprintf(j.stderr, "gpufrac-fence[%d]: this program has no fence for simulated jobs; this process runs under the watchdog alone\n", j.pid)
		return
	}
	tok := taskenv.TokenFor(j.c.gpu, os.Getenv)
	if tok == "" {
		fmt.Fprintf(j.stderr, "gpufrac-fence[%d]: no reservation for %s in this process's environment; not fenced there\n", j.pid, j.c.gpu)
		return
	}
	c, err := (*attach)(dir, j.c.gpu, tok)
	if err != nil {
		fmt.Fprintf(j.stderr, "gpufrac-fence[%d]: %v; this process runs under the watchdog alone\n", j.pid, err)
		return
	}
	j.fence = c
}

// refund gives the fence back the charge for growing to want, which the GPU then refused.
func (j *job) refund(want size.Bytes) {
	if j.fence != nil && j.ctxSet {
		if have, next := j.used-min(j.used, j.ctx), want-min(want, j.ctx); next > have {
			j.fence.Uncharge(next - have)
		}
	}
}

// ask charges n bytes, asking as often as the job's allocator does before it gives up.
func (j *job) ask(n size.Bytes) bool {
	defer j.idleWhileWaiting()()
	for i := 0; i < max(j.c.asks, 1); i++ {
		if j.fence.Charge(n) {
			return true
		}
	}
	return false
}

// idleWhileWaiting reports the process not busy once a charge has waited waitIdleAfter: a
// process blocked inside an allocation runs no kernel, and a neighbour's work must not be
// slowed by it (SM contention). The returned func ends it; the caller's next report says busy
// again.
func (j *job) idleWhileWaiting() func() {
	shown, done := j.shown, make(chan struct{})
	t := time.AfterFunc(waitIdleAfter, func() {
		defer close(done)
		_ = j.sim.SetProcess(j.c.gpu, j.pid, shown, false)
	})
	return func() {
		if t.Stop() {
			close(done)
		}
		<-done
	}
}

// waitIdleAfter is how long a charge waits before its process counts as idle: longer than a
// charge that is served at once takes, shorter than the 200 ms a neighbour's work rate is read.
const waitIdleAfter = 50 * time.Millisecond

// charge moves the fenced part of the job's use (all but the context) to want's.
func (j *job) charge(want size.Bytes) int {
	if !j.ctxSet {
		return ExitOK
	}
	have, next := j.used-min(j.used, j.ctx), want-min(want, j.ctx)
	if next > have {
		j.attachFence()
	}
	if j.fence == nil {
		return ExitOK
	}
	switch {
	case next > have:
		if !j.ask(next - have) {
			capBytes, used, _ := j.fence.View()
			why, waited := j.fence.Refusal()
			fmt.Fprintf(j.stderr, "CUDA out of memory: tried to allocate %s; the task holds %s of its %s cap (gpufrac fence: %s, after %.1fs of waiting)\n",
				next-have, used, capBytes, why, waited.Seconds())
			return ExitFail
		}
	case next < have:
		j.fence.Uncharge(have - next)
	}
	return ExitOK
}
