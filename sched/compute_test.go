package sched

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/size"
)

// TestSchedComputeBudget: a GPU admits jobs while their measured SM demands, summed, stay within
// the policy's budget; unknown demands count as the median of the known ones; nothing known or
// the budget off limits nothing; an empty GPU admits any job; a finished job gives its demand
// back. Memory never limits here (1 GiB jobs on 140 GiB): only the budget does.
func TestSchedComputeBudget(t *testing.T) {
	known := map[string]float64{"lora": 60, "embed": 50, "gen": 15}
	tests := []struct {
		name   string
		budget float64
		sm     map[string]float64
		jobs   string   // templates in queue order; job names are template + index
		rounds []string // what each round admits; before each round after the first, the first job still running finishes
	}{
		{"off: memory alone decides", 0, known, "lora lora lora lora", []string{"[lora0 lora1 lora2 lora3]"}},
		{"150: two of 60, the third waits", 150, known, "lora lora lora", []string{"[lora0 lora1]", "[lora2]"}},
		{"150: a light job backfills beside two of 60", 150, known, "lora lora lora gen", []string{"[lora0 lora1 gen3]", "[lora2]"}},
		{"unknown counts as the median (50)", 150, known, "lora lora mystery", []string{"[lora0 lora1]", "[mystery2]"}},
		{"unknown counts as the median: 40 + 50 fit", 100, map[string]float64{"a": 40, "b": 50, "c": 60}, "a mystery", []string{"[a0 mystery1]"}},
		{"nothing known: nothing limited", 100, nil, "x y z", []string{"[x0 y1 z2]"}},
		{"a job past the budget runs alone, never waits for ever", 50, map[string]float64{"big": 80}, "big big", []string{"[big0]", "[big1]"}},
		{"exactly at the budget fits", 100, map[string]float64{"h": 50}, "h h h", []string{"[h0 h1]", "[h2]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			led, uuid := memLedger(t, 140*size.GiB)
			pol := policy.Default()
			pol.SMBudgetPercent = tc.budget
			var jobs []*Job
			peaks := map[string]size.Bytes{}
			for i, tpl := range strings.Fields(tc.jobs) {
				jobs = append(jobs, &Job{Job: queue.Job{Name: fmt.Sprint(tpl, i), Template: tpl}})
				peaks[tpl] = size.GiB
			}
			s := New(Config{Policy: pol, Ledger: led, GPUs: []string{uuid}, Peaks: peaks, SMActive: tc.sm}, jobs)
			var running []Launch
			for r, want := range tc.rounds {
				if r > 0 {
					l := running[0]
					running = running[1:]
					s.Finished(&l)
					l.Job.Done = true
					if err := led.Release(l.Res.Token, "test"); err != nil {
						t.Fatal(err)
					}
				}
				got := s.Next()
				running = append(running, got...)
				if fmt.Sprint(names(got)) != want {
					t.Fatalf("round %d: admitted %v, want %s (SM demand running before: %g%%)", r, names(got), want, s.SMOn(uuid))
				}
				var sum float64
				for _, l := range running {
					sum += l.SMDemand
				}
				if d := s.SMOn(uuid) - sum; d > 1e-9 || d < -1e-9 {
					t.Fatalf("round %d: SMOn %g%%, want the running launches' %g%%", r, s.SMOn(uuid), sum)
				}
			}
		})
	}
}

// TestSMDemand: a measured demand is itself; an unknown one the median of the measured ones
// (the mean of the middle two for an even count), learned ones included; 0 when none is known.
func TestSMDemand(t *testing.T) {
	led, uuid := memLedger(t, 80*size.GiB)
	s := New(Config{Policy: policy.Default(), Ledger: led, GPUs: []string{uuid}}, nil)
	if d, ok := s.SMDemand("x"); d != 0 || ok {
		t.Fatalf("nothing known: SMDemand = %g, %v; want 0, false", d, ok)
	}
	for _, step := range []struct {
		learn      string
		pct        float64
		x, learned float64
	}{
		{"a", 30, 30, 30}, {"b", 10, 20, 10}, {"c", 90, 30, 90}, {"a", 60, 60, 60},
	} {
		s.LearnedSM(step.learn, step.pct)
		if d, ok := s.SMDemand("x"); d != step.x || ok {
			t.Errorf("after learning %s = %g%%: unknown x counts %g%% (%v), want %g%%", step.learn, step.pct, d, ok, step.x)
		}
		if d, ok := s.SMDemand(step.learn); d != step.learned || !ok {
			t.Errorf("after learning %s = %g%%: it counts %g%% (%v)", step.learn, step.pct, d, ok)
		}
	}
}

// TestWaitReasonNamesTheComputeBudget: a job the budget holds back says so, with its demand and
// whether it was measured; without a budget the reason is memory's alone.
func TestWaitReasonNamesTheComputeBudget(t *testing.T) {
	for _, tc := range []struct {
		budget   float64
		template string
		want     string
	}{
		{0, "lora", "room for its %s guarantee beside the jobs running"},
		{100, "lora", "room for its %s guarantee beside the jobs running, and for its 60% SM demand (measured) within the 100% compute budget"},
		{100, "mystery", "and for its 60% SM demand (the median of those measured) within the 100% compute budget"},
	} {
		led, uuid := memLedger(t, 140*size.GiB)
		pol := policy.Default()
		pol.SMBudgetPercent = tc.budget
		j := &Job{Job: queue.Job{Name: "j", Template: tc.template}}
		s := New(Config{Policy: pol, Ledger: led, GPUs: []string{uuid},
			Peaks: map[string]size.Bytes{tc.template: size.GiB}, SMActive: map[string]float64{"lora": 60}}, []*Job{j})
		want := strings.Replace(tc.want, "%s", (size.Bytes(pol.Units(pol.Cap(size.GiB))) * pol.UnitBytes).String(), 1)
		if got := s.WaitReason(j, 138*size.GiB); !strings.Contains(got, want) || (tc.budget == 0 && strings.Contains(got, "SM")) {
			t.Errorf("budget %g%%, %s: %q, want it to contain %q", tc.budget, tc.template, got, want)
		}
	}
}

// TestWaitReasonNamesTheGuaranteeItGets: the guarantee a waiting job is said to wait for is the
// one it is granted, in whole units: `gpufrac status` once said "room for its 8.3GiB guarantee"
// for a job the run then started with "guarantee 9GiB".
func TestWaitReasonNamesTheGuaranteeItGets(t *testing.T) {
	for _, peak := range []size.Bytes{6 * size.GiB, 500 * size.MiB, 16 * size.GiB} {
		t.Run(peak.String(), func(t *testing.T) {
			jobs := []*Job{{Job: queue.Job{Name: "a", Template: "t"}}, {Job: queue.Job{Name: "b", Template: "t"}}}
			// A GPU whose budget holds one guarantee and a half: b waits for memory.
			p := policy.Default()
			g := size.Bytes(p.Units(p.Cap(peak))) * p.UnitBytes
			s, led, _ := schedOn(t, p.HeadroomBytes+g+g/2, 0, jobs)
			s.peaks["t"] = peak
			first := s.Next()
			if len(first) != 1 {
				t.Fatalf("first round admitted %v, want one job (room for one guarantee)", names(first))
			}
			why := s.WaitReason(jobs[1], g+g/2)
			s.Finished(&first[0])
			first[0].Job.Done = true
			if err := led.Release(first[0].Res.Token, "test"); err != nil {
				t.Fatal(err)
			}
			second := s.Next()
			if len(second) != 1 || second[0].Job != jobs[1] {
				t.Fatalf("second round admitted %v, want [b]", names(second))
			}
			want := fmt.Sprintf("room for its %s guarantee", second[0].Res.CapBytes)
			if !strings.Contains(why, want) {
				t.Errorf("b waited for %q; it was granted %s, want the reason to contain %q", why, second[0].Res.CapBytes, want)
			}
		})
	}
}

// TestWaitReasonNamesAFullSlotCount: a job held back by the number of jobs at once, not by
// memory, says so. The demo's status once showed four jobs "waiting for room for" guarantees of
// 5-20GiB beside 30GiB free, while max_tasks_per_gpu (4) held them.
func TestWaitReasonNamesAFullSlotCount(t *testing.T) {
	for _, tc := range []struct {
		name             string
		perGPU, maxTotal int
		total            size.Bytes
		want             string
	}{
		{"max_tasks_per_gpu", 1, 0, 80 * size.GiB, "a free slot (at most 1 job at once on a GPU: max_tasks_per_gpu)"},
		{"the run's bound", 4, 1, 80 * size.GiB, "a free slot (at most 1 job at once in this run)"},
		{"memory", 4, 0, 2*size.GiB + 6*size.GiB, "room for its 5GiB guarantee beside the jobs running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs := []*Job{{Job: queue.Job{Name: "a", Template: "t"}}, {Job: queue.Job{Name: "b", Template: "t"}}}
			led, uuid := memLedger(t, tc.total)
			pol := policy.Default()
			pol.MaxTasksPerGPU = tc.perGPU
			if err := led.SetPolicy(pol); err != nil {
				t.Fatal(err)
			}
			s := New(Config{Policy: pol, Ledger: led, GPUs: []string{uuid}, MaxTotal: tc.maxTotal,
				Peaks: map[string]size.Bytes{"t": 3 * size.GiB}}, jobs)
			if got := s.Next(); len(got) != 1 {
				t.Fatalf("first round admitted %v, want [a]", names(got))
			}
			if got := s.WaitReason(jobs[1], tc.total-2*size.GiB); !strings.HasPrefix(got, tc.want) {
				t.Errorf("b waits for %q, want %q", got, tc.want)
			}
		})
	}
}
