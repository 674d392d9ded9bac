package bench

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/size"
)

// The recorder reads every GPU that has GPM and says why it skips the others; what it records is
// the simulated monitor's figures of the busy process.
func TestGPMRecorder(t *testing.T) {
	ctx := context.Background()
	sim, devs := testutil.NewSim(t, "H200=140GiB", "A100=40GiB")
	h200, a100 := devs[0].UUID, devs[1].UUID
	pid := os.Getpid()
	if err := errors.Join(sim.SetProcessLoad(h200, pid, gpu.SimLoad{SMUtil: 55, SMOccupancy: 20}),
		sim.SetProcess(h200, pid, size.GiB, true)); err != nil {
		t.Fatal(err)
	}
	defer sim.ClearProcess(h200, pid)
	rec, notes := startGPM(ctx, sim, 10*time.Millisecond)
	if rec == nil {
		t.Fatalf("no recorder: %v", notes)
	}
	testutil.Eventually(t, 5*time.Second, "three GPM periods", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.samples) >= 3
	})
	samples, errs := rec.finish()
	if len(errs) != 1 || !strings.Contains(errs[0], a100) || !strings.Contains(errs[0], "not available") {
		t.Errorf("notes %q: want one saying the A100 has no GPM", errs)
	}
	for i, s := range samples {
		if s.GPU != h200 || s.SMUtil != 55 || s.SMOccupancy != 20 || !s.End.After(s.Start) || (i > 0 && !s.Start.Equal(samples[i-1].End)) {
			t.Fatalf("sample %d: %+v (previous %+v)", i, s, samples[max(i-1, 0)])
		}
	}
	u := SMUseOf(samples, samples[0].Start, samples[len(samples)-1].End)
	if !near(u.Fraction, 0.55) || !near(u.Coverage, 1) {
		t.Errorf("SM use %+v, want 55%% over the whole window", u)
	}

	only, _ := testutil.NewSim(t, "T4=16GiB")
	if rec, notes := startGPM(ctx, only, 10*time.Millisecond); rec != nil || len(notes) != 1 {
		t.Errorf("a T4 alone: recorder %v, notes %q; want none and a note", rec, notes)
	}
}
