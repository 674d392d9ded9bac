package bench

import (
	"fmt"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
)

// BusyBound is the most an arm whose jobs share GPUs by time-slicing can gain over the
// exclusive run.
//
// Without MPS a GPU runs the kernels of one process at a time: it switches between their
// contexts. So the seconds in which NVML saw a kernel running (GPU busy, its utilization) add
// up across the jobs however they are packed: an arm needs at least the busy seconds of its
// exclusive run, B = b·W (b the exclusive run's busy fraction, W its wall time), and beats it
// by at most W/B = 1/b. The SM bound (SMScore) is higher: it also counts the SMs a running
// kernel leaves idle, which only another job's kernels running at once (MPS) can use. The H200
// bears this out: in the 16 complete time-sliced arms measured from 2026-12-01 to 2026-12-03
// beside an exclusive run of their seed (both profiles, seeds 1-3), none had fewer busy seconds
// than that run, none 15% more (busy seed 1 at 8 x 1024 tokens: 247 s exclusive, 259 s packed
// in 300 s of wall), so 1/b bounds what packing without MPS gains in practice too.
type BusyBound struct {
	// Bound is 1/b of the exclusive runs of the same seed and profile.
	Bound float64 `json:"busy_bound"`
	// OfBound is the arm's Ratio over Bound.
	OfBound float64 `json:"of_busy_bound,omitempty"`
	// Binds is false for an arm in mps mode, whose jobs' kernels may run at once.
	Binds bool `json:"binds"`
}

// SetBusyBounds fills each score's time-slicing bound from the complete exclusive runs of its
// seed and profile that sampled GPU utilization (b weighted by wall time, as SetBounds pools
// the SM fraction). Run it after SetRatios.
func SetBusyBounds(scores []Score) {
	pooled := pooledFraction(scores, func(s Score) float64 { return s.BusyFraction })
	for i := range scores {
		s := &scores[i]
		s.Busy = nil
		b := pooled[keyOf(*s)]
		if b == 0 {
			continue
		}
		bb := BusyBound{Bound: 1 / b, Binds: s.Mode != string(policy.ModeMPS)}
		if s.Ratio > 0 {
			bb.OfBound = s.Ratio * b
		}
		s.Busy = &bb
	}
}

// busyLines are the report's lines on the time-slicing bounds of the arms that are not
// exclusive (an exclusive run's share of it is its own busy fraction, in the first table).
func busyLines(scores []Score) []string {
	var lines []string
	for _, s := range scores {
		bb := s.Busy
		if bb == nil || s.Arm == record.ArmExclusive {
			continue
		}
		of := ""
		if bb.OfBound > 0 {
			of = fmt.Sprintf("; it reached %s (%s of it)", fmtRatio(s), fmtPct(bb.OfBound))
		}
		why := "without MPS a GPU runs one job's kernels at a time, so"
		if !bb.Binds {
			why = "it ran under MPS, where kernels of several jobs run at once, so this does not bind it; time-sliced,"
		}
		lines = append(lines, fmt.Sprintf("time-slicing bound of %s: the exclusive run kept its GPU busy (a kernel running) %s of its time; %s no arm beats it by more than %.2fx%s",
			s.Label, fmtPct(1/bb.Bound), why, bb.Bound, of))
	}
	return lines
}
