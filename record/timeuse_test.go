package record

import (
	"math"
	"testing"
	"time"
)

func TestUseOf(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	att := func(job string, from, to float64, outcome Outcome, whole, probe bool) Attempt {
		return Attempt{Job: job, Start: at(from), End: at(to), Outcome: outcome, WholeGPU: whole, Probe: probe}
	}
	for _, tc := range []struct {
		name     string
		attempts []Attempt
		want     TimeUse
	}{
		{name: "no attempts"},
		{
			name:     "exclusive: back to back, each job alone",
			attempts: []Attempt{att("a", 0, 10, OutcomeOK, true, false), att("b", 10, 30, OutcomeOK, true, false)},
			want:     TimeUse{MeanRunning: 1, MostRunning: 1, Whole: sec(30), Few: sec(30)},
		},
		{
			name:     "a gap between two attempts is time no job ran",
			attempts: []Attempt{att("a", 0, 10, OutcomeOK, true, false), att("b", 12, 20, OutcomeOK, true, false)},
			want:     TimeUse{MeanRunning: 18.0 / 20, MostRunning: 1, Whole: sec(18), Few: sec(18), Idle: sec(2)},
		},
		{
			// 0-10: three jobs, one of them an in-place probe that breaks its cap at 10;
			// 10-20: two; 20-30: the breaker re-run alone with the whole GPU.
			name: "packed: an in-place probe breaks its cap and re-runs alone",
			attempts: []Attempt{
				att("a", 0, 20, OutcomeOK, false, false),
				att("b", 0, 20, OutcomeOK, false, false),
				att("leak", 0, 10, OutcomeCapViolation, false, true),
				att("leak", 20, 30, OutcomeOK, true, false),
			},
			want: TimeUse{MeanRunning: (3*10 + 2*10 + 1*10) / 30.0, MostRunning: 3, Whole: sec(10), Few: sec(20), Probes: 1, ReRuns: 1},
		},
		{
			name: "a probe alone is not a re-run",
			attempts: []Attempt{
				att("p", 0, 15, OutcomeProbe, true, true),
				att("p", 15, 25, OutcomeOK, false, false),
				att("q", 15, 25, OutcomeOK, false, false),
				att("r", 15, 25, OutcomeOK, false, false),
			},
			want: TimeUse{MeanRunning: (15 + 3*10) / 25.0, MostRunning: 3, Whole: sec(15), Few: sec(15), Probes: 1},
		},
		{
			// A probe that failed, could not start or was stopped measured nothing: the
			// summary's "N probe(s) measured a template" counted them (3 where 1 had).
			name: "only probes that measured count",
			attempts: []Attempt{
				att("ok", 0, 10, OutcomeOK, false, true),
				att("failed", 0, 10, OutcomeFailed, false, true),
				att("canceled", 0, 10, OutcomeCanceled, false, true),
			},
			want: TimeUse{MeanRunning: 3, MostRunning: 3, Probes: 1},
		},
		{
			// b starts as a ends and c spans the handover: never more than two at once.
			name: "a handover at one instant is not two jobs running",
			attempts: []Attempt{
				att("a", 0, 10, OutcomeOK, false, false),
				att("b", 10, 20, OutcomeOK, false, false),
				att("c", 5, 15, OutcomeOK, false, false),
			},
			want: TimeUse{MeanRunning: 30.0 / 20, MostRunning: 2, Few: sec(20)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := UseOf(tc.attempts)
			if math.Abs(got.MeanRunning-tc.want.MeanRunning) > 1e-9 {
				t.Errorf("mean running %v, want %v", got.MeanRunning, tc.want.MeanRunning)
			}
			got.MeanRunning = tc.want.MeanRunning
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
