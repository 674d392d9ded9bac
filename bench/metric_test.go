package bench

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// exclusiveRun is the queue run one job at a time, 10 s each: 120 s, 12 jobs.
func exclusiveRun(q []Entry) ArmRun {
	run := ArmRun{Label: "exclusive", Arm: "exclusive", Seed: 1, Jobs: q, BusyFraction: 0.4}
	for i, e := range q {
		run.Attempts = append(run.Attempts, record.Attempt{Job: e.Name, Template: e.Template, Start: at(float64(10 * i)),
			End: at(float64(10*i + 10)), Outcome: record.OutcomeOK, WholeGPU: true})
	}
	return run
}

func accept(Entry) error { return nil }

func TestScoreExclusive(t *testing.T) {
	q := Draw(1)
	s := ScoreRun(exclusiveRun(q), accept)
	if s.Completed != 12 || s.Jobs != 12 {
		t.Fatalf("completed %d of %d, want 12 of 12", s.Completed, s.Jobs)
	}
	if s.Makespan != 120*time.Second {
		t.Fatalf("makespan %v, want 2m0s", s.Makespan)
	}
	if math.Abs(s.JobsPerGPUHour-360) > 1e-9 { // 12 jobs in 1/30 h
		t.Fatalf("jobs per GPU-hour %v, want 360", s.JobsPerGPUHour)
	}
	if s.FailedOthers != 0 || s.LeakerCap != 0 || s.LeakerAction != "never capped" {
		t.Fatalf("unexpected figures %+v", s)
	}
}

// packedRoles names the jobs of q that packedRun gives a part: the leaker, the neighbour that
// fails once, and the job whose final attempt fails.
func packedRoles(q []Entry) (leaker, failsOnce, failsLast string) {
	for _, e := range q {
		switch {
		case e.Template == Leaker:
			leaker = e.Name
		case failsOnce == "":
			failsOnce = e.Name
		case failsLast == "":
			failsLast = e.Name
		}
	}
	return leaker, failsOnce, failsLast
}

// packedRun: a probe, the leaker's cap violation and re-run, a neighbour that failed once and
// then succeeded, and a job whose final attempt failed.
func packedRun(q []Entry) ArmRun {
	run := ArmRun{Label: "packed-mps", Arm: "packed", Mode: "mps", Profiles: "cold", Seed: 1, Jobs: q, BusyFraction: 0.8}
	leaker, failsOnce, failsLast := packedRoles(q)
	for i, e := range q {
		start := 5 + float64(i) // the first attempt starts at 5 s
		switch e.Name {
		case leaker:
			run.Attempts = append(run.Attempts,
				record.Attempt{Job: e.Name, Template: e.Template, Start: at(2), End: at(6), Outcome: record.OutcomeProbe, ExitCode: 130, Probe: true, WholeGPU: true},
				record.Attempt{Job: e.Name, Template: e.Template, Capped: true, CapBytes: 3 * size.GiB, Start: at(10), End: at(20), Outcome: record.OutcomeCapViolation,
					ExitCode: 1, Violation: &ledger.Violation{Action: "oom-in-process", CrossedAt: at(19.5), ContainedAt: at(19.75)}},
				record.Attempt{Job: e.Name, Template: e.Template, Start: at(50), End: at(65), Outcome: record.OutcomeOK, WholeGPU: true})
		case failsOnce:
			run.Attempts = append(run.Attempts,
				record.Attempt{Job: e.Name, Template: e.Template, Capped: true, CapBytes: 20 * size.GiB, Start: at(start), End: at(start + 3), Outcome: record.OutcomeCapViolation, ExitCode: 137},
				record.Attempt{Job: e.Name, Template: e.Template, Start: at(30), End: at(40), Outcome: record.OutcomeOK, WholeGPU: true})
		case failsLast:
			run.Attempts = append(run.Attempts,
				record.Attempt{Job: e.Name, Template: e.Template, Capped: true, CapBytes: 20 * size.GiB, Start: at(start), End: at(start + 10), Outcome: record.OutcomeFailed, ExitCode: 1})
		default:
			run.Attempts = append(run.Attempts,
				record.Attempt{Job: e.Name, Template: e.Template, Capped: true, CapBytes: 20 * size.GiB, Start: at(start), End: at(start + 10), Outcome: record.OutcomeOK})
		}
	}
	return run
}

func TestScorePacked(t *testing.T) {
	q := Draw(1)
	var rejected Entry
	for _, e := range q {
		if e.Template == Eval17B {
			rejected = e
		}
	}
	verdict := func(e Entry) error {
		if e.Name == rejected.Name {
			return errors.New("values are not identical")
		}
		return nil
	}
	s := ScoreRun(packedRun(q), verdict)
	// 12 jobs: one failed at the end, one rejected by the comparison.
	if s.Completed != 10 {
		t.Fatalf("completed %d, want 10; per job %+v", s.Completed, s.PerJob)
	}
	// From the leaker's probe at 2 s to its re-run's end at 65 s.
	if s.Makespan != 63*time.Second {
		t.Fatalf("makespan %v, want 63s", s.Makespan)
	}
	if want := 10 / (63.0 / 3600); math.Abs(s.JobsPerGPUHour-want) > 1e-9 {
		t.Fatalf("jobs per GPU-hour %v, want %v", s.JobsPerGPUHour, want)
	}
	if s.FailedOthers != 2 {
		t.Fatalf("failed attempts by non-leakers %d, want 2 (one cap violation, one failure)", s.FailedOthers)
	}
	if s.LeakerCap != 3*size.GiB || s.LeakerAction != "oom-in-process" || s.LeakerContained != 250*time.Millisecond {
		t.Fatalf("leaker cap %v action %q contained %v", s.LeakerCap, s.LeakerAction, s.LeakerContained)
	}
	why := map[string]string{}
	for _, j := range s.PerJob {
		if !j.Completed {
			why[j.Template] = j.Why
		}
	}
	if len(why) != 2 || why[Eval17B] == "" {
		t.Fatalf("not completed: %v", why)
	}
	// Innocent work lost: the non-leaker's 3 s cap violation and the other's 10 s failure; the
	// leaker's probe window and cap violation are not innocent. Lost: the job that failed last
	// and the job whose result differs. Re-run: the leaker and the job that broke its cap.
	leaker, failsOnce, failsLast := packedRoles(q)
	l := s.Loss
	if l == nil || l.Innocent != 13*time.Second || l.InnocentLost != 2 {
		t.Fatalf("loss %+v, want 13 s of innocent work and 2 innocent jobs lost", l)
	}
	if !sameSet(l.Lost, []string{failsLast, rejected.Name}) || !sameSet(l.ReRun, []string{leaker, failsOnce}) {
		t.Fatalf("lost %v re-run %v; want lost %s %s, re-run %s %s", l.Lost, l.ReRun, failsLast, rejected.Name, leaker, failsOnce)
	}
	for _, j := range s.PerJob {
		want := map[string]time.Duration{leaker: 10 * time.Second, failsOnce: 3 * time.Second, failsLast: 10 * time.Second}[j.Job]
		if j.FailedTime != want {
			t.Errorf("%s: failed attempts %v, want %v", j.Job, j.FailedTime, want)
		}
	}

	ex := ScoreRun(exclusiveRun(q), accept)
	ex2 := ex
	ex2.Label, ex2.JobsPerGPUHour = "exclusive-2", 240 // a noisier second exclusive run
	scores := []Score{ex, s, ex2}
	SetRatios(scores)
	base := (360.0 + 240.0) / 2
	if math.Abs(scores[1].Ratio-s.JobsPerGPUHour/base) > 1e-12 || math.Abs(scores[0].Ratio-360/base) > 1e-12 {
		t.Fatalf("ratios %v %v, want against the mean exclusive %v", scores[0].Ratio, scores[1].Ratio, base)
	}
}

func TestScoreNeverRanAndOtherSeed(t *testing.T) {
	q := Draw(2)
	run := exclusiveRun(q)
	run.Attempts = run.Attempts[:5] // the arm was cut short
	s := ScoreRun(run, accept)
	if s.Completed != 5 {
		t.Fatalf("completed %d, want 5", s.Completed)
	}
	never := 0
	for _, j := range s.PerJob {
		if j.Why == "never ran" {
			never++
		}
	}
	if never != 7 {
		t.Fatalf("%d jobs marked never ran, want 7", never)
	}
	// A cut-short exclusive run is no baseline: its rate covers a subset of the queue.
	full := ScoreRun(exclusiveRun(q), accept)
	packed := full
	packed.Label, packed.Arm, packed.JobsPerGPUHour = "packed", "packed", 2*full.JobsPerGPUHour
	partial := s
	partial.JobsPerGPUHour = full.JobsPerGPUHour / 3 // a subset's rate differs from the queue's
	withPartial := []Score{full, packed, partial}
	SetRatios(withPartial)
	if math.Abs(withPartial[1].Ratio-2) > 1e-12 {
		t.Fatalf("packed ratio %v with a cut-short exclusive run in the baseline, want 2 (the full run only)", withPartial[1].Ratio)
	}
	other := s
	other.Seed, other.Arm = 3, "packed"
	scores := []Score{other}
	SetRatios(scores)
	if scores[0].Ratio != 0 {
		t.Fatalf("no exclusive run of seed 3: ratio %v, want 0", scores[0].Ratio)
	}
	if e := ScoreRun(ArmRun{Jobs: q}, accept); e.JobsPerGPUHour != 0 || e.Makespan != 0 || e.Completed != 0 {
		t.Fatalf("empty run scored %+v", e)
	}
}

// A neighbour faulted by a GPU-wide event is harm to a neighbour: it counts in the failed
// attempts by non-leakers (and apart, as collateral) even though its re-run completed.
func TestScoreCountsCollateral(t *testing.T) {
	q := Draw(1)
	run := ArmRun{Label: "packed-mps", Arm: "packed", Mode: "mps", Seed: 1, Jobs: q}
	for i, e := range q {
		start := 5 + float64(i)
		if i == 0 && e.Template != Leaker {
			run.Attempts = append(run.Attempts,
				record.Attempt{Job: e.Name, Template: e.Template, Capped: true, CapBytes: 20 * size.GiB, Start: at(start), End: at(start + 2), Outcome: record.OutcomeCollateral, ExitCode: 1},
				record.Attempt{Job: e.Name, Template: e.Template, Capped: true, CapBytes: 20 * size.GiB, Start: at(30), End: at(40), Outcome: record.OutcomeOK})
			continue
		}
		run.Attempts = append(run.Attempts, record.Attempt{Job: e.Name, Template: e.Template, Capped: true, CapBytes: 20 * size.GiB, Start: at(start), End: at(start + 10), Outcome: record.OutcomeOK})
	}
	if q[0].Template == Leaker {
		t.Fatal("seed 1 draws the leaker first: pick another job")
	}
	s := ScoreRun(run, accept)
	if s.FailedOthers != 1 || s.Collateral != 1 {
		t.Fatalf("failed by non-leakers %d, collateral %d: want 1 and 1", s.FailedOthers, s.Collateral)
	}
	if s.Completed != len(q) {
		t.Fatalf("completed %d of %d: the collateral job's re-run completed", s.Completed, len(q))
	}
	sum := sampleSummary(1, 2)
	sum.Scores = []Score{s}
	if out := RenderRun(sum); !strings.Contains(out, "| 1 (1 collateral) |") {
		t.Fatalf("the table should show the collateral attempt:\n%s", out)
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			return false
		}
	}
	return true
}

// An uncapped-retry run: its score counts every attempt's time, an innocent job's failed
// attempts are lost work even when a retry completed it, a job whose retries all failed is lost,
// and a job stopped by the arm's end is neither lost nor re-run.
func TestScoreUncappedRetry(t *testing.T) {
	q := Draw(3)
	run := ArmRun{Label: "uncapped-retry", Arm: "uncapped-retry", Mode: "isolated", Seed: 3, Jobs: q}
	roles := map[string]string{}
	next := []string{"retried", "lost", "canceled"}
	for _, e := range q {
		switch {
		case e.Template == Leaker:
			roles[e.Name] = "leaker"
		case len(next) > 0:
			roles[e.Name], next = next[0], next[1:]
		}
	}
	for i, e := range q {
		start := float64(i)
		add := func(d float64, outcome record.Outcome) {
			exit := 0
			if outcome != record.OutcomeOK {
				exit = 1
			}
			run.Attempts = append(run.Attempts, record.Attempt{Job: e.Name, Template: e.Template, Start: at(start), End: at(start + d), Outcome: outcome, ExitCode: exit})
			start += d
		}
		switch roles[e.Name] {
		case "leaker":
			for range 4 {
				add(5, record.OutcomeFailed)
			}
		case "retried":
			add(2, record.OutcomeFailed)
			add(3, record.OutcomeFailed)
			add(10, record.OutcomeOK)
		case "lost":
			for range 4 {
				add(1.5, record.OutcomeFailed)
			}
		case "canceled":
			add(4, record.OutcomeCanceled)
		default:
			add(10, record.OutcomeOK)
		}
	}
	s := ScoreRun(run, accept)
	if s.Completed != len(q)-3 {
		t.Fatalf("completed %d, want %d (the leaker, the lost job and the canceled one are not)", s.Completed, len(q)-3)
	}
	l := s.Loss
	if l.Innocent != 11*time.Second || l.InnocentLost != 1 || len(l.Lost) != 2 || len(l.ReRun) != 3 {
		t.Fatalf("loss %+v: want 11 s innocent (2+3 s retried, 4x1.5 s lost), lost the leaker and one job, re-run 3", l)
	}
	for _, n := range l.Lost {
		if roles[n] != "leaker" && roles[n] != "lost" {
			t.Errorf("%s (%s) counted lost", n, roles[n])
		}
	}
	if s.FailedOthers != 6 {
		t.Errorf("failed attempts by non-leakers %d, want 6", s.FailedOthers)
	}
	// From the first job's start (at 0 s) to the end of the last attempt, retries included.
	var last time.Time
	for _, a := range run.Attempts {
		if a.End.After(last) {
			last = a.End
		}
	}
	if s.Makespan != last.Sub(t0) {
		t.Errorf("makespan %v, want every attempt's time %v", s.Makespan, last.Sub(t0))
	}
}
