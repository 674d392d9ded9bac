package runner

import (
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/progress"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/runstatus"
	"github.com/gpufrac/gpufrac/sched"
	"github.com/gpufrac/gpufrac/size"
)

// testClock is the wall clock plus an offset the test moves forward.
type testClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

// onLine calls f once, the first time a line containing want is written.
type onLine struct {
	mu   sync.Mutex
	want string
	f    func()
	done bool
	b    strings.Builder
}

func (w *onLine) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if !w.done && strings.Contains(w.b.String(), w.want) {
		w.done = true
		w.f()
	}
	return len(p), nil
}

// With nothing running and nothing admissible (another live process holds the whole budget),
// the run gives up on the jobs left once stuckAfter has passed on its clock: well over a minute
// of waiting that the injected clock proves in the time of a few rounds of the loop.
func TestRunGivesUpWhenStuck(t *testing.T) {
	sim := newSim(t, "H100=80GiB")
	o := testOptions(t, sim, record.ArmPacked)
	o.Arm, o.Admission = "", testRule{arm: record.ArmExclusive, alone: true} // no enforcer; the job needs the whole budget
	o.StateDir = t.TempDir()
	holdElsewhere(t, sim, o, 0)
	clock := &testClock{}
	o.Now = clock.Now
	o.Progress = &onLine{want: "nothing can be admitted", f: func() { clock.advance(stuckAfter + time.Second) }}
	q := queue.Queue{Jobs: []queue.Job{simJob(t, "a", "t", "--peak", "1GiB", "--hold", "100ms")}}
	began := time.Now()
	res, err := Run(context.Background(), q, o)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > stuckAfter/2 {
		t.Errorf("the run gave up after %s of wall time; the injected clock should have decided", took)
	}
	if len(res.Attempts) != 1 || res.Attempts[0].Outcome != record.OutcomeFailed || !strings.Contains(res.Attempts[0].Detail, "not admitted for") {
		t.Fatalf("attempts %+v; want one failed attempt saying it was not admitted", res.Attempts)
	}
	if res.Jobs[0].Outcome != record.OutcomeFailed || res.Completed != 0 {
		t.Errorf("job %+v, completed %d; want it failed", res.Jobs[0], res.Completed)
	}
}

// holdElsewhere leaves in the run's ledger (o.StateDir) a reservation by this live process of
// the first GPU's whole budget but free: another process's, which the run waits for.
func holdElsewhere(t *testing.T, sim *gpu.Simulated, o Options, free size.Bytes) {
	t.Helper()
	devs, err := sim.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	led, err := ledger.Open(o.StateDir, ledger.Options{Holder: node.SelfHolder()})
	if err != nil {
		t.Fatal(err)
	}
	var infos []ledger.GPUInfo
	for _, d := range devs {
		infos = append(infos, ledger.GPUInfo{UUID: d.UUID, Index: d.Index, Model: d.Model, TotalBytes: d.MemoryBytes, Healthy: true})
	}
	if err := led.SetPolicy(o.Policy); err != nil {
		t.Fatal(err)
	}
	if err := led.SyncGPUs(infos); err != nil {
		t.Fatal(err)
	}
	st, err := led.State(devs[0].UUID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := led.ReserveBytes(devs[0].UUID, sched.WholeBytes(st)-free, ledger.Task{JobName: "other", TaskName: "other", Template: "other"}); err != nil {
		t.Fatal(err)
	}
	if err := led.Close(); err != nil {
		t.Fatal(err)
	}
}

// Staged jobs alone do not keep a stuck run alive: with only a staged job running, whose
// guarantee another process's reservation keeps out, the run gives up as with nothing running,
// after stopping it.
func TestRunGivesUpWithOnlyStagedJobs(t *testing.T) {
	sim := newSim(t, "H100=80GiB")
	o := testOptions(t, sim, record.ArmPacked)
	o.StateDir, o.Stage, o.Borrow = t.TempDir(), 2, node.BorrowWait
	holdElsewhere(t, sim, o, 5*size.GiB)
	clock := &testClock{}
	o.Now = clock.Now
	o.Progress = &onLine{want: "nothing can be admitted", f: func() { clock.advance(stuckAfter + time.Second) }}
	q := queue.Queue{
		Jobs:      []queue.Job{simJob(t, "a", "t", "--peak", "30GiB", "--ramp", "50ms", "--hold", "100ms")},
		Templates: map[string]queue.TemplateSpec{"t": {Name: "t", PeakBytes: 30 * size.GiB, CapBytes: 30 * size.GiB}},
	}
	// A run that took the staged job for work under way would wait for it forever.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, q, o)
	if err != nil {
		t.Fatal(err)
	}
	got := outcomes(res.Attempts)
	if !slices.Equal(got, []record.Outcome{record.OutcomeUnstaged, record.OutcomeFailed}) || !strings.Contains(res.Attempts[1].Detail, "not admitted for") {
		t.Fatalf("attempts %v (%+v); want the staged start stopped, then a failure saying it was not admitted", got, res.Attempts)
	}
	if res.Jobs[0].Outcome != record.OutcomeFailed || res.Completed != 0 {
		t.Errorf("job %+v, completed %d; want it failed", res.Jobs[0], res.Completed)
	}
}

// clockRun is a run with nothing queued, its ledger in memory and its clock clk: enough for the
// progress and the enforcer's events, without processes.
func clockRun(t *testing.T, clk *testutil.Clock, stateDir string, gpus map[string]record.GPUResult) *run {
	t.Helper()
	led, err := ledger.Open("", ledger.Options{NoPersist: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	r := &run{o: Options{Now: clk.Now, StateDir: stateDir}, led: led, s: sched.New(sched.Config{Ledger: led}, nil), gpus: gpus, active: map[*active]bool{}}
	r.prog = progress.New(io.Discard, r.since)
	r.start = clk.Now()
	return r
}

// The progress gpufrac status reads is written about once a second of the run's clock: a
// second that passes on it publishes, however little wall time went by, and a half second
// does not.
func TestProgressIsPublishedOnTheRunsClock(t *testing.T) {
	clk := testutil.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	dir := t.TempDir()
	r := clockRun(t, clk, dir, map[string]record.GPUResult{})
	t0 := clk.Now()
	for _, step := range []struct {
		advance time.Duration
		want    time.Time // UpdatedAt of the published progress
	}{
		{0, t0},                      // the first call publishes
		{500 * time.Millisecond, t0}, // half a second on: not yet
		{500 * time.Millisecond, t0.Add(time.Second)}, // a second since the last: published
		{999 * time.Millisecond, t0.Add(time.Second)},
		{time.Millisecond, t0.Add(2 * time.Second)},
	} {
		clk.Advance(step.advance)
		r.status()
		st, ok, err := runstatus.Read(dir)
		if err != nil || !ok {
			t.Fatalf("at %s: progress %v, %v", clk.Now().Sub(t0), ok, err)
		}
		if !st.UpdatedAt.Equal(step.want) {
			t.Errorf("at %s on the run's clock: progress of %s, want %s", clk.Now().Sub(t0), st.UpdatedAt.Sub(t0), step.want.Sub(t0))
		}
	}
}

// An enforcer event that comes without a time is placed on the run's clock as it arrives, so
// that a collateral failure is judged by the times its attempts are recorded in.
func TestEventWithoutATimeTakesTheRunsClock(t *testing.T) {
	clk := testutil.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	const uuid = "GPU-clock"
	r := clockRun(t, clk, "", map[string]record.GPUResult{uuid: {UUID: uuid, Index: 0}})
	marked := clk.Now()
	r.onEvent(enforcer.Event{Kind: enforcer.EventGPUHealth, Stage: "unhealthy", GPU: uuid, Message: "a task was stopped under MPS"})
	clk.Advance(3 * time.Second)
	r.onEvent(enforcer.Event{Kind: enforcer.EventGPUHealth, Stage: "healthy", GPU: uuid, Message: "GPU healthy again"})
	evs := r.wide.All()
	if len(evs) != 1 || !evs[0].Start.Equal(marked) || !evs[0].End.Equal(marked.Add(3*time.Second)) {
		t.Fatalf("GPU events %+v; want one from %s to 3s later, on the run's clock", evs, marked)
	}
	// An attempt that failed inside that window, on the same clock, is collateral.
	if _, ok := r.wide.Covering(uuid, "", false, marked.Add(-time.Second), marked.Add(time.Second), time.Second); !ok {
		t.Error("a failure inside the window is not covered by it")
	}
}
