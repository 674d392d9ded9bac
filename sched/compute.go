package sched

import (
	"maps"
	"slices"
)

// The compute budget (policy.Policy.SMBudgetPercent): with memory shared safely, the SMs are
// what co-located jobs contend for next. A GPU admits a job of the packed rule while the SM
// demands of the jobs running there (each template's SMActivePercent, measured alone) plus the
// new one's stay within the budget. A GPU with nothing running admits whatever it is asked, so
// no job waits for ever on the budget: a job whose demand alone exceeds it runs alone.
//
// A template whose demand is unknown counts as the median of the demands known in the run: most
// likely it is a job like the others, and the median is not moved by the one decode-bound job or
// the leaker. Counting it as 0 would let unmeasured jobs pile onto a busy GPU; counting it as
// 100 would run every cold template nearly alone. With no demand known at all nothing is
// limited: the budget has nothing to sum.

// smBudget is the run's compute budget in percent, 0 when off. Only the packed rule has one:
// the baselines are what it is measured against.
func (s *Sched) smBudget() float64 {
	if s.adm != nil {
		return 0
	}
	return s.pol.SMBudgetPercent
}

// SMDemand is the SM demand a job of template t counts for against the budget, and whether it
// is measured; a template not measured counts as the median of those that are (0 when none is).
func (s *Sched) SMDemand(t string) (float64, bool) {
	if d, ok := s.smActive[t]; ok {
		return d, true
	}
	return s.smMedian(), false
}

func (s *Sched) smMedian() float64 { return median(slices.Collect(maps.Values(s.smActive))) }

// median is the middle of v (the mean of the two middles of an even count; 0 of none). It
// sorts v.
func median[T ~uint64 | ~float64](v []T) T {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// smFits says whether a job of template t may start on GPU g under the compute budget.
func (s *Sched) smFits(g, t string) bool {
	b := s.smBudget()
	if b == 0 || s.running[g] == 0 {
		return true
	}
	d, _ := s.SMDemand(t)
	// A small tolerance keeps sums of decimal percentages (50.1 + 49.9) from refusing by a hair.
	return s.smOn[g]+d <= b+1e-9
}

// smStart and smEnd count a launch's demand on its GPU while it runs. The demand is fixed at
// admission (Launch.SMDemand): a median that moves later must not unbalance the sum.
func (s *Sched) smStart(l *Launch) {
	l.SMDemand, _ = s.SMDemand(l.Job.Template)
	s.smOn[l.GPU] += l.SMDemand
}

func (s *Sched) smEnd(l *Launch) {
	s.smOn[l.GPU] -= l.SMDemand
	if s.running[l.GPU] == 0 {
		delete(s.smOn, l.GPU)
	}
}

// SMOn is the SM demand counted on GPU g now: the jobs running there, in percent.
func (s *Sched) SMOn(g string) float64 { return s.smOn[g] }

// LearnedSM records template t's SM-active share alone, measured during the run (percent): its
// jobs count for it from now on, and it moves the median that unmeasured templates count for.
func (s *Sched) LearnedSM(t string, pct float64) { s.smActive[t] = pct }
