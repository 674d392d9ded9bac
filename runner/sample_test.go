package runner

import (
	"context"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/probe"
	"github.com/gpufrac/gpufrac/sched"
	"github.com/gpufrac/gpufrac/size"
)

// followingGuard is a guard whose watchdog's samples the test hands over by hand.
type followingGuard struct {
	every   time.Duration
	fn      func(enforcer.Sample)
	stopped chan struct{}
	waiting bool
}

func (g *followingGuard) EnvOptions(string) enforcer.EnvOptions { return enforcer.EnvOptions{} }
func (g *followingGuard) SyncFence(ledger.GPUState) error       { return nil }
func (g *followingGuard) FenceUse(string) (size.Bytes, bool)    { return 0, false }
func (g *followingGuard) Shutdown(context.Context) error        { return nil }
func (g *followingGuard) FenceTask(string, string) (fence.TaskUse, bool) {
	return fence.TaskUse{Waiting: g.waiting}, true
}

func (g *followingGuard) Follow(every time.Duration, fn func(enforcer.Sample)) func() {
	g.every, g.fn = every, fn
	return func() { close(g.stopped) }
}

// Where a watchdog runs, the runner records its attempts from the watchdog's samples: it asks
// for them at its sampling rate, takes each attempt's memory as the watchdog attributed it, and
// starts no sampler of its own (a run without a backend would fail at its first sample).
func TestAttemptsFollowTheWatchdogsSamples(t *testing.T) {
	const g = "GPU-0"
	start := time.Now()
	guard := &followingGuard{stopped: make(chan struct{})}
	r := &run{o: Options{SampleInterval: 20 * time.Millisecond, Now: time.Now}, guard: guard, start: start,
		active: map[*active]bool{}, samples: map[string]uint64{}, sampled: make(chan struct{})}
	mine := &active{l: sched.Launch{GPU: g, Borrowing: true}, token: "tok-mine", proc: &probe.Proc{PID: 100}, onGPU: make(chan struct{})}
	other := &active{l: sched.Launch{GPU: "GPU-1"}, token: "tok-other", proc: &probe.Proc{PID: 200}, onGPU: make(chan struct{})}
	r.active[mine], r.active[other] = true, true
	ctx, cancel := context.WithCancel(context.Background())
	r.sample(ctx)
	if guard.fn == nil || guard.every != r.o.SampleInterval {
		t.Fatalf("the runner follows every %s, want %s", guard.every, r.o.SampleInterval)
	}
	guard.waiting = true
	at := start
	for _, used := range []size.Bytes{2 * size.GiB, 5 * size.GiB, 3 * size.GiB} {
		at = at.Add(20 * time.Millisecond)
		guard.fn(enforcer.Sample{GPU: g, Time: at, Processes: []enforcer.ProcUsage{
			{PID: 101, Bytes: used, Token: "tok-mine", Via: "parent"},
			{PID: 300, Bytes: 7 * size.GiB}, // unmanaged: no one's
			{PID: 301, Bytes: size.GiB, Token: "tok-neighbour", Via: "environ"},
		}})
	}
	cancel()
	select {
	case <-guard.stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the runner did not stop following when its context ended")
	}
	r.wg.Wait()
	if mine.peak != 5*size.GiB || mine.now != 3*size.GiB {
		t.Errorf("attempt on %s: peak %s, now %s; want 5GiB, 3GiB", g, mine.peak, mine.now)
	}
	if other.peak != 0 || len(other.snaps) != 0 {
		t.Errorf("an attempt on another GPU recorded %s", other.peak)
	}
	// Three samples found its allocation waiting: the first counts one sampling period, the
	// others the time since the sample before.
	if want := 60 * time.Millisecond; mine.wait != want {
		t.Errorf("borrow wait %s, want %s", mine.wait, want)
	}
}

// An attempt is recorded only once the sample of its GPU in flight when its process ended is
// in: sampleAfter returns at the first sample counted after the exit, at once when one came
// already, and after its bound when none comes.
func TestAttemptWaitsForTheSampleInFlight(t *testing.T) {
	const g = "GPU-0"
	guard := &followingGuard{stopped: make(chan struct{})}
	r := &run{o: Options{SampleInterval: 20 * time.Millisecond, Now: time.Now}, guard: guard, start: time.Now(),
		active: map[*active]bool{}, samples: map[string]uint64{}, sampled: make(chan struct{})}
	a := &active{l: sched.Launch{GPU: g}, token: "tok", proc: &probe.Proc{PID: 100}, onGPU: make(chan struct{})}
	r.active[a] = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.sample(ctx)
	exited := r.sampleCount(g)
	done := make(chan struct{})
	go func() {
		r.sampleAfter(g, exited, time.Minute)
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("the attempt was recorded before any sample came after its exit")
	default:
	}
	// The pass in flight at the exit saw the job's memory: it is the attempt's peak.
	guard.fn(enforcer.Sample{GPU: "GPU-1", Time: time.Now(), Processes: []enforcer.ProcUsage{{PID: 9, Bytes: size.GiB, Token: "x", Via: "environ"}}})
	guard.fn(enforcer.Sample{GPU: g, Time: time.Now(), Processes: []enforcer.ProcUsage{{PID: 101, Bytes: 3 * size.GiB, Token: "tok", Via: "environ"}}})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the sample after the exit did not release the attempt")
	}
	if a.peak != 3*size.GiB {
		t.Errorf("peak %s when recorded, want the 3GiB of the sample in flight", a.peak)
	}
	start := time.Now()
	r.sampleAfter(g, exited, time.Minute) // counted already: no wait
	r.sampleAfter(g, r.sampleCount(g), 50*time.Millisecond)
	if d := time.Since(start); d < 50*time.Millisecond || d > 30*time.Second {
		t.Errorf("with no sample to come the wait took %s, want its 50ms bound", d)
	}
}
