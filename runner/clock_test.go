package runner

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
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
	devs, err := sim.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions(t, sim, record.ArmExclusive)
	o.StateDir = t.TempDir()
	// A reservation of the whole budget by this (live) process, left in the run's ledger.
	led, err := ledger.Open(o.StateDir, ledger.Options{Holder: SelfHolder()})
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
	if _, err := led.ReserveBytes(devs[0].UUID, wholeBytes(st), ledger.Task{JobName: "other", TaskName: "other", Template: "other"}); err != nil {
		t.Fatal(err)
	}
	if err := led.Close(); err != nil {
		t.Fatal(err)
	}

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
