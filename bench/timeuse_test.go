package bench

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/runner"
)

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
	if got := sum.Scores[1].Use; got != (runner.TimeUse{}) {
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
