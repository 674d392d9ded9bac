package bench

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestUseOf(t *testing.T) {
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	att := func(job string, from, to float64, outcome string, whole, probe bool) Attempt {
		return Attempt{Job: job, Start: at(from), End: at(to), Outcome: outcome, WholeGPU: whole, Probe: probe}
	}
	for _, tc := range []struct {
		name     string
		attempts []Attempt
		want     TimeUse
	}{
		{name: "no attempts"},
		{
			name:     "exclusive: back to back, each job alone",
			attempts: []Attempt{att("a", 0, 10, OutcomeOK, true, false), att("b", 10, 30, OutcomeOK, true, false)},
			want:     TimeUse{MeanRunning: 1, Whole: sec(30), Few: sec(30)},
		},
		{
			name:     "a gap between two attempts is time no job ran",
			attempts: []Attempt{att("a", 0, 10, OutcomeOK, true, false), att("b", 12, 20, OutcomeOK, true, false)},
			want:     TimeUse{MeanRunning: 18.0 / 20, Whole: sec(18), Few: sec(18), Idle: sec(2)},
		},
		{
			// 0-10: three jobs, one of them an in-place probe that breaks its cap at 10;
			// 10-20: two; 20-30: the breaker re-run alone with the whole GPU.
			name: "packed: an in-place probe breaks its cap and re-runs alone",
			attempts: []Attempt{
				att("a", 0, 20, OutcomeOK, false, false),
				att("b", 0, 20, OutcomeOK, false, false),
				att("leak", 0, 10, OutcomeCapViolation, false, true),
				att("leak", 20, 30, OutcomeOK, true, false),
			},
			want: TimeUse{MeanRunning: (3*10 + 2*10 + 1*10) / 30.0, Whole: sec(10), Few: sec(20), Probes: 1, ReRuns: 1},
		},
		{
			name: "a probe alone is not a re-run",
			attempts: []Attempt{
				att("p", 0, 15, OutcomeProbe, true, true),
				att("p", 15, 25, OutcomeOK, false, false),
				att("q", 15, 25, OutcomeOK, false, false),
				att("r", 15, 25, OutcomeOK, false, false),
			},
			want: TimeUse{MeanRunning: (15 + 3*10) / 25.0, Whole: sec(15), Few: sec(15), Probes: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := UseOf(ArmRun{Attempts: tc.attempts})
			if math.Abs(got.MeanRunning-tc.want.MeanRunning) > 1e-9 {
				t.Errorf("mean running %v, want %v", got.MeanRunning, tc.want.MeanRunning)
			}
			got.MeanRunning = tc.want.MeanRunning
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Summaries written before TimeUse existed get it from runs.json, matched by label.
func TestFillUseFromRuns(t *testing.T) {
	dir := t.TempDir()
	q := Draw(1)
	run := exclusiveRun(q)
	sum := Summary{Seed: 1, Scores: []Score{{Label: "exclusive"}, {Label: "not-in-runs"}}}
	if err := WriteRaw(dir, sum, []ArmRun{run}); err != nil {
		t.Fatal(err)
	}
	runs, err := LoadRuns(filepath.Join(dir, "runs.json"))
	if err != nil {
		t.Fatal(err)
	}
	FillUse(&sum, runs)
	if got := sum.Scores[0].Use; got.MeanRunning != 1 || got.Whole != 120*time.Second || got.Idle != 0 {
		t.Fatalf("exclusive use %+v, want 1 job running, 120 s alone, none idle", got)
	}
	if got := sum.Scores[1].Use; got != (TimeUse{}) {
		t.Fatalf("a score with no run got %+v", got)
	}
	out := RenderRun(sum)
	if want := "| exclusive | - | 1.00 | 120.0 s | 120.0 s | 0.0 s | 0 | 0 | 0% |"; !strings.Contains(out, want) {
		t.Fatalf("rendered run lacks %q:\n%s", want, out)
	}

	if _, err := LoadRuns(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing runs.json: %v, want a not-exist error", err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadRuns(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("broken runs.json: %v, want an error naming %s", err, bad)
	}
}
