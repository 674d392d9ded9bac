package runner

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
)

// checkLadder checks one job's attempts against the ladder: at most bound of them, each
// failed one says what comes next and the next attempt starts exactly so (a strictly larger
// guarantee, or the GPU alone), never the same room twice, and the job ends as the last
// attempt's step says (want: ok or exhausted). It returns the job's result.
func checkLadder(t *testing.T, res *record.Result, job string, bound int, want record.Outcome) record.JobResult {
	t.Helper()
	atts := attemptsOf(res, job)
	var jr record.JobResult
	for _, j := range res.Jobs {
		if j.Name == job {
			jr = j
		}
	}
	if len(atts) == 0 || len(atts) > bound || jr.Attempts != len(atts) || jr.MaxAttempts != bound {
		t.Fatalf("%s: %d attempts (job says %d of %d), want 1 to %d: %v", job, len(atts), jr.Attempts, jr.MaxAttempts, bound, outcomes(atts))
	}
	for i, a := range atts {
		if a.Outcome == record.OutcomeProbe {
			continue // the runner's own window: the job runs on under the cap it earned
		}
		last := i == len(atts)-1
		if a.Outcome.Failed() && a.Next == "" {
			t.Errorf("%s attempt %d (%s) says nothing about what comes next", job, a.Number, a.Outcome)
		}
		if last {
			if a.Outcome.Failed() && a.NextKind != policy.StepExhausted {
				t.Errorf("%s: its last attempt announced %q, but nothing followed", job, a.Next)
			}
			continue
		}
		n := atts[i+1]
		switch a.NextKind {
		case policy.StepRaise:
			if n.WholeGPU || n.CapBytes != a.NextCapBytes || n.CapBytes <= a.CapBytes {
				t.Errorf("%s: attempt %d announced %q; attempt %d got guarantee %s (whole GPU %v) after %s", job, a.Number, a.Next, n.Number, n.CapBytes, n.WholeGPU, a.CapBytes)
			}
		case policy.StepAlone:
			if !n.WholeGPU {
				t.Errorf("%s: attempt %d announced %q; attempt %d did not have the GPU alone", job, a.Number, a.Next, n.Number)
			}
		case "":
			if a.Outcome.Failed() && a.Outcome != record.OutcomeCollateral {
				t.Errorf("%s: attempt %d failed (%s) with no step", job, a.Number, a.Outcome)
			}
		default:
			t.Errorf("%s: attempt %d announced %q, yet attempt %d ran", job, a.Number, a.Next, n.Number)
		}
		if a.WholeGPU && n.Outcome != record.OutcomeProbe && a.Outcome != record.OutcomeCollateral {
			t.Errorf("%s: attempt %d had the GPU alone and failed, yet attempt %d ran", job, a.Number, n.Number)
		}
		if want := "attempt " + strconv.Itoa(n.Number) + " of "; a.Next != "" && a.NextKind != policy.StepExhausted && !strings.HasPrefix(a.Next, want) {
			t.Errorf("%s: attempt %d announced %q, the next one is number %d", job, a.Number, a.Next, n.Number)
		}
	}
	if jr.Outcome != want {
		t.Errorf("%s ended %s (%s), want %s; ladder %s", job, jr.Outcome, jr.Reason, want, jr.Ladder)
	}
	if want == record.OutcomeExhausted && jr.Reason == "" {
		t.Errorf("%s exhausted with no reason", job)
	}
	return jr
}
