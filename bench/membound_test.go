package bench

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// memScore is an arm of seed 1 whose jobs have the given exclusive walls (exclusive arm) or
// guarantee shares (other arms), by job name.
func memScore(label string, arm record.Arm, makespan float64, gpus int, jobs map[string]float64) Score {
	s := smScore(label, arm, 1, ProfileBusy, makespan, -1)
	s.GPUs = gpus
	for _, name := range slices.Sorted(maps.Keys(jobs)) {
		v := jobs[name]
		j := JobScore{Job: name}
		if arm == record.ArmExclusive {
			j.Wall = time.Duration(v * float64(time.Second))
		} else {
			j.Share = v
		}
		s.PerJob = append(s.PerJob, j)
	}
	return s
}

func TestSetMemBounds(t *testing.T) {
	excl := memScore("exclusive", record.ArmExclusive, 100, 1, map[string]float64{"a": 30, "b": 20, "c": 50})
	excl2 := memScore("exclusive-2", record.ArmExclusive, 120, 1, map[string]float64{"a": 40, "b": 20, "c": 60})
	tests := []struct {
		name   string
		scores []Score
		floor  float64 // of the last score; 0: no bound
		bound  float64
	}{
		{"two jobs above half the budget: their walls add up", []Score{excl,
			memScore("packed", record.ArmPacked, 80, 1, map[string]float64{"a": 0.6, "b": 0.2, "c": 0.7})}, 80, 1.25},
		{"exactly half is not above it", []Score{excl,
			memScore("packed", record.ArmPacked, 80, 1, map[string]float64{"a": 0.5, "b": 0.5, "c": 0.7})}, 50, 2},
		{"two exclusive runs: the means", []Score{excl, excl2,
			memScore("packed", record.ArmPacked, 80, 1, map[string]float64{"a": 0.6, "c": 0.7})}, 90, 110.0 / 90},
		{"two GPUs share the floor", []Score{excl,
			memScore("packed", record.ArmPacked, 60, 2, map[string]float64{"a": 0.6, "c": 0.7})}, 40, 2.5},
		{"no guarantee above half: no bound", []Score{excl,
			memScore("packed", record.ArmPacked, 60, 1, map[string]float64{"a": 0.4, "c": 0.3})}, 0, 0},
		{"a big job the exclusive run did not time: no bound", []Score{excl,
			memScore("packed", record.ArmPacked, 60, 1, map[string]float64{"a": 0.6, "z": 0.9})}, 0, 0},
		{"no exclusive run: no bound", []Score{
			memScore("packed", record.ArmPacked, 60, 1, map[string]float64{"a": 0.6, "c": 0.7})}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			SetRatios(tc.scores)
			for _, s := range tc.scores[:len(tc.scores)-1] {
				if s.Mem != nil {
					t.Fatalf("exclusive run %s got a memory bound %+v", s.Label, s.Mem)
				}
			}
			last := tc.scores[len(tc.scores)-1]
			if tc.floor == 0 {
				if last.Mem != nil {
					t.Fatalf("memory bound %+v, want none", last.Mem)
				}
				return
			}
			m := last.Mem
			if m == nil || !near(m.Floor.Seconds(), tc.floor) || !near(m.Bound, tc.bound) || !near(m.OfBound, last.Ratio/tc.bound) {
				t.Fatalf("memory bound %+v (ratio %.3f), want floor %.1f s, bound %.3f", m, last.Ratio, tc.floor, tc.bound)
			}
		})
	}
}

// A job's share is its final attempt's guarantee over its GPU's budget: the runner's budget, or
// in runs recorded before it the attempts' borrowing limit; an uncapped attempt or one with the
// whole GPU has none.
func TestBigJobs(t *testing.T) {
	att := func(job, gpuID string, start float64, capGiB int, limitGiB int, whole bool) record.Attempt {
		return record.Attempt{Job: job, GPU: gpuID, Start: sec(start), End: sec(start + 10), Capped: capGiB > 0,
			CapBytes: size.Bytes(capGiB) * size.GiB, LimitBytes: size.Bytes(limitGiB) * size.GiB, WholeGPU: whole}
	}
	run := ArmRun{Attempts: []record.Attempt{
		att("a", "g0", 0, 30, 100, false), att("a", "g0", 20, 60, 100, false), // its re-run's guarantee counts
		att("b", "g0", 0, 0, 0, false),  // uncapped
		att("c", "g0", 0, 100, 0, true), // the whole GPU
		att("d", "g1", 0, 51, 0, false), // g1: nothing borrowed, no budget known
	}}
	jobs := []JobScore{{Job: "a"}, {Job: "b"}, {Job: "c"}, {Job: "d"}, {Job: "never-ran"}}
	bigJobs(run, jobs)
	want := map[string]float64{"a": 0.6}
	for _, j := range jobs {
		if !near(j.Share, want[j.Job]) {
			t.Errorf("%s: share %.3f, want %.3f", j.Job, j.Share, want[j.Job])
		}
	}
	run.Budgets = map[string]size.Bytes{"g0": 120 * size.GiB, "g1": 100 * size.GiB}
	jobs = []JobScore{{Job: "a"}, {Job: "d"}}
	bigJobs(run, jobs)
	if !near(jobs[0].Share, 0.5) || !near(jobs[1].Share, 0.51) {
		t.Errorf("with the runner's budgets: shares %.3f and %.3f, want 0.5 and 0.51", jobs[0].Share, jobs[1].Share)
	}
	if got := gpusOf(run); got != 2 {
		t.Errorf("gpusOf = %d, want 2", got)
	}
}

func TestRenderMemBound(t *testing.T) {
	scores := []Score{
		memScore("exclusive", record.ArmExclusive, 100, 1, map[string]float64{"a": 30, "c": 50}),
		memScore("packed", record.ArmPacked, 80, 1, map[string]float64{"a": 0.6, "c": 0.7}),
	}
	SetRatios(scores)
	got := renderSM(scores)
	want := "- memory bound of packed: 2 job(s) held guarantees above half the GPU's budget (a, c), whose exclusive runs add up to 80.0 s per GPU: with these guarantees no schedule beats the exclusive run by more than 1.25x; it reached 1.250x (100.0% of it)"
	if !strings.Contains(got, want) {
		t.Errorf("renderSM:\n%s\nwant the line\n%s", got, want)
	}
}

// A summary written before the memory and time-slicing bounds gets them from runs.json: the
// jobs' guarantees and the budget their borrowing limit shows, the exclusive job times the
// summary kept only with GPM, and the busy fraction every summary kept.
func TestLoadResultsFillsTheBounds(t *testing.T) {
	jobs := []Entry{{Name: "a", Template: LoRA06B}, {Name: "b", Template: FullFT06B}}
	ok := func(job string, start, end float64, capGiB int) record.Attempt {
		return record.Attempt{Job: job, Number: 1, GPU: "g0", Start: sec(start), End: sec(end), Outcome: record.OutcomeOK,
			Capped: capGiB > 0, CapBytes: size.Bytes(capGiB) * size.GiB, LimitBytes: size.Bytes(min(capGiB, 1)) * 100 * size.GiB}
	}
	excl := ArmRun{Label: "exclusive", Arm: record.ArmExclusive, Seed: 1, Jobs: jobs, BusyFraction: 0.5,
		Attempts: []record.Attempt{ok("a", 0, 10, 0), ok("b", 10, 30, 0)}}
	packed := ArmRun{Label: "packed", Arm: record.ArmPacked, Seed: 1, Jobs: jobs, BusyFraction: 0.6,
		Attempts: []record.Attempt{ok("a", 0, 11, 60), ok("b", 11, 32, 70)}}
	scores := []Score{ScoreRun(excl, accept), ScoreRun(packed, accept)}
	SetRatios(scores)
	if m := scores[1].Mem; m == nil || m.Floor != 30*time.Second {
		t.Fatalf("memory bound as scored %+v, want a floor of 30 s", m)
	}
	old := slices.Clone(scores)
	for i := range old {
		old[i].GPUs, old[i].Mem, old[i].Busy = 0, nil, nil
		old[i].PerJob = slices.Clone(old[i].PerJob)
		for k := range old[i].PerJob {
			old[i].PerJob[k].Share, old[i].PerJob[k].Wall = 0, 0
		}
	}
	dir := t.TempDir()
	if err := WriteRaw(dir, Summary{Seed: 1, Scores: old}, []ArmRun{excl, packed}); err != nil {
		t.Fatal(err)
	}
	sum, err := LoadResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m := sum.Scores[1].Mem; m == nil || m.Floor != 30*time.Second || !near(m.Bound, 1) || strings.Join(m.Big, ",") != "a,b" {
		t.Fatalf("memory bound of the old summary %+v, want a and b above half, a floor of 30 s, bound 1", m)
	}
	// and the time-slicing bound, from the busy fraction every summary kept
	if bb := sum.Scores[1].Busy; bb == nil || !near(bb.Bound, 2) || !bb.Binds {
		t.Fatalf("time-slicing bound of the old summary %+v, want 2x, binding", bb)
	}
}
