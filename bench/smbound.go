package bench

import (
	"fmt"
	"math"
	"strings"

	"github.com/gpufrac/gpufrac/record"
)

// SMScore is an arm's use of the SMs and its distance to the SM bound.
//
// The bound: a queue's jobs need the SMs for the SM-active seconds their exclusive run measured
// (S, one job at a time, each with the whole GPU); however they are packed, the queue cannot end
// sooner than S, when the SMs would be active all the time. So no arm beats the exclusive run by
// more than W/S = 1/f, where W is the exclusive run's wall time and f its SM-active fraction:
// the SM bound. An arm's share of the bound is its ratio to the exclusive run times f, which is
// S over the arm's wall time when it completed every job. (The published prototype: f = 0.587,
// bound 1.70x, its packer 1.482x: 87% of its bound.) Packing may change how much SM time a job
// needs (contention makes it more, MPS can make it less), so the share is a measure, not a law.
type SMScore struct {
	SMUse
	// Bound is 1/f of the exclusive runs of the same seed and profile; 0 when they had no GPM.
	Bound float64 `json:"sm_bound,omitempty"`
	// OfBound is the arm's Ratio / Bound: 1 means the SMs did the exclusive run's work without
	// a moment idle.
	OfBound float64 `json:"of_sm_bound,omitempty"`
}

// baselineKey groups runs that share an exclusive baseline: one seed, one workload profile, one
// queue length (a short A/A run of the seed's first jobs is not the whole queue's baseline).
type baselineKey struct {
	seed    uint64
	profile WorkloadProfile
	jobs    int
}

func keyOf(s Score) baselineKey { return baselineKey{s.Seed, s.Workload.orStartup(), s.Jobs} }

// noiseKey groups runs that share an A/A noise: one seed, one profile, whatever the queue length
// of the runs that measured it.
type noiseKey struct {
	seed    uint64
	profile WorkloadProfile
}

func noiseKeyOf(s Score) noiseKey { return noiseKey{s.Seed, s.Workload.orStartup()} }

// SetBounds fills each score's SM bound and share of it from the complete exclusive runs of its
// seed and profile that have SM figures: f is their SM-active seconds over their wall time
// (weighted by wall time, as the ratio's baseline pools their jobs). Run it after SetRatios.
func SetBounds(scores []Score) {
	pooled := pooledFraction(scores, func(s Score) float64 {
		if s.SM == nil || s.SM.Coverage == 0 {
			return 0
		}
		return s.SM.Fraction
	})
	for i := range scores {
		sm := scores[i].SM
		if sm == nil {
			continue
		}
		sm.Bound, sm.OfBound = 0, 0
		f := pooled[keyOf(scores[i])]
		if f == 0 {
			continue
		}
		sm.Bound = 1 / f
		if scores[i].Ratio > 0 {
			sm.OfBound = scores[i].Ratio * f
		}
	}
}

// pooledFraction is, per baseline, the fraction (of its makespan) that frac gives each complete
// exclusive run, pooled over those runs weighted by their makespans: their SM-active or busy
// seconds over their wall time. A run frac gives 0 has no such figure and is left out.
func pooledFraction(scores []Score, frac func(Score) float64) map[baselineKey]float64 {
	part := map[baselineKey]float64{}
	wall := map[baselineKey]float64{}
	for _, s := range scores {
		f := frac(s)
		if s.Arm != record.ArmExclusive || s.unfinished() || f <= 0 || s.Makespan <= 0 {
			continue
		}
		part[keyOf(s)] += f * s.Makespan.Seconds()
		wall[keyOf(s)] += s.Makespan.Seconds()
	}
	for k := range part {
		part[k] /= wall[k]
	}
	return part
}

// AANoise is, for each seed and profile with at least two complete exclusive runs of the same
// queue, how far apart they are: the fastest's jobs per GPU-hour over the slowest's, minus one
// (the largest such spread when several queue lengths ran). Two runs of the same queue on the
// same machine differ by this much with nothing changed (A/A), so a difference smaller than it
// is no difference.
func AANoise(scores []Score) map[noiseKey]float64 {
	lo, hi := map[baselineKey]float64{}, map[baselineKey]float64{}
	n := map[baselineKey]int{}
	for _, s := range scores {
		if s.Arm != record.ArmExclusive || s.unfinished() || s.JobsPerGPUHour <= 0 {
			continue
		}
		k := keyOf(s)
		if n[k] == 0 || s.JobsPerGPUHour < lo[k] {
			lo[k] = s.JobsPerGPUHour
		}
		hi[k] = max(hi[k], s.JobsPerGPUHour)
		n[k]++
	}
	out := map[noiseKey]float64{}
	for k, c := range n {
		if c >= 2 {
			nk := noiseKey{k.seed, k.profile}
			out[nk] = max(out[nk], hi[k]/lo[k]-1)
			// Seed 0 holds the profile's largest noise over its seeds: a seed whose A/A did not
			// run in any call is judged with the noise the profile showed elsewhere.
			pk := noiseKey{0, k.profile}
			out[pk] = max(out[pk], hi[k]/lo[k]-1)
		}
	}
	return out
}

// Verdict of comparing two rates against the A/A noise.
const (
	VerdictEqual   = "equal"
	VerdictFaster  = "faster"
	VerdictSlower  = "slower"
	VerdictUnknown = "no A/A"
	VerdictNone    = "-" // a rate is missing: nothing to compare
)

// Judge compares rate a with rate b (jobs per GPU-hour, or ratios of them) given the A/A noise:
// they are equal when they differ by less than the noise (relative to the slower, as the noise
// is), else a is faster or slower. Identical rates are equal even with zero noise; a negative
// noise means there was no A/A measurement.
func Judge(a, b, noise float64) string {
	switch {
	case a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b):
		return VerdictNone
	case a == b:
		return VerdictEqual
	case noise < 0:
		return VerdictUnknown
	}
	if math.Max(a, b)/math.Min(a, b)-1 < noise {
		return VerdictEqual
	}
	if a > b {
		return VerdictFaster
	}
	return VerdictSlower
}

// noiseOf is the A/A noise of a score's seed and profile, else its profile's largest over the
// other seeds; -1 when the profile's was never measured.
func noiseOf(noise map[noiseKey]float64, s Score) float64 {
	if v, ok := noise[noiseKeyOf(s)]; ok {
		return v
	}
	if v, ok := noise[noiseKey{0, s.Workload.orStartup()}]; ok {
		return v
	}
	return -1
}

func fmtNoise(v float64) string {
	if v < 0 {
		return "not measured"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

func fmtPct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

// renderSM is the SM table of one invocation and the A/A verdicts: every arm against the
// exclusive baseline, and every other arm against each uncapped-retry arm (what a team with a
// retry loop gets without gpufrac).
func renderSM(scores []Score) string {
	var b strings.Builder
	noise := AANoise(scores)
	b.WriteString("| arm | SM active (GPM) | SM occupancy | SM-active s | GPM coverage | vs exclusive | SM bound | of the bound | vs exclusive, given the A/A noise |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range scores {
		if s.SM == nil {
			fmt.Fprintf(&b, "| %s | - | - | - | - | %s | - | - | %s |\n", s.Label, fmtRatio(s), Judge(s.Ratio, 1, noiseOf(noise, s)))
			continue
		}
		bound, of := "-", "-"
		if s.SM.Bound > 0 {
			bound = fmt.Sprintf("%.2fx", s.SM.Bound)
		}
		if s.SM.OfBound > 0 {
			of = fmtPct(s.SM.OfBound)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.1f | %s | %s | %s | %s | %s |\n", s.Label, fmtPct(s.SM.Fraction), fmtPct(s.SM.Occupancy),
			s.SM.ActiveSeconds, fmtPct(s.SM.Coverage), fmtRatio(s), bound, of, Judge(s.Ratio, 1, noiseOf(noise, s)))
	}
	var lines []string
	seen := map[noiseKey]bool{}
	for _, s := range scores {
		if k := noiseKeyOf(s); !seen[k] {
			seen[k] = true
			from := ""
			if _, own := noise[k]; !own && noiseOf(noise, s) >= 0 {
				from = " (the profile's, from another seed's A/A)"
			}
			lines = append(lines, fmt.Sprintf("A/A noise (how far apart the exclusive runs are) of seed %d, %s profile: %s%s", k.seed, k.profile, fmtNoise(noiseOf(noise, s)), from))
		}
	}
	for _, s := range scores {
		if s.Arm == record.ArmExclusive {
			continue
		}
		for _, r := range scores {
			if r.Arm != record.ArmUncappedRetry || r.Label == s.Label || keyOf(r) != keyOf(s) || s.JobsPerGPUHour <= 0 || r.JobsPerGPUHour <= 0 {
				continue
			}
			lines = append(lines, fmt.Sprintf("%s vs %s: %.3fx, %s (A/A noise %s)", s.Label, r.Label,
				s.JobsPerGPUHour/r.JobsPerGPUHour, Judge(s.JobsPerGPUHour, r.JobsPerGPUHour, noiseOf(noise, s)), fmtNoise(noiseOf(noise, s))))
		}
	}
	lines = append(lines, memLines(scores)...)
	lines = append(lines, busyLines(scores)...)
	for _, l := range lines {
		fmt.Fprintf(&b, "\n- %s", l)
	}
	if len(lines) > 0 {
		b.WriteString("\n")
	}
	return b.String()
}

// renderJobSM is each job's SM use in the exclusive arms, where it had the GPU alone; "" when
// no exclusive arm has GPM figures.
func renderJobSM(scores []Score) string {
	var b strings.Builder
	for _, s := range scores {
		if s.Arm != record.ArmExclusive {
			continue
		}
		for _, j := range s.PerJob {
			if j.SM == nil {
				continue
			}
			if b.Len() == 0 {
				b.WriteString("| arm | job | template | wall | SM active (GPM) | SM occupancy | SM-active s |\n|---|---|---|---|---|---|---|\n")
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %.1f |\n", s.Label, j.Job, j.Template, fmtDur(j.Wall),
				fmtPct(j.SM.Fraction), fmtPct(j.SM.Occupancy), j.SM.ActiveSeconds)
		}
	}
	return b.String()
}

// renderVerdicts compares, seed by seed, each arm's mean ratio with the uncapped-retry arm's of
// the same profile, and calls them equal when they differ by less than that seed's A/A noise.
func renderVerdicts(rows []string, seeds []uint64, cells map[string]map[uint64][]Score, noise map[noiseKey]float64) string {
	meanRatio := func(runs []Score) float64 {
		var sum float64
		n := 0
		for _, s := range runs {
			if !s.unfinished() && s.Ratio > 0 {
				sum += s.Ratio
				n++
			}
		}
		if n == 0 {
			return 0
		}
		return sum / float64(n)
	}
	var lines []string
	for _, retry := range rows {
		for _, seed := range seeds {
			rr := cells[retry][seed]
			if len(rr) == 0 || rr[0].Arm != record.ArmUncappedRetry {
				continue
			}
			k := keyOf(rr[0])
			for _, row := range rows {
				runs := cells[row][seed]
				if row == retry || len(runs) == 0 || runs[0].Arm == record.ArmExclusive || keyOf(runs[0]) != k {
					continue
				}
				a, b := meanRatio(runs), meanRatio(rr)
				if a == 0 || b == 0 {
					continue
				}
				nz := noiseOf(noise, rr[0])
				lines = append(lines, fmt.Sprintf("seed %d: %s vs %s: %.3fx, %s (A/A noise %s)", seed, row, retry, a/b, Judge(a, b, nz), fmtNoise(nz)))
			}
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return "\n- " + strings.Join(lines, "\n- ") + "\n"
}

// renderSMCombined is each arm's share of its SM bound per seed ("" when no run has GPM figures).
func renderSMCombined(rows []string, seeds []uint64, cells map[string]map[uint64][]Score) string {
	var b strings.Builder
	for _, row := range rows {
		line := fmt.Sprintf("| %s |", row)
		seen := false
		for _, seed := range seeds {
			var parts []string
			for _, s := range cells[row][seed] {
				if s.SM == nil {
					continue
				}
				seen = true
				p := fmtPct(s.SM.Fraction) + " active"
				if s.SM.OfBound > 0 {
					p += fmt.Sprintf(", %s of %.2fx", fmtPct(s.SM.OfBound), s.SM.Bound)
				}
				if bb := s.Busy; bb != nil && bb.Binds && bb.OfBound > 0 && s.Arm != record.ArmExclusive {
					p += fmt.Sprintf(" (time-slicing: %s of %.2fx)", fmtPct(bb.OfBound), bb.Bound)
				}
				parts = append(parts, p)
			}
			if len(parts) == 0 {
				parts = []string{"-"}
			}
			line += " " + strings.Join(parts, "; ") + " |"
		}
		if seen {
			b.WriteString(line + "\n")
		}
	}
	if b.Len() == 0 {
		return ""
	}
	head := "\nThe SMs (GPM): each run's SM-active fraction, and its share of the SM bound (the exclusive runs' 1 / SM-active fraction); in brackets, a time-sliced arm's share of the time-slicing bound (the exclusive runs' 1 / GPU-busy fraction: without MPS one job's kernels run at a time):\n\n| arm |"
	sep := "|---|"
	for _, seed := range seeds {
		head += fmt.Sprintf(" seed %d |", seed)
		sep += "---|"
	}
	return head + "\n" + sep + "\n" + b.String()
}
