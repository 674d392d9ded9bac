package record

import (
	"sort"
	"time"
)

// TimeUse is where a run's makespan went, from its attempts alone: what explains a packing
// ratio. On several GPUs the figures are over all of them together.
type TimeUse struct {
	// MeanRunning is the time-weighted mean number of attempts running over the makespan;
	// MostRunning the most that ran at one moment (one that ends as another starts is not two).
	MeanRunning float64 `json:"mean_running"`
	MostRunning int     `json:"most_running"`
	// Whole is the time some attempt held a GPU whole (a probe alone, a re-run after a broken
	// cap, every job of the exclusive arm): time in which nothing else could run beside it.
	Whole time.Duration `json:"whole_gpu_ns"`
	// Few is the time at most two attempts ran (Whole included): the GPU mostly waiting on
	// start-up, a drain, or one long job.
	Few time.Duration `json:"at_most_two_ns"`
	// Idle is the time no attempt ran at all: the runner's own gaps between attempts.
	Idle time.Duration `json:"idle_ns"`
	// Probes counts probe attempts (alone or in place) that measured their template: ended
	// ok, at their window, or at a broken cap (which raises the footprint); one that failed or
	// was stopped measured nothing. ReRuns counts the whole-GPU attempts that followed a broken
	// cap.
	Probes int `json:"probes"`
	ReRuns int `json:"reruns"`
}

// UseOf computes the TimeUse of a run's attempts. Only Job, Start, End, WholeGPU, Probe and
// Outcome are read.
func UseOf(attempts []Attempt) TimeUse {
	type edge struct {
		at           time.Time
		delta, whole int
	}
	var u TimeUse
	var edges []edge
	broke := map[string]bool{}
	as := append([]Attempt(nil), attempts...)
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
		if a.Probe && (a.Outcome == OutcomeOK || a.Outcome == OutcomeProbe || a.Outcome == OutcomeCapViolation) {
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
		u.MostRunning = max(u.MostRunning, running)
		last = e.at
	}
	if span := last.Sub(first); span > 0 {
		u.MeanRunning = weighted / span.Seconds()
	}
	return u
}
