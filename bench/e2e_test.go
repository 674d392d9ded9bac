package bench

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// envSimJob makes the test binary act as a simulated benchmark job (SimJobMain).
const envSimJob = "GPUFRAC_BENCH_SIMJOB"

func TestMain(m *testing.M) {
	if os.Getenv(envSimJob) == "1" {
		os.Exit(SimJobMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// simBench is what a test of the whole benchmark on the simulated backend starts from: an output
// directory, one simulated H200 and the arms (isolated mode) it runs. Such a test starts
// processes job processes, too many for -short.
func simBench(t *testing.T, processes int, arms string) (string, *gpu.Simulated, []ArmSpec) {
	if testing.Short() {
		t.Skipf("runs %d simulated job processes", processes)
	}
	sim, _ := testutil.NewSim(t, "H200=140GiB")
	return t.TempDir(), sim, mustArms(t, arms, "isolated")
}

// The whole pipeline on the simulated backend: the runner runs real processes (this test binary
// as simulated jobs), the bench compares their results and scores every arm.
func TestEndToEndSimulated(t *testing.T) {
	dir, sim, arms := simBench(t, 36, "exclusive,packed-mps,packed-isolated,uncapped-retry")
	const simScale = 0.03
	pol := policy.Default()
	pol.WatchdogInterval = 20 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, runs, err := Run(ctx, Config{
		Seed: 2, Arms: arms, OutDir: filepath.Join(dir, "out"), ArmTimeout: time.Minute,
		Workloads: SimWorkloads{Program: []string{os.Args[0]}, Scale: simScale, Env: map[string]string{envSimJob: "1"}},
		// The window covers the other templates' ramps (16 s at most) and ends before the
		// leaker starts leaking (24 s), as a probe window on the GPU should.
		Runner:  RunnerArms{Backend: sim, Policy: pol, ProbeWindow: time.Duration(20 * simScale * float64(time.Second))},
		Backend: sim.Kind(), Command: "go test ./bench -run TestEndToEndSimulated",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 4 {
		t.Fatalf("%d arms ran, want 4", len(runs))
	}
	for _, s := range sum.Scores {
		t.Logf("%s: %d of %d in %v, ratio %.2f, failed others %d, leaker %s %s, loss %+v", s.Label, s.Completed, s.Jobs,
			s.Makespan, s.Ratio, s.FailedOthers, s.LeakerCap, s.LeakerAction, s.Loss)
		if s.Error != "" {
			t.Errorf("%s: %s", s.Label, s.Error)
		}
		for _, j := range s.PerJob {
			if !j.Completed {
				t.Logf("  %s: %s", j.Job, j.Why)
			}
		}
	}
	ex := sum.Scores[0]
	if ex.Completed != QueueLen || ex.Makespan <= 0 || ex.Ratio <= 0 {
		t.Fatalf("exclusive arm: %d of %d completed, makespan %v, ratio %v", ex.Completed, ex.Jobs, ex.Makespan, ex.Ratio)
	}
	// Every simulated result is deterministic, so a packed arm completes every job whose final
	// attempt exits cleanly; the runner re-runs cap breakers alone, so that should be all 12.
	leaker := ""
	for _, e := range Draw(2) {
		if e.Template == Leaker {
			leaker = e.Name
		}
	}
	for _, s := range sum.Scores[1:3] {
		if s.Completed != QueueLen {
			t.Errorf("%s: %d of %d completed", s.Label, s.Completed, QueueLen)
		}
		l := s.Loss
		if l == nil || len(l.Lost) != 0 || (l.Innocent > 0) != (s.FailedOthers > 0) {
			t.Errorf("%s: loss %+v with %d failed attempts of other jobs; want none lost", s.Label, l, s.FailedOthers)
			continue
		}
		if s.Label == "packed-isolated" {
			// Isolated mode with the fence borrows: the leaker takes what no guarantee covers,
			// waits for its neighbours when the GPU is full, and completes in one attempt.
			if slices.Contains(l.ReRun, leaker) || s.LeakerCap == 0 {
				t.Errorf("%s: the leaker should have borrowed and completed once under its %v guarantee: re-run %v, %q",
					s.Label, s.LeakerCap, l.ReRun, s.LeakerAction)
			}
			continue
		}
		// Under MPS a cap is the most a job may use: the leaker is contained and re-run.
		// Another job may break a cap its short cold probe gave it on a loaded machine (that
		// is lost work too), but none was lost.
		if s.LeakerCap == 0 || s.LeakerAction == "not contained" || s.LeakerAction == "never capped" || !slices.Contains(l.ReRun, leaker) {
			t.Errorf("%s: the leaker was not contained under a cap and re-run: cap %v, %q, re-run %v", s.Label, s.LeakerCap, s.LeakerAction, l.ReRun)
		}
	}
	// The retry arm ran through the runner as itself: up to 6 jobs at once with no caps. At this
	// scale the leaker grows after every other job has ended, so nobody fails.
	retry := sum.Scores[3]
	if retry.Arm != "uncapped-retry" || retry.LeakerCap != 0 || retry.Use.Probes != 0 || retry.Use.MeanRunning <= 1 {
		t.Errorf("uncapped-retry: arm %q, leaker cap %v, probes %d, mean running %.2f", retry.Arm, retry.LeakerCap, retry.Use.Probes, retry.Use.MeanRunning)
	}
	if retry.Completed != QueueLen-len(retry.Loss.Lost) {
		t.Errorf("uncapped-retry: %d completed, %d lost, of %d", retry.Completed, len(retry.Loss.Lost), QueueLen)
	}
	// Attempts keep the runner's records with their caps.
	var capped size.Bytes
	for _, a := range runs[1].Attempts {
		if capOf(a) > 0 && !a.WholeGPU {
			capped = capOf(a)
		}
	}
	if capped == 0 {
		t.Errorf("packed-mps ran no job under a cap: %+v", runs[1].Attempts)
	}
	for _, f := range []string{"summary.json", "summary.md", "attempts.csv", "jobs.csv", "runs.json"} {
		if _, err := os.Stat(filepath.Join(dir, "out", f)); err != nil {
			t.Errorf("raw output %s: %v", f, err)
		}
	}
}

// The busy profile on the simulated backend, each template alone with GPM read through the gpu
// backend: every job's measured SM-active seconds are the ones its shape predicts (the simulated
// monitor is deterministic; what differs is the sampling period), the arm gets SM figures and,
// being the baseline, a bound of 1/f. The fraction of each job's wall time is only logged: a job
// process's own start (slow under -race on a loaded machine) lengthens the wall, not the work.
func TestBusyProfileGPMSimulated(t *testing.T) {
	dir, sim, arms := simBench(t, 7, "exclusive")
	const simScale = 0.04
	var queue []Entry
	for _, e := range CalibrationQueue() {
		// The leaker's leak is not scaled (see SimJobMain): it would take 6 s here.
		if e.Template != Leaker {
			queue = append(queue, e)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, runs, err := Run(ctx, Config{
		Seed: 1, Arms: arms, OutDir: filepath.Join(dir, "out"), ArmTimeout: time.Minute, Workload: ProfileBusy, Queue: queue,
		Workloads: SimWorkloads{Program: []string{os.Args[0]}, Scale: simScale, Profile: ProfileBusy, Env: map[string]string{envSimJob: "1"}},
		Runner:    RunnerArms{Backend: sim, GPMInterval: 20 * time.Millisecond},
		Backend:   sim.Kind(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs[0].GPM) == 0 {
		t.Fatalf("no GPM samples; notes %v", runs[0].GPMNotes)
	}
	ex := sum.Scores[0]
	if ex.Completed != len(queue) || ex.SM == nil || ex.SM.Coverage < 0.9 || !near(ex.SM.Bound, 1/ex.SM.Fraction) {
		t.Fatalf("exclusive arm: %d of %d completed, SM %+v", ex.Completed, len(queue), ex.SM)
	}
	for _, j := range ex.PerJob {
		wall, active, err := busySimShapes[j.Template].aloneAt(140*size.GiB, simScale)
		if err != nil {
			t.Fatal(err)
		}
		// Two GPM periods of slack at either end of the job's busy phase, and 15% for simjob's own
		// pace on a loaded machine.
		slack := 0.15*active.Seconds() + 2*0.02
		if j.SM == nil || math.Abs(j.SM.ActiveSeconds-active.Seconds()) > slack {
			t.Errorf("%s: SM use %+v over %v, want %.2f SM-active seconds", j.Job, j.SM, j.Wall, active.Seconds())
			continue
		}
		t.Logf("%s: %.2f SM-active s (shape: %.2f), %.1f%% of %v (shape: %.1f%% of %v)", j.Job, j.SM.ActiveSeconds, active.Seconds(),
			100*j.SM.Fraction, j.Wall, 100*active.Seconds()/wall.Seconds(), wall)
	}
	if md, err := os.ReadFile(filepath.Join(dir, "out", "summary.md")); err != nil || !regexp.MustCompile(`\| exclusive \| [0-9.]+% \|`).Match(md) {
		t.Errorf("summary.md lacks the exclusive arm's SM row: %v\n%s", err, md)
	}
}
