package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// TimeUse is where an arm's makespan went, from its attempts alone: the figures a missed target
// is explained with. On a machine of several GPUs the figures are over all of them together.
type TimeUse struct {
	// MeanRunning is the time-weighted mean number of attempts running over the makespan.
	MeanRunning float64 `json:"mean_running"`
	// Whole is the time some attempt held a GPU whole (a probe alone, a re-run after a broken
	// cap, every exclusive job): time in which nothing else could run beside it.
	Whole time.Duration `json:"whole_gpu_ns"`
	// Few is the time at most two attempts ran (Whole included): the GPU mostly waiting on
	// start-up, a drain, or one long job.
	Few time.Duration `json:"at_most_two_ns"`
	// Idle is the time no attempt ran at all: the runner's own gaps between attempts.
	Idle time.Duration `json:"idle_ns"`
	// Probes and ReRuns count the probe attempts (alone or in place) and the whole-GPU attempts
	// that followed a broken cap.
	Probes int `json:"probes"`
	ReRuns int `json:"reruns"`
}

// UseOf computes an arm's TimeUse.
func UseOf(run ArmRun) TimeUse {
	type edge struct {
		at    time.Time
		delta int
		whole int
	}
	var u TimeUse
	var edges []edge
	broke := map[string]bool{}
	as := append([]Attempt(nil), run.Attempts...)
	sort.SliceStable(as, func(i, j int) bool { return as[i].Start.Before(as[j].Start) })
	for _, a := range as {
		if !a.End.After(a.Start) {
			continue
		}
		w := 0
		if a.WholeGPU {
			w = 1
		}
		edges = append(edges, edge{a.Start, 1, w}, edge{a.End, -1, -w})
		if a.Probe {
			u.Probes++
		}
		if a.WholeGPU && !a.Probe && broke[a.Job] {
			u.ReRuns++
		}
		if a.Outcome == OutcomeCapViolation {
			broke[a.Job] = true
		}
	}
	if len(edges) == 0 {
		return u
	}
	// Ends before starts at the same instant: a job that hands over to the next is not counted
	// as two running at once.
	sort.SliceStable(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta
		}
		return edges[i].at.Before(edges[j].at)
	})
	var running, whole int
	var weighted float64
	first, last := edges[0].at, edges[0].at
	for _, e := range edges {
		d := e.at.Sub(last)
		weighted += float64(running) * d.Seconds()
		switch {
		case running == 0:
			u.Idle += d
		case running <= 2:
			u.Few += d
		}
		if whole > 0 {
			u.Whole += d
		}
		running += e.delta
		whole += e.whole
		last = e.at
	}
	if span := last.Sub(first); span > 0 {
		u.MeanRunning = weighted / span.Seconds()
	}
	return u
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
