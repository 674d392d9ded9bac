package arms_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/bench/arms"
	"github.com/gpufrac/gpufrac/gpu/simjob"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/runner"
	"github.com/gpufrac/gpufrac/size"
)

func TestMain(m *testing.M) {
	simjob.RunIfChild() // a job started by a test runs here and exits
	os.Exit(m.Run())
}

// simJob is a job that re-executes this test binary as a simulated GPU job.
func simJob(t *testing.T, name string, args ...string) queue.Job {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return queue.Job{Name: name, Template: "t", Command: append([]string{exe}, args...), Env: map[string]string{simjob.EnvChild: "1"}}
}

// run runs q in arm on a simulated 80 GiB GPU, through the rules arms.Options gives it.
func run(t *testing.T, arm record.Arm, q queue.Queue) *record.Result {
	t.Helper()
	sim, _ := testutil.NewSim(t, "H100=80GiB")
	p := policy.Default()
	p.WatchdogInterval = 20 * time.Millisecond
	o, err := arms.Options(runner.Options{Backend: sim, OutDir: t.TempDir(), Policy: p, SampleInterval: 10 * time.Millisecond,
		StopGrace: 2 * time.Second}, arm)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := runner.Run(ctx, q, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Arm != arm {
		t.Fatalf("the run recorded arm %q, want %q", res.Arm, arm)
	}
	return res
}

// short is a queue of n jobs of 1 GiB that take under half a second each.
func short(t *testing.T, n int) queue.Queue {
	var q queue.Queue
	for i := range n {
		q.Jobs = append(q.Jobs, simJob(t, "j"+string(rune('a'+i)), "--peak", "1GiB", "--ramp", "20ms", "--hold", "400ms"))
	}
	return q
}

// Each baseline co-locates by its own rule: exclusive one job with no cap, static two with half
// the budget each, uncapped and uncapped-retry up to max_tasks_per_gpu with no caps; none probes.
func TestArmConcurrency(t *testing.T) {
	t.Parallel()
	tests := []struct {
		arm      record.Arm
		jobs     int
		want     int
		wantCapF func(budget size.Bytes) size.Bytes // expected cap of every attempt
	}{
		{record.ArmExclusive, 3, 1, func(size.Bytes) size.Bytes { return 0 }},
		{record.ArmStatic, 4, 2, func(b size.Bytes) size.Bytes { return b / 2 }},
		{record.ArmUncapped, 8, 6, func(size.Bytes) size.Bytes { return 0 }},
		{record.ArmUncappedRetry, 8, 6, func(size.Bytes) size.Bytes { return 0 }},
	}
	for _, tc := range tests {
		t.Run(string(tc.arm), func(t *testing.T) {
			t.Parallel()
			res := run(t, tc.arm, short(t, tc.jobs))
			if res.Completed != tc.jobs {
				t.Fatalf("completed %d of %d", res.Completed, tc.jobs)
			}
			if got := record.UseOf(res.Attempts).MostRunning; got != tc.want {
				t.Errorf("%s: %d jobs at once, want %d", tc.arm, got, tc.want)
			}
			budget := res.GPUs[0].BudgetBytes
			for _, a := range res.Attempts {
				if a.Probe {
					t.Errorf("%s arm probed %s; only packed probes", tc.arm, a.Job)
				}
				if a.CapBytes != tc.wantCapF(budget) || a.Capped != (tc.arm == record.ArmStatic) {
					t.Errorf("%s: capped %v, cap %s, want %s", a.Job, a.Capped, a.CapBytes, tc.wantCapF(budget))
				}
			}
		})
	}
}

// A job that fails is started again only in the uncapped-retry arm, at most arms.Retries
// times, and every failed attempt stays in the record.
func TestUncappedRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		arm       record.Arm
		job       string // "once": fails its first attempt only; "always": fails every attempt
		want      []record.Outcome
		completed int
	}{
		{record.ArmUncapped, "once", []record.Outcome{record.OutcomeFailed}, 0},
		{record.ArmUncapped, "always", []record.Outcome{record.OutcomeFailed}, 0},
		{record.ArmUncappedRetry, "once", []record.Outcome{record.OutcomeFailed, record.OutcomeOK}, 1},
		{record.ArmUncappedRetry, "always", []record.Outcome{record.OutcomeFailed, record.OutcomeFailed, record.OutcomeFailed, record.OutcomeFailed}, 0},
	}
	for _, tc := range tests {
		t.Run(string(tc.arm)+"/"+tc.job, func(t *testing.T) {
			t.Parallel()
			script := "exit 1"
			if tc.job == "once" {
				// The first attempt leaves a mark and fails; a later one finds it and succeeds.
				script = `test -e "$1" || { touch "$1"; exit 1; }`
			}
			mark := filepath.Join(t.TempDir(), "failed-once")
			q := queue.Queue{Jobs: []queue.Job{{Name: "j", Template: "t", Command: []string{"sh", "-c", script, "sh", mark}}}}
			res := run(t, tc.arm, q)
			var got []record.Outcome
			for _, a := range res.Attempts {
				got = append(got, a.Outcome)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("attempts %v, want %v", got, tc.want)
			}
			if res.Completed != tc.completed {
				t.Errorf("completed %d, want %d", res.Completed, tc.completed)
			}
			for i, a := range res.Attempts {
				if a.Number != i+1 {
					t.Errorf("attempt %d numbered %d", i+1, a.Number)
				}
				retried := strings.Contains(a.Detail, "started again")
				if want := tc.arm == record.ArmUncappedRetry && a.Outcome == record.OutcomeFailed && i < arms.Retries; retried != want {
					t.Errorf("attempt %d (%s): detail %q, want it to say it was started again: %v", i+1, a.Outcome, a.Detail, want)
				}
			}
		})
	}
}

// Of names every baseline and refuses packed (the runner's own) and a name that is no arm.
func TestOf(t *testing.T) {
	for _, a := range record.Arms {
		adm, err := arms.Of(a)
		switch {
		case a == record.ArmPacked:
			if err == nil || !strings.Contains(err.Error(), `"packed"`) {
				t.Errorf("Of(packed) = %v, %v: want an error naming it", adm, err)
			}
		case err != nil || adm.Arm() != a:
			t.Errorf("Of(%s) = %v, %v", a, adm, err)
		}
	}
	if _, err := arms.Of("fast"); err == nil || !strings.Contains(err.Error(), `"fast"`) {
		t.Errorf("Of(fast): %v, want an error naming it", err)
	}
}
