package sched

import (
	"testing"

	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/size"
)

// How many templates nobody has measured probe side by side, and under what protective cap, is
// the scheduler's decision alone: tested here over no processes, where a loaded machine cannot
// blur which probes overlapped (TestProbeCap runs the same queues as real processes).
func TestSchedProbeCapDecidesProbesAtOnce(t *testing.T) {
	capped := func(caps map[string]size.Bytes) map[string]queue.TemplateSpec {
		specs := map[string]queue.TemplateSpec{}
		for tm, c := range caps {
			specs[tm] = queue.TemplateSpec{Name: tm, ProbeCapBytes: c}
		}
		return specs
	}
	for _, tc := range []struct {
		name      string
		templates map[string]queue.TemplateSpec
		runCap    size.Bytes   // Options.ProbeCap (--probe-cap)
		wantCaps  []size.Bytes // of the probes started at once; budget 78GiB
	}{
		{"default: half the budget", nil, 0, []size.Bytes{39 * size.GiB, 39 * size.GiB}},
		{"probe_cap 20GiB", capped(map[string]size.Bytes{"ta": 20 * size.GiB, "tb": 20 * size.GiB, "tc": 20 * size.GiB}), 0,
			[]size.Bytes{20 * size.GiB, 20 * size.GiB, 20 * size.GiB}},
		{"probe_cap rounds up to units", capped(map[string]size.Bytes{"ta": size.MustParse("19.5GiB"), "tb": 20 * size.GiB, "tc": 20 * size.GiB}), 0,
			[]size.Bytes{20 * size.GiB, 20 * size.GiB, 20 * size.GiB}},
		{"probe_cap over the budget", capped(map[string]size.Bytes{"ta": 500 * size.GiB}), 0, []size.Bytes{78 * size.GiB}},
		{"run-wide probe cap", nil, 20 * size.GiB, []size.Bytes{20 * size.GiB, 20 * size.GiB, 20 * size.GiB}},
		{"a template's probe_cap wins over the run's", capped(map[string]size.Bytes{"ta": 30 * size.GiB}), 20 * size.GiB,
			[]size.Bytes{30 * size.GiB, 20 * size.GiB, 20 * size.GiB}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs := []*Job{{Job: queue.Job{Name: "a", Template: "ta"}}, {Job: queue.Job{Name: "b", Template: "tb"}}, {Job: queue.Job{Name: "c", Template: "tc"}}}
			s, _, _ := schedOn(t, 80*size.GiB, 0, jobs)
			s.probeInPlace, s.probeCap = true, tc.runCap
			for n, spec := range tc.templates {
				s.templates[n] = spec
			}
			got := s.Next()
			var caps []size.Bytes
			for _, l := range got {
				if !l.Probe || !l.InPlace || l.Whole {
					t.Fatalf("%s: Launch %+v, want an in-place probe", l.Job.Name, l)
				}
				caps = append(caps, l.Res.CapBytes)
			}
			if len(caps) != len(tc.wantCaps) || got[0].Job.Name != "a" {
				t.Fatalf("probes started at once %v with caps %v, want a first and caps %v", names(got), caps, tc.wantCaps)
			}
			for i := range caps {
				if caps[i] != tc.wantCaps[i] {
					t.Fatalf("probes %v with caps %v, want caps %v", names(got), caps, tc.wantCaps)
				}
			}
			// The next probe starts when one ends, not before.
			if more := s.Next(); len(more) != 0 && len(got) < 3 {
				t.Fatalf("admitted %v while %d probes hold the budget", names(more), len(got))
			}
		})
	}
}
