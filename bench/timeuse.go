package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpufrac/gpufrac/record"
)

// UseOf is where an arm's makespan went, by the records' rule (record.UseOf).
func UseOf(run ArmRun) record.TimeUse { return record.UseOf(run.Attempts) }

// LoadResults reads the summary.json of a results directory written by WriteRaw. A summary
// written before TimeUse or Loss existed gets them from the directory's runs.json, when there
// is one (the jobs' verdicts it needs are in the summary).
func LoadResults(dir string) (Summary, error) {
	sum, err := LoadSummary(filepath.Join(dir, "summary.json"))
	if err != nil || !slices.ContainsFunc(sum.Scores, lacksRecords) {
		return sum, err
	}
	runs, err := readJSON[[]ArmRun](filepath.Join(dir, "runs.json"), "runs")
	if errors.Is(err, os.ErrNotExist) {
		return sum, nil
	}
	if err != nil {
		return Summary{}, err
	}
	byLabel := map[string]ArmRun{}
	for _, r := range runs {
		byLabel[r.Label] = r
	}
	for i, s := range sum.Scores {
		r, ok := byLabel[s.Label]
		if !ok {
			continue
		}
		if lacksUse(s) {
			sum.Scores[i].Use = UseOf(r)
		}
		if lacksLoss(s) {
			sum.Scores[i].Loss = lossOf(r, sum.Scores[i].PerJob)
		}
	}
	return sum, nil
}

func lacksRecords(s Score) bool { return lacksUse(s) || lacksLoss(s) }

// lacksUse: an arm that ran but whose score has no TimeUse (every run with attempts has jobs
// running some of the time).
func lacksUse(s Score) bool { return s.Makespan > 0 && s.Use == (record.TimeUse{}) }

// lacksLoss: an arm that ran, scored before Loss existed.
func lacksLoss(s Score) bool { return s.Makespan > 0 && s.Loss == nil }

// renderUse is the "where the time went" table of one invocation.
func renderUse(scores []Score) string {
	var b strings.Builder
	b.WriteString("| arm | time | jobs running (mean) | a job alone with the GPU | at most 2 jobs running | no job running | probes | re-runs alone | GPU busy |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range scores {
		u := s.Use
		fmt.Fprintf(&b, "| %s | %s | %.2f | %.1f s | %.1f s | %.1f s | %d | %d | %.0f%% |\n", s.Label, fmtDur(s.Makespan),
			u.MeanRunning, u.Whole.Seconds(), u.Few.Seconds(), u.Idle.Seconds(), u.Probes, u.ReRuns, 100*s.BusyFraction)
	}
	return b.String()
}
