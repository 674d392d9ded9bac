package enforcer

import (
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// Tick called while Run runs waits for Run's pass and takes its turn: under -race, what the
// passes carry from one to the next is never touched by two at once, and the watchdog still
// stops a violator while both call it.
func TestTickBesideRun(t *testing.T) {
	r := newRig(t, policy.ModeIsolated, nil)
	res := r.reserve(2*size.GiB, "task")
	h := r.helper(t, res.Token, "task")
	h.use(t, r, size.GiB)
	r.start()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range 10 {
				r.enf.Tick(t.Context())
			}
		})
	}
	testutil.Eventually(t, waitLong, "the task's use in a sample", func() bool {
		b, ok := r.enf.TaskUsage(res.Token)
		return ok && b == size.GiB
	})
	h.use(t, r, 4*size.GiB)
	wg.Go(func() { r.enf.Tick(t.Context()) })
	wg.Wait()
	v := r.violation(res.Token)
	if v.Action != ActionSIGKILL {
		t.Fatalf("violation %+v: want the task stopped with SIGKILL", v)
	}
}

// A violator the watchdog cannot signal is recorded as reported, with why, not as stopped.
func TestViolatorThatCannotBeSignalledIsReported(t *testing.T) {
	r := newRig(t, policy.ModeIsolated, func(c *Config) {
		c.Signal = func(int, uint64, syscall.Signal) error { return syscall.EPERM }
	})
	res := r.reserve(2*size.GiB, "task")
	h := r.helper(t, res.Token, "task")
	h.use(t, r, 4*size.GiB)
	r.enf.Tick(t.Context())
	h.exit(t)
	r.enf.Tick(t.Context())
	vs := r.led.Violations()
	if len(vs) != 1 || vs[0].Action != ActionReported || !strings.Contains(vs[0].Detail, "cannot signal pid") {
		t.Fatalf("violations %+v: want one, reported, saying the signal failed", vs)
	}
}

// BenchmarkTick is one watchdog pass over the simulated backend with three live processes on the
// GPU (two reserved, one unmanaged) and the real /proc: the enforcer's own cost, without NVML's.
func BenchmarkTick(b *testing.B) {
	r := newRig(b, policy.ModeIsolated, nil)
	var jobs []*job
	for _, name := range []string{"r1", "r2"} {
		jobs = append(jobs, r.run(r.reserve(4*size.GiB, name), name, "--peak", "1GiB", "--hold", "1m"))
	}
	jobs = append(jobs, r.run(ledger.Reservation{}, "u1", "--peak", "1GiB", "--hold", "1m"))
	testutil.Eventually(b, waitLong, "three processes on the GPU", func() bool {
		ps, err := r.sim.Processes(b.Context(), r.uuid)
		return err == nil && len(ps) == 3
	})
	ctx := b.Context()
	r.enf.Tick(ctx) // the first pass reads every environ; later ones hit the cache
	for b.Loop() {
		r.enf.Tick(ctx)
	}
	if s, ok := r.enf.LastSample(r.uuid); !ok || len(s.Processes) != 3 {
		b.Fatalf("last sample %+v", s)
	}
	_ = jobs
}
