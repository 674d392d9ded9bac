package bench

import (
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
)

// busyScore is an arm of seed 1, busy profile, that kept its GPU busy b of its makespan.
func busyScore(label string, arm record.Arm, mode policy.Mode, makespan, b float64) Score {
	s := smScore(label, arm, 1, ProfileBusy, makespan, -1)
	s.Mode = string(mode)
	s.BusyFraction = b
	return s
}

func TestSetBusyBounds(t *testing.T) {
	tests := []struct {
		name   string
		scores []Score
		// of the last score; bound 0: none
		bound, of float64
		binds     bool
	}{
		// busy seed 1 on the H200 (2026-12-03 19:52-20:08 UTC): exclusive 409.4 s at 60% busy,
		// packed 299.6 s at 86%: 1.67x, and the packed arm reached 1.366x of it.
		{"busy seed 1", []Score{
			busyScore("exclusive", record.ArmExclusive, "", 409.4, 0.60),
			busyScore("packed", record.ArmPacked, policy.ModeIsolated, 299.6, 0.86),
		}, 1 / 0.60, 409.4 / 299.6 * 0.60, true},
		// (0.5*100 + 0.7*300) / 400 = 0.65, as the SM bound pools.
		{"two exclusive runs, weighted by wall time", []Score{
			busyScore("exclusive", record.ArmExclusive, "", 100, 0.5),
			busyScore("exclusive-2", record.ArmExclusive, "", 300, 0.7),
			busyScore("packed", record.ArmPacked, policy.ModeIsolated, 150, 0.9),
		}, 1 / 0.65, (12 / (150.0 / 3600)) / ((12/(100.0/3600) + 12/(300.0/3600)) / 2) * 0.65, true},
		{"an mps arm gets the figure but it does not bind", []Score{
			busyScore("exclusive", record.ArmExclusive, "", 400, 0.5),
			busyScore("packed-mps", record.ArmPacked, policy.ModeMPS, 150, 0.9),
		}, 2, 400.0 / 150 * 0.5, false},
		{"an exclusive run without utilization samples gives none", []Score{
			busyScore("exclusive", record.ArmExclusive, "", 400, 0),
			busyScore("packed", record.ArmPacked, policy.ModeIsolated, 150, 0.9),
		}, 0, 0, false},
		{"an exclusive run that failed is no baseline", []Score{
			func() Score {
				s := busyScore("exclusive", record.ArmExclusive, "", 400, 0.5)
				s.Error = "context canceled"
				return s
			}(),
			busyScore("packed", record.ArmPacked, policy.ModeIsolated, 150, 0.9),
		}, 0, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			SetRatios(tc.scores)
			last := tc.scores[len(tc.scores)-1]
			if tc.bound == 0 {
				if last.Busy != nil {
					t.Fatalf("time-slicing bound %+v, want none", last.Busy)
				}
				return
			}
			bb := last.Busy
			if bb == nil || !near(bb.Bound, tc.bound) || !near(bb.OfBound, tc.of) || bb.Binds != tc.binds {
				t.Fatalf("time-slicing bound %+v; want bound %.4f, of it %.4f, binds %v", bb, tc.bound, tc.of, tc.binds)
			}
		})
	}
}

func TestRenderBusyBound(t *testing.T) {
	scores := []Score{
		busyScore("exclusive", record.ArmExclusive, "", 400, 0.5),
		busyScore("packed", record.ArmPacked, policy.ModeIsolated, 250, 0.85),
		busyScore("packed-mps", record.ArmPacked, policy.ModeMPS, 160, 0.9),
	}
	SetRatios(scores)
	got := renderSM(scores)
	for _, want := range []string{
		"- time-slicing bound of packed: the exclusive run kept its GPU busy (a kernel running) 50.0% of its time; without MPS a GPU runs one job's kernels at a time, so no arm beats it by more than 2.00x; it reached 1.600x (80.0% of it)",
		"- time-slicing bound of packed-mps: the exclusive run kept its GPU busy (a kernel running) 50.0% of its time; it ran under MPS, where kernels of several jobs run at once, so this does not bind it; time-sliced, no arm beats it by more than 2.00x; it reached 2.500x (125.0% of it)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("renderSM:\n%s\nwant the line\n%s", got, want)
		}
	}
	if strings.Contains(got, "time-slicing bound of exclusive") {
		t.Errorf("renderSM gave the exclusive arm a time-slicing line:\n%s", got)
	}
}
