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
		if lacksGPUs(s) {
			fillJobs(&sum.Scores[i], r)
		}
	}
	// Bounds of a summary written before the memory and time-slicing bounds: its ratios stand
	// as they were scored, with the reference run of an earlier call (--ref) among the baselines.
	pool := slices.Clone(sum.Scores)
	if sum.Ref != nil {
		pool = append(pool, *sum.Ref)
	}
	SetMemBounds(pool)
	SetBusyBounds(pool)
	for i := range sum.Scores {
		sum.Scores[i].Mem = pool[i].Mem
		sum.Scores[i].Busy = pool[i].Busy
	}
	return sum, nil
}

func lacksRecords(s Score) bool { return lacksUse(s) || lacksLoss(s) || lacksGPUs(s) }

// lacksGPUs: an arm that ran, scored before the memory bound's inputs were kept.
func lacksGPUs(s Score) bool { return s.Makespan > 0 && s.GPUs == 0 }

// fillJobs gives a score written before the memory bound what it needs from its run: the
// jobs' guarantee shares, the GPUs used, and the exclusive arms' job times, which were kept only
// with GPM figures.
func fillJobs(s *Score, r ArmRun) {
	bigJobs(r, s.PerJob)
	s.GPUs = gpusOf(r)
	if s.Arm != record.ArmExclusive {
		return
	}
	final := finalAttempts(r)
	for i, j := range s.PerJob {
		if a, ok := final[j.Job]; ok && j.Wall == 0 {
			s.PerJob[i].Wall = a.End.Sub(a.Start)
		}
	}
}

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
