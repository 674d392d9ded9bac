package bench

import (
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

var smT0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func sec(s float64) time.Time { return smT0.Add(time.Duration(s * float64(time.Second))) }

func gpm(gpu string, from, to, util, occ float64) GPMSample {
	return GPMSample{GPU: gpu, Start: sec(from), End: sec(to), SMUtil: util, SMOccupancy: occ}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestSMUseOf(t *testing.T) {
	tests := []struct {
		name     string
		samples  []GPMSample
		from, to float64
		want     SMUse
	}{
		{"no samples", nil, 0, 10, SMUse{}},
		{"empty window", []GPMSample{gpm("a", 0, 10, 50, 10)}, 5, 5, SMUse{}},
		{"one sample covers the window", []GPMSample{gpm("a", 0, 10, 50, 20)}, 0, 10,
			SMUse{Fraction: 0.5, ActiveSeconds: 5, Occupancy: 0.2, Coverage: 1}},
		{"periods weighted by their length", []GPMSample{gpm("a", 0, 1, 100, 40), gpm("a", 1, 4, 0, 0)}, 0, 4,
			SMUse{Fraction: 0.25, ActiveSeconds: 1, Occupancy: 0.1, Coverage: 1}},
		{"only the part inside the window counts", []GPMSample{gpm("a", 0, 2, 100, 100), gpm("a", 2, 4, 20, 10), gpm("a", 4, 6, 100, 100)}, 3, 4,
			SMUse{Fraction: 0.2, ActiveSeconds: 0.2, Occupancy: 0.1, Coverage: 1}},
		// A failed read leaves a gap: the mean is over what was seen and the SM-active seconds
		// extrapolate it over the window, with the coverage saying how much was seen.
		{"a gap", []GPMSample{gpm("a", 0, 2, 60, 30), gpm("a", 3, 4, 60, 30)}, 0, 4,
			SMUse{Fraction: 0.6, ActiveSeconds: 2.4, Occupancy: 0.3, Coverage: 0.75}},
		{"two GPUs", []GPMSample{gpm("a", 0, 10, 80, 40), gpm("b", 0, 10, 20, 0)}, 0, 10,
			SMUse{Fraction: 0.5, ActiveSeconds: 10, Occupancy: 0.2, Coverage: 1}},
		{"samples outside the window", []GPMSample{gpm("a", 20, 30, 80, 40)}, 0, 10, SMUse{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := SMUseOf(tc.samples, sec(tc.from), sec(tc.to))
			if !near(got.Fraction, tc.want.Fraction) || !near(got.ActiveSeconds, tc.want.ActiveSeconds) ||
				!near(got.Occupancy, tc.want.Occupancy) || !near(got.Coverage, tc.want.Coverage) {
				t.Fatalf("SMUseOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// smScore is a complete arm of one seed: jobs per GPU-hour from its makespan, SM fraction f.
func smScore(label string, arm record.Arm, seed uint64, p WorkloadProfile, makespan, f float64) Score {
	s := Score{Label: label, Arm: arm, Seed: seed, Workload: p, Jobs: 12, Completed: 12,
		Makespan: time.Duration(makespan * float64(time.Second))}
	s.JobsPerGPUHour = 12 / s.Makespan.Hours()
	if f >= 0 {
		s.SM = &SMScore{SMUse: SMUse{Fraction: f, ActiveSeconds: f * makespan, Coverage: 1}}
	}
	return s
}

func TestSetBounds(t *testing.T) {
	tests := []struct {
		name   string
		scores []Score
		// bound and share of the bound of the last score
		bound, of float64
	}{
		// The published prototype: exclusive runs at 58.7% SM activity, its packer 1.482x.
		{"the published prototype", []Score{
			smScore("exclusive", record.ArmExclusive, 1, ProfileBusy, 1000, 0.587),
			smScore("packed", record.ArmPacked, 1, ProfileBusy, 1000/1.482, 0.87),
		}, 1 / 0.587, 1.482 * 0.587},
		// Its definition: the exclusive run's SM-active seconds over the arm's wall time.
		{"S over the arm's wall", []Score{
			smScore("exclusive", record.ArmExclusive, 1, ProfileBusy, 400, 0.6),
			smScore("packed", record.ArmPacked, 1, ProfileBusy, 300, 0.8),
		}, 1 / 0.6, 240.0 / 300},
		// Two exclusive runs pool: (0.5*100 + 0.7*300) / 400 = 0.65.
		{"two exclusive runs, weighted by wall time", []Score{
			smScore("exclusive", record.ArmExclusive, 2, ProfileBusy, 100, 0.5),
			smScore("exclusive-2", record.ArmExclusive, 2, ProfileBusy, 300, 0.7),
			smScore("packed", record.ArmPacked, 2, ProfileBusy, 150, 0.9),
		}, 1 / 0.65, (12 / (150.0 / 3600)) / ((12/(100.0/3600) + 12/(300.0/3600)) / 2) * 0.65},
		{"an exclusive run without GPM gives no bound", []Score{
			smScore("exclusive", record.ArmExclusive, 1, ProfileBusy, 100, -1),
			smScore("packed", record.ArmPacked, 1, ProfileBusy, 50, 0.5),
		}, 0, 0},
		{"another profile's exclusive run is not the baseline", []Score{
			smScore("exclusive", record.ArmExclusive, 1, ProfileStartup, 100, 0.05),
			smScore("packed", record.ArmPacked, 1, ProfileBusy, 50, 0.5),
		}, 0, 0},
		{"another seed's exclusive run is not the baseline", []Score{
			smScore("exclusive", record.ArmExclusive, 2, ProfileBusy, 100, 0.6),
			smScore("packed", record.ArmPacked, 1, ProfileBusy, 50, 0.5),
		}, 0, 0},
		{"a startup run recorded before profiles shares the startup baseline", []Score{
			smScore("exclusive", record.ArmExclusive, 1, "", 100, 0.05),
			smScore("packed", record.ArmPacked, 1, ProfileStartup, 25, 0.2),
		}, 20, 0.2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			SetRatios(tc.scores)
			last := tc.scores[len(tc.scores)-1]
			if !near(last.SM.Bound, tc.bound) || !near(last.SM.OfBound, tc.of) {
				t.Fatalf("bound %.6f, of the bound %.6f; want %.6f, %.6f", last.SM.Bound, last.SM.OfBound, tc.bound, tc.of)
			}
		})
	}
	t.Run("the prototype reached 87% of its bound", func(t *testing.T) {
		s := []Score{smScore("exclusive", record.ArmExclusive, 1, ProfileBusy, 1000, 0.587),
			smScore("packed", record.ArmPacked, 1, ProfileBusy, 1000/1.482, 0.87)}
		SetRatios(s)
		if got := math.Round(100 * s[1].SM.OfBound); got != 87 {
			t.Fatalf("%.1f%% of the bound, want 87%%", 100*s[1].SM.OfBound)
		}
	})
}

func TestAANoiseAndJudge(t *testing.T) {
	scores := []Score{
		smScore("exclusive", record.ArmExclusive, 1, ProfileStartup, 200, -1),
		smScore("exclusive-2", record.ArmExclusive, 1, ProfileStartup, 210, -1),
		smScore("exclusive", record.ArmExclusive, 1, ProfileBusy, 400, -1),
		smScore("exclusive", record.ArmExclusive, 2, ProfileBusy, 400, -1),
		smScore("exclusive-2", record.ArmExclusive, 2, ProfileBusy, 400, -1),
	}
	cut := smScore("exclusive-3", record.ArmExclusive, 2, ProfileBusy, 100, -1)
	cut.Error = "deadline"
	scores = append(scores, cut)
	noise := AANoise(scores)
	if got := noise[noiseKey{1, ProfileStartup}]; !near(got, 0.05) {
		t.Errorf("seed 1 startup: noise %.4f, want 0.05 (210 s vs 200 s)", got)
	}
	if _, ok := noise[noiseKey{1, ProfileBusy}]; ok {
		t.Errorf("seed 1 busy has one exclusive run and no A/A, got %v", noise)
	}
	// Seed 1's busy runs are judged with the busy profile's noise from seed 2.
	if got := noiseOf(noise, scores[2]); got != 0 {
		t.Errorf("seed 1 busy: noise %v, want seed 2's 0", got)
	}
	if got := noiseOf(AANoise(scores[2:3]), scores[2]); got != -1 {
		t.Errorf("no A/A anywhere: noise %v, want -1", got)
	}
	if got, ok := noise[noiseKey{2, ProfileBusy}]; !ok || got != 0 {
		t.Errorf("seed 2 busy: noise %v, %v; want 0 (the cut-short run left out)", got, ok)
	}
	tests := []struct {
		a, b, noise float64
		want        string
	}{
		{1.59, 1.0, 0.05, VerdictFaster},
		{0.82, 1.0, 0.05, VerdictSlower},
		{1.04, 1.0, 0.05, VerdictEqual},
		{1.0, 1.04, 0.05, VerdictEqual},
		{1.05, 1.0, 0.05, VerdictFaster}, // a difference of exactly the noise is not less than it
		{1.0, 1.0, 0, VerdictEqual},
		{1.01, 1.0, 0, VerdictFaster},
		{1.01, 1.0, -1, VerdictUnknown},
		{0, 1.0, 0.05, VerdictNone},
		{math.NaN(), 1.0, 0.05, VerdictNone},
	}
	for _, tc := range tests {
		if got := Judge(tc.a, tc.b, tc.noise); got != tc.want {
			t.Errorf("Judge(%g, %g, noise %g) = %s, want %s", tc.a, tc.b, tc.noise, got, tc.want)
		}
	}
}

// The report calls an arm within the A/A noise of another equal, and says which noise it used.
func TestRenderSMVerdicts(t *testing.T) {
	scores := []Score{
		smScore("exclusive", record.ArmExclusive, 1, ProfileBusy, 400, 0.6),
		smScore("exclusive-2", record.ArmExclusive, 1, ProfileBusy, 420, 0.58),
		smScore("packed-isolated-warm", record.ArmPacked, 1, ProfileBusy, 300, 0.85),
		smScore("uncapped-retry", record.ArmUncappedRetry, 1, ProfileBusy, 305, 0.84),
	}
	SetRatios(scores)
	out := renderSM(scores)
	for _, want := range []string{
		"A/A noise (how far apart the exclusive runs are) of seed 1, busy profile: 5.0%",
		"packed-isolated-warm vs uncapped-retry: 1.017x, equal (A/A noise 5.0%)",
		"| exclusive-2 | 58.0% |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	// packed: ratio = (12/300) / mean(12/400, 12/420) = 1.366, faster beyond a 5% noise;
	// f = (240 + 243.6) / 820 = 0.590, bound 1/f = 1.70x, of the bound 1.366 * 0.590 = 80.6%.
	if !strings.Contains(out, "| packed-isolated-warm | 85.0% | 0.0% | 255.0 | 100.0% | 1.366x | 1.70x | 80.6% | faster |") {
		t.Errorf("packed row:\n%s", out)
	}
}

// A short A/A run (the seed's first 6 jobs, twice) gives the seed's noise but is no baseline of
// the whole queue; the combined report keeps it on rows of its own.
func TestShortAARun(t *testing.T) {
	short := func(label string, makespan float64) Score {
		s := smScore(label, record.ArmExclusive, 3, ProfileBusy, makespan, 0.6)
		s.Jobs, s.Completed = 6, 6
		s.JobsPerGPUHour = 6 / s.Makespan.Hours()
		return s
	}
	scores := []Score{
		short("exclusive", 100), short("exclusive-2", 110),
		smScore("exclusive", record.ArmExclusive, 3, ProfileBusy, 400, 0.6),
		smScore("packed", record.ArmPacked, 3, ProfileBusy, 300, 0.8),
	}
	SetRatios(scores)
	if !near(scores[3].Ratio, 400.0/300) {
		t.Errorf("packed ratio %.4f, want 400/300: the short runs must not enter the whole queue's baseline", scores[3].Ratio)
	}
	if n := AANoise(scores)[noiseKey{3, ProfileBusy}]; !near(n, 0.1) {
		t.Errorf("noise %.4f, want 0.10 from the short A/A", n)
	}
	if got := armRow(scores[0]); got != "exclusive (busy, 6 jobs)" {
		t.Errorf("row %q", got)
	}
}

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
