package runner

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// Every kind of failed attempt climbs one ladder (policy.Policy.Next), with borrowing on and
// off, in isolated and mps mode: at most the bound's attempts, each with strictly more room than the last or the GPU
// alone, an end that is ok or exhausted with a reason, a neighbour never touched, and the words
// printed before each re-run are the ones its start repeats.
func TestEveryFailureClimbsTheLadder(t *testing.T) {
	t.Parallel()
	leak := func(extra ...string) []string {
		return append([]string{"--peak", "1GiB", "--ramp", "50ms", "--hold", "200ms"}, extra...)
	}
	for _, tc := range []struct {
		name     string
		borrow   string
		fence    enforcer.FenceMode
		wait     time.Duration
		lk       []string
		spec     queue.TemplateSpec
		job      func(*queue.Job)
		bound    int
		want     record.Outcome
		action   string // of the first attempt's violation; "" = any
		why      string // in the exhausted job's reason
		minTries int
		nHold    string // how long the neighbour holds its memory (default 1200ms)
		mode     policy.Mode
	}{
		{name: "fenced out-of-memory, borrowing off", borrow: node.BorrowOff, lk: leak("--leak-to", "12GiB", "--leak-rate", "8GiB"),
			bound: 3, want: record.OutcomeOK, action: enforcer.ActionOOMInProcess, minTries: 3},
		{name: "out of memory at the pinned limit under MPS", mode: policy.ModeMPS, lk: leak("--leak-to", "12GiB", "--leak-rate", "8GiB"),
			bound: 3, want: record.OutcomeOK, minTries: 3},
		{name: "watchdog kill, no fence", borrow: node.BorrowOff, fence: enforcer.FenceOff, lk: leak("--leak-to", "12GiB", "--leak-rate", "8GiB"),
			bound: 3, want: record.OutcomeOK, action: enforcer.ActionSIGKILL, minTries: 3},
		{name: "watchdog kill of a borrower holding memory outside the fence", borrow: node.BorrowWait, lk: []string{"--peak", "1GiB", "--ramp", "50ms", "--hold", "2s", "--outside-fence", "3GiB"},
			bound: 3, want: record.OutcomeOK, action: enforcer.ActionSIGKILL, minTries: 2},
		{name: "watchdog kill of a borrower whose pool holds more than it was charged", borrow: node.BorrowWait,
			lk: []string{"--peak", "3GiB", "--ramp", "50ms", "--hold", "2s", "--pool-slack", "2GiB"}, bound: 3, want: record.OutcomeOK, action: enforcer.ActionSIGKILL, minTries: 2},
		{name: "a borrower whose wait ran out", borrow: node.BorrowWait, wait: 200 * time.Millisecond,
			lk: leak("--leak-to", "75GiB", "--leak-rate", "80GiB"), nHold: "4s", bound: 3, want: record.OutcomeOK, action: enforcer.ActionOOMInProcess, minTries: 2},
		// Under MPS with borrowing a client's pinned limit is the GPU's budget, so the fence and
		// the watchdog alone hold its cap: the same rungs as in isolated mode (the watchdog's stop
		// is SIGINT there, a GPU-wide event).
		{name: "a borrower whose wait ran out, under MPS", mode: policy.ModeMPS, borrow: node.BorrowWait, wait: 200 * time.Millisecond,
			lk: leak("--leak-to", "75GiB", "--leak-rate", "80GiB"), nHold: "4s", bound: 3, want: record.OutcomeOK, action: enforcer.ActionOOMInProcess, minTries: 2},
		{name: "watchdog kill of a borrower holding memory outside the fence, under MPS", mode: policy.ModeMPS, borrow: node.BorrowWait,
			lk: []string{"--peak", "1GiB", "--ramp", "50ms", "--hold", "2s", "--outside-fence", "3GiB"}, bound: 3, want: record.OutcomeOK, action: enforcer.ActionSIGINT, minTries: 2},
		{name: "a declared cap is raised", borrow: node.BorrowOff, lk: leak("--leak-to", "6GiB", "--leak-rate", "8GiB"),
			spec: queue.TemplateSpec{CapBytes: 3 * size.GiB}, bound: 3, want: record.OutcomeOK, minTries: 2},
		{name: "cap_fixed", borrow: node.BorrowOff, lk: leak("--leak-to", "6GiB", "--leak-rate", "8GiB"),
			spec: queue.TemplateSpec{CapBytes: 3 * size.GiB, CapFixed: true}, bound: 3, want: record.OutcomeExhausted, why: "cap_fixed", minTries: 1},
		{name: "a bound of 1", borrow: node.BorrowOff, lk: leak("--leak-to", "12GiB", "--leak-rate", "8GiB"),
			job: func(j *queue.Job) { j.MaxAttempts = 1 }, bound: 1, want: record.OutcomeExhausted, why: "1 of 1 attempts used", minTries: 1},
		{name: "a bound of 5", borrow: node.BorrowOff, lk: leak("--leak-to", "30GiB", "--leak-rate", "16GiB"),
			job: func(j *queue.Job) { j.MaxAttempts = 5 }, bound: 5, want: record.OutcomeOK, minTries: 5},
		{name: "a job that fails alone is exhausted", borrow: node.BorrowOff, lk: leak("--leak-to", "200GiB", "--leak-rate", "40GiB"),
			bound: 3, want: record.OutcomeExhausted, why: "alone with the whole GPU", minTries: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sim := newSim(t, "H100=80GiB")
			nHold := tc.nHold
			if nHold == "" {
				nHold = "1200ms"
			}
			spec := tc.spec
			spec.Name = "leak"
			if spec.CapBytes == 0 {
				spec.PeakBytes = size.GiB
			}
			q := queue.Queue{
				Jobs: []queue.Job{
					simJob(t, "n1", "good", "--peak", "4GiB", "--ramp", "50ms", "--hold", nHold, "--result", "$GPUFRAC_RESULT"),
					simJob(t, "lk", "leak", tc.lk...),
				},
				Templates: map[string]queue.TemplateSpec{"leak": spec, "good": {Name: "good", PeakBytes: 4 * size.GiB}},
			}
			q.Jobs[0].Result = "n1.json"
			if tc.job != nil {
				tc.job(&q.Jobs[1])
			}
			o := testOptions(t, sim, record.ArmPacked)
			o.Borrow, o.Fence, o.BorrowWait, o.Mode = tc.borrow, tc.fence, tc.wait, tc.mode
			var out bytes.Buffer
			o.Progress = &out
			res := runQueue(t, q, o)
			jr := checkLadder(t, res, "lk", tc.bound, tc.want)
			lk := attemptsOf(res, "lk")
			if len(lk) < tc.minTries {
				t.Errorf("lk: %d attempts %v, want at least %d", len(lk), outcomes(lk), tc.minTries)
			}
			if v := lk[0].Violation; tc.action != "" && (v == nil || v.Action != tc.action) {
				t.Errorf("lk's first attempt: violation %+v, want %s", v, tc.action)
			}
			if !strings.Contains(jr.Reason, tc.why) {
				t.Errorf("lk's reason %q lacks %q", jr.Reason, tc.why)
			}
			if tc.spec.CapBytes > 0 && !tc.spec.CapFixed && lk[1].CapBytes <= tc.spec.CapBytes && !lk[1].WholeGPU {
				t.Errorf("the declared %s cap was not raised: %+v", tc.spec.CapBytes, lk[1])
			}
			if n := attemptsOf(res, "n1"); len(n) != 1 || n[0].Outcome != record.OutcomeOK || n[0].Violation != nil {
				t.Errorf("the neighbour was touched: %+v", n)
			}
			checkAnnounced(t, out.String(), "lk", len(lk)-1)
			if t.Failed() || testing.Verbose() {
				t.Logf("progress:\n%s", out.String())
			}
		})
	}
}

var nextRE = regexp.MustCompile(`next: (attempt \d+ of \d+ (with a \S+ guarantee|alone with the GPU))`)

// checkAnnounced checks that each step a job's failed attempt announced is how its next attempt
// started, in the same words, and that every re-run of the job was announced so.
func checkAnnounced(t *testing.T, out, job string, reruns int) {
	t.Helper()
	var lines [][]string // tag, job, rest
	for _, l := range strings.Split(out, "\n") {
		f := strings.SplitN(strings.TrimSpace(stampRE.ReplaceAllString(l, "")), " ", 2)
		if len(f) < 2 {
			continue
		}
		rest := strings.TrimSpace(f[1])
		name, text, _ := strings.Cut(rest, " ")
		lines = append(lines, []string{f[0], name, strings.TrimSpace(text)})
	}
	announced := 0
	for i, l := range lines {
		if l[1] != job {
			continue
		}
		m := nextRE.FindStringSubmatch(l[2])
		if m == nil {
			continue
		}
		announced++
		found := false
		for _, later := range lines[i+1:] {
			if later[0] == "start" && later[1] == job {
				found = strings.Contains(later[2], "RE-RUN "+m[1])
				break
			}
		}
		if !found {
			t.Errorf("%s %s announced %q; the next start of %s does not say it", l[0], job, m[1], job)
		}
	}
	if announced != reruns {
		t.Errorf("%d re-runs of %s announced in the progress, want %d", announced, job, reruns)
	}
}
