package runner

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
)

// A job that fails is started again only in the uncapped-retry arm, at most uncappedRetries
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
			sim := newSim(t, "H100=80GiB")
			script := "exit 1"
			if tc.job == "once" {
				// The first attempt leaves a mark and fails; a later one finds it and succeeds.
				script = `test -e "$1" || { touch "$1"; exit 1; }`
			}
			mark := filepath.Join(t.TempDir(), "failed-once")
			q := queue.Queue{Jobs: []queue.Job{{Name: "j", Template: "t", Command: []string{"sh", "-c", script, "sh", mark}}}}
			res := runQueue(t, q, testOptions(t, sim, tc.arm))
			if got := outcomes(res.Attempts); !slices.Equal(got, tc.want) {
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
				if want := tc.arm == record.ArmUncappedRetry && a.Outcome == record.OutcomeFailed && i < uncappedRetries; retried != want {
					t.Errorf("attempt %d (%s): detail %q, want it to say it was started again: %v", i+1, a.Outcome, a.Detail, want)
				}
			}
		})
	}
}

// The retry arm co-locates like uncapped: up to max_tasks_per_gpu at once, no caps, no probes.
func TestUncappedRetryConcurrency(t *testing.T) {
	t.Parallel()
	sim := newSim(t, "H100=80GiB")
	var jobs []queue.Job
	for i := range 8 {
		jobs = append(jobs, simJob(t, "j"+string(rune('a'+i)), "t", "--peak", "1GiB", "--ramp", "20ms", "--hold", "400ms"))
	}
	res := runQueue(t, queue.Queue{Jobs: jobs}, testOptions(t, sim, record.ArmUncappedRetry))
	if res.Completed != 8 {
		t.Fatalf("completed %d of 8", res.Completed)
	}
	if got := maxOverlap(res.Attempts); got != 6 {
		t.Errorf("%d jobs at once, want 6", got)
	}
	for _, a := range res.Attempts {
		if a.Probe || a.Capped || a.CapBytes != 0 {
			t.Errorf("%s: probe %v, capped %v, cap %s; the arm has no caps", a.Job, a.Probe, a.Capped, a.CapBytes)
		}
	}
}
