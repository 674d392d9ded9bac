package enforcer

import (
	"testing"

	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

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
