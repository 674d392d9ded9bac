package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/gpufrac/gpufrac/runner"
)

// UseOf is where an arm's makespan went, computed by the runner's own rule from the arm's
// attempts.
func UseOf(run ArmRun) runner.TimeUse {
	as := make([]runner.Attempt, len(run.Attempts))
	for i, a := range run.Attempts {
		as[i] = runner.Attempt{Job: a.Job, Start: a.Start, End: a.End, WholeGPU: a.WholeGPU, Probe: a.Probe, Outcome: a.Outcome}
	}
	return runner.UseOf(as)
}

// LoadRuns reads the runs.json written by WriteRaw.
func LoadRuns(path string) ([]ArmRun, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("runs: %w", err)
	}
	var runs []ArmRun
	if err := json.Unmarshal(data, &runs); err != nil {
		return nil, fmt.Errorf("runs %s: %w", path, err)
	}
	return runs, nil
}

// FillUse sets each score's Use from the run of the same label: summaries written before
// TimeUse existed get it from their raw attempts.
func FillUse(sum *Summary, runs []ArmRun) {
	byLabel := map[string]ArmRun{}
	for _, r := range runs {
		byLabel[r.Label] = r
	}
	for i, s := range sum.Scores {
		if r, ok := byLabel[s.Label]; ok {
			sum.Scores[i].Use = UseOf(r)
		}
	}
}

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
