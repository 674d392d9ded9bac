package bench

import (
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/record"
)

// Summaries written before TimeUse existed get it from runs.json, matched by label; a summary
// that has it keeps what it stored.
func TestLoadResultsFillsOldSummaries(t *testing.T) {
	dir := t.TempDir()
	q := Draw(1)
	run := exclusiveRun(q)
	sum := Summary{Seed: 1, Scores: []Score{{Label: "exclusive", Makespan: 120 * time.Second}, {Label: "not-in-runs", Makespan: time.Second}}}
	if err := WriteRaw(dir, sum, []ArmRun{run}); err != nil {
		t.Fatal(err)
	}
	sum, err := LoadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := sum.Scores[0].Use; got.MeanRunning != 1 || got.Whole != 120*time.Second || got.Idle != 0 {
		t.Fatalf("exclusive use %+v, want 1 job running, 120 s alone, none idle", got)
	}
	if got := sum.Scores[1].Use; got != (record.TimeUse{}) {
		t.Fatalf("a score with no run got %+v", got)
	}
	out := RenderRun(sum)
	if want := "| exclusive | 120.0 s | 1.00 | 120.0 s | 120.0 s | 0.0 s | 0 | 0 | 0% |"; !strings.Contains(out, want) {
		t.Fatalf("rendered run lacks %q:\n%s", want, out)
	}
	if l := sum.Scores[0].Loss; l == nil || l.Innocent != 0 || len(l.Lost) != 0 || len(l.ReRun) != 0 {
		t.Fatalf("exclusive loss %+v, want nothing lost", l)
	}
	if sum.Scores[1].Loss != nil {
		t.Fatalf("a score with no run got a loss %+v", sum.Scores[1].Loss)
	}

	// A summary written before Loss existed gets it from runs.json and the jobs' verdicts.
	packed := packedRun(q)
	scored := ScoreRun(packed, accept)
	want := scored.Loss
	scored.Loss = nil
	if err := WriteRaw(dir, Summary{Seed: 1, Scores: []Score{scored}}, []ArmRun{packed}); err != nil {
		t.Fatal(err)
	}
	back, err := LoadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Scores[0].Loss; got == nil || got.Innocent != want.Innocent || !sameSet(got.Lost, want.Lost) || !sameSet(got.ReRun, want.ReRun) {
		t.Fatalf("recomputed loss %+v, want %+v", got, want)
	}

	stored := Summary{Seed: 1, Scores: []Score{{Label: "exclusive", Makespan: 120 * time.Second, Use: record.TimeUse{MeanRunning: 2, Probes: 3}}}}
	if err := WriteRaw(dir, stored, []ArmRun{run}); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadResults(dir); err != nil || got.Scores[0].Use != stored.Scores[0].Use {
		t.Fatalf("a stored TimeUse was replaced: %+v, %v", got.Scores[0].Use, err)
	}

	runs := filepath.Join(dir, "runs.json")
	sum.Scores[0].Use = record.TimeUse{}
	if err := WriteRaw(dir, sum, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(runs); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadResults(dir); err != nil || got.Scores[0].Use != (record.TimeUse{}) {
		t.Fatalf("without runs.json: %+v, %v; want the summary as stored", got.Scores, err)
	}
	if err := os.WriteFile(runs, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadResults(dir); err == nil || !strings.Contains(err.Error(), runs) {
		t.Fatalf("broken runs.json: %v, want an error naming %s", err, runs)
	}
}

// A committed run keeps its runs.json gzipped (bench-collect.sh): LoadResults reads it so,
// and a damaged archive is an error that names it.
func TestLoadResultsReadsGzippedRuns(t *testing.T) {
	dir := t.TempDir()
	run := exclusiveRun(Draw(1))
	if err := WriteRaw(dir, Summary{Seed: 1, Scores: []Score{{Label: "exclusive", Makespan: 120 * time.Second}}}, []ArmRun{run}); err != nil {
		t.Fatal(err)
	}
	runs := filepath.Join(dir, "runs.json")
	raw, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(runs + ".gz")
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	if _, err := zw.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(runs); err != nil {
		t.Fatal(err)
	}
	sum, err := LoadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := sum.Scores[0].Use; got.MeanRunning != 1 || got.Whole != 120*time.Second {
		t.Fatalf("use from runs.json.gz %+v, want 1 job running, 120 s alone", got)
	}
	if err := os.WriteFile(runs+".gz", raw, 0o644); err != nil { // not gzip
		t.Fatal(err)
	}
	if _, err := LoadResults(dir); err == nil || !strings.Contains(err.Error(), runs+".gz") {
		t.Fatalf("damaged runs.json.gz: %v, want an error naming %s.gz", err, runs)
	}
}
