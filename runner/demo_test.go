package runner

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu/simjob"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// The demo (examples/queues/demo.hcl) does what its comments say, on the simulated backend in
// under a minute: jobs packed by their declared footprints, a job borrowing past its guarantee
// in one attempt, and a job stopped where it would reach its neighbours' guarantees and re-run
// with a larger guarantee, its neighbours untouched. Every line its comments quote (marked ">")
// is printed.
func TestDemoDoesWhatItsCommentsSay(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "examples", "queues", "demo.hcl")
	q, err := queue.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for i := range q.Jobs {
		// `gpufrac simjob ARGS` is this test binary with ARGS (TestMain runs it as the job).
		q.Jobs[i].Command = append([]string{exe}, q.Jobs[i].Command[2:]...)
		q.Jobs[i].Env = map[string]string{simjob.EnvChild: "1"}
	}
	o := Options{Backend: newSim(t, q.SimulatedGPUs...), OutDir: t.TempDir(), StateDir: t.TempDir()}
	var out bytes.Buffer
	o.Progress = &out
	res := runQueue(t, q, o)
	defer func() {
		if t.Failed() {
			t.Logf("demo output:\n%s", out.String())
		}
	}()
	if res.Completed != len(q.Jobs) || res.Makespan().Minutes() >= 1 {
		t.Fatalf("%d of %d jobs completed in %s, want all in under a minute", res.Completed, len(q.Jobs), res.Makespan())
	}
	// 1. Packing by footprint: each job's first guarantee is the cap its declared peak earns,
	// and the jobs ran side by side.
	pol := res.Policy
	for _, j := range q.Jobs {
		a := attemptsOf(res, j.Name)[0]
		want := size.Bytes(pol.Units(pol.Cap(q.Templates[j.Template].PeakBytes))) * pol.UnitBytes
		if a.CapBytes != want {
			t.Errorf("%s started with a %s guarantee, want %s from its declared peak", j.Name, a.CapBytes, want)
		}
	}
	if n := record.UseOf(res.Attempts).MostRunning; n < 4 {
		t.Errorf("at most %d jobs ran at once, want 4 packed side by side", n)
	}
	// 2. The grower borrowed past its guarantee and finished in one attempt.
	if g := attemptsOf(res, "grower-1"); len(g) != 1 || g[0].Outcome != record.OutcomeOK || g[0].BorrowedBytes < 15*size.GiB {
		t.Errorf("grower-1: want one ok attempt that borrowed about 18GiB, got %+v", g)
	}
	// 3. The leaker failed inside itself after waiting, climbed to a larger guarantee, and
	// finished; nobody else ran twice.
	checkLadder(t, res, "leaker-1", policy.DefaultMaxAttempts, record.OutcomeOK)
	lk := attemptsOf(res, "leaker-1")
	if len(lk) != 2 || lk[0].Violation == nil || lk[0].Violation.Action != enforcer.ActionOOMInProcess || lk[0].BorrowWait == 0 ||
		lk[1].WholeGPU || lk[1].CapBytes <= lk[0].CapBytes {
		t.Errorf("leaker-1: want a fenced out-of-memory after a wait, then one re-run with a larger guarantee beside others, got %+v", lk)
	}
	for _, j := range q.Jobs {
		if a := attemptsOf(res, j.Name); j.Name != "leaker-1" && (len(a) != 1 || a[0].Outcome != record.OutcomeOK) {
			t.Errorf("%s ran %d times (%v): a neighbour was touched", j.Name, len(a), outcomes(a))
		}
	}
	// The comments' quoted lines, "..." standing for figures that vary.
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		lines = append(lines, stampRE.ReplaceAllString(l, ""))
	}
	quoted := 0
	for _, l := range strings.Split(string(src), "\n") {
		_, q, ok := strings.Cut(l, "#      > ")
		if !ok {
			continue
		}
		quoted++
		parts := strings.Split(q, "...")
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		re := regexp.MustCompile("^" + strings.Join(parts, ".+") + "$")
		found := false
		for _, o := range lines {
			found = found || re.MatchString(o)
		}
		if !found {
			t.Errorf("demo.hcl quotes a line the run did not print:\n\t%s", q)
		}
	}
	if quoted < 5 {
		t.Errorf("demo.hcl quotes %d lines of the run, want the three things it shows", quoted)
	}
	// The README's demo paragraph quotes the run too, in `code` spans, spacing collapsed.
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, para, ok := strings.Cut(string(readme), "it shows the three things gpufrac does")
	para, _, _ = strings.Cut(para, "\n\n")
	if !ok {
		t.Fatal("README.md no longer describes the demo's three things")
	}
	flat := strings.Join(strings.Fields(out.String()), " ")
	spans := 0
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(para, -1) {
		q := strings.Join(strings.Fields(m[1]), " ")
		if !strings.ContainsAny(q, "0123456789") {
			continue // a name, not a quote of the output
		}
		spans++
		parts := strings.Split(q, "...")
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		if !regexp.MustCompile(strings.Join(parts, `\S+`)).MatchString(flat) {
			t.Errorf("README.md quotes %q, which the demo did not print", q)
		}
	}
	if spans < 3 {
		t.Errorf("README.md's demo paragraph quotes %d figures of the run, want its three things", spans)
	}
	if row := regexp.MustCompile(`(?m)^grower-1\s+grower\s+1 of 3\s+ok\s+0\s+6GiB\s+18GiB\s+78GiB\s+24GiB\s`); !row.MatchString(out.String()) {
		t.Errorf("the summary has no row %s", row)
	}
}

var stampRE = regexp.MustCompile(`^\[\s*\d+\.\d+s\] `)
