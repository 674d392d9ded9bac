package runner

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu/simjob"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

func TestGPUEventsCovering(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var g gpuEvents
	g.note(enforcer.Event{Kind: enforcer.EventGPUHealth, Stage: "unhealthy", GPU: "A", Time: at(10), Message: "stopped"}, 0)
	g.note(enforcer.Event{Kind: enforcer.EventGPUHealth, Stage: "healthy", GPU: "A", Time: at(20)}, 0)
	g.note(enforcer.Event{Kind: enforcer.EventGPUHealth, Stage: "unhealthy", GPU: "A", Time: at(40), Message: "forced"}, 0)
	after := time.Second
	cases := []struct {
		name       string
		gpu        string
		start, end float64
		want       string
	}{
		{"failed while marked", "A", 5, 12, "stopped"},
		{"failed just before the mark (signal first, mark next)", "A", 5, 9.9, "stopped"},
		{"failed well before the mark", "A", 5, 9, ""},
		{"failed shortly after the mark was cleared", "A", 5, 20.5, "stopped"},
		{"failed long after the mark was cleared", "A", 5, 25, ""},
		{"started after the mark was cleared", "A", 20.2, 20.5, ""},
		{"another GPU", "B", 5, 12, ""},
		{"mark still set at the end", "A", 30, 45, "forced"},
	}
	for _, c := range cases {
		e, ok := g.covering(c.gpu, "", false, at(c.start), at(c.end), after)
		if got := map[bool]string{true: e.Reason, false: ""}[ok]; got != c.want {
			t.Errorf("%s: covered by %q, want %q", c.name, got, c.want)
		}
	}
}

// In isolated mode a task over its cap (one the fence did not hold) explains an out-of-memory
// failure of another job of its GPU while it was over, and nothing else.
func TestNeighbourOverCapCovering(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var g gpuEvents
	g.overCap(enforcer.Event{Kind: enforcer.EventViolation, Stage: "crossed", GPU: "A", Token: "leak", Time: at(10), Bytes: 70 * size.GiB}, 0, "runaway")
	g.overCap(enforcer.Event{Kind: enforcer.EventViolation, Stage: "contained", GPU: "A", Token: "leak", Time: at(10.2)}, 0, "runaway")
	after := time.Second
	cases := []struct {
		name       string
		token      string
		oom        bool
		start, end float64
		want       bool
	}{
		{"neighbour out of memory while the runaway was over", "n", true, 5, 10.1, true},
		{"neighbour out of memory just after the kill", "n", true, 5, 10.8, true},
		{"neighbour failing otherwise", "n", false, 5, 10.1, false},
		{"the runaway itself", "leak", true, 5, 10.1, false},
		{"out of memory well after", "n", true, 5, 14, false},
		{"out of memory before", "n", true, 1, 8, false},
	}
	for _, c := range cases {
		e, ok := g.covering("A", c.token, c.oom, at(c.start), at(c.end), after)
		if ok != c.want || ok && !strings.Contains(e.Reason, "job runaway over its cap") {
			t.Errorf("%s: covered %v (%q), want %v", c.name, ok, e.Reason, c.want)
		}
	}
}

// A neighbour faulted by a GPU-wide event under MPS is re-run and completes; the GPU takes no new
// job while it is marked unhealthy; a job that fails on its own stays failed.
func TestCollateralFailureIsRerun(t *testing.T) {
	t.Parallel()
	sim := newSim(t, "H100=80GiB")
	hold := func(d string, extra ...string) []string {
		return append([]string{"--peak", "2GiB", "--ramp", "50ms", "--hold", d, "--result", "$GPUFRAC_RESULT"}, extra...)
	}
	marks := t.TempDir()
	steadyOn, victimOn := filepath.Join(marks, "steady"), filepath.Join(marks, "victim")
	q := queue.Queue{
		Jobs: []queue.Job{
			// steady is an MPS client that survives the stop; it keeps the GPU marked (drained)
			// until it ends, so the re-runs below must wait for it. steady and victim hold for
			// long enough that the pair, which starts only once both are on the GPU, is stopped
			// while they run, however slowly a loaded machine starts it.
			simJob(t, "steady", "steady", hold("4s", "--mark", steadyOn)...),
			// victim faults (cudaErrorIllegalAddress) when another client is stopped.
			simJob(t, "victim", "victim", hold("3s", "--mps-fault", "--mark", victimOn)...),
			// pair: two processes, each under its MPS limit, together over the cap: the watchdog
			// stops it with SIGINT, a GPU-wide event under MPS. It starts once steady and victim
			// are on the GPU, however slowly they start.
			simJob(t, "pair", "pair", "--procs", "2", "--peak", "3GiB", "--ramp", "300ms", "--hold", "300ms", "--after", steadyOn+","+victimOn),
		},
		Templates: map[string]queue.TemplateSpec{
			"steady": {Name: "steady", PeakBytes: 2 * size.GiB},
			"victim": {Name: "victim", PeakBytes: 2 * size.GiB},
			"pair":   {Name: "pair", PeakBytes: 2 * size.GiB},
		},
	}
	q.Jobs[0].Result = "results/steady.json"
	q.Jobs[1].Result = "results/victim.json"
	o := testOptions(t, sim, record.ArmPacked)
	o.Mode = policy.ModeMPS
	// Without the fence the pair's sum is only seen by the watchdog, whose stop is GPU-wide.
	o.Fence = FenceOff
	res := runQueue(t, q, o)
	if res.Completed != 3 {
		t.Fatalf("completed %d of 3: %+v", res.Completed, res.Attempts)
	}
	if got := outcomes(attemptsOf(res, "pair")); !slices.Equal(got, []record.Outcome{record.OutcomeCapViolation, record.OutcomeOK}) {
		t.Fatalf("pair attempts %v, want [cap-violation ok]", got)
	}
	v := attemptsOf(res, "victim")
	if got := outcomes(v); !slices.Equal(got, []record.Outcome{record.OutcomeCollateral, record.OutcomeOK}) {
		t.Fatalf("victim attempts %v, want [collateral ok]; %+v", got, v)
	}
	if v[0].ExitCode != simjob.ExitFail || !strings.Contains(v[0].Detail, "GPU-wide event") ||
		!strings.Contains(v[0].Detail, "stopped under MPS") || !strings.Contains(v[0].Detail, "cudaErrorIllegalAddress") {
		t.Errorf("collateral attempt: exit %d, detail %q: want exit 1, the event and the job's own error", v[0].ExitCode, v[0].Detail)
	}
	if _, err := os.Stat(v[1].Result); err != nil {
		t.Errorf("the victim's re-run wrote no result: %v", err)
	}
	if s := attemptsOf(res, "steady"); len(s) != 1 || s[0].Outcome != record.OutcomeOK {
		t.Errorf("steady (no --mps-fault) should live through the stop: %+v", s)
	}
	if res.Collateral != 1 {
		t.Errorf("Result.Collateral = %d, want 1", res.Collateral)
	}
	if len(res.GPUEvents) == 0 {
		t.Fatal("no GPU-wide event recorded")
	}
	for _, e := range res.GPUEvents {
		if e.End.IsZero() {
			t.Fatalf("GPU still unhealthy at the end: %+v", e)
		}
		for _, a := range res.Attempts {
			if a.Start.After(e.Start) && a.Start.Before(e.End) {
				t.Errorf("%s attempt %d started at %s, while the GPU was unhealthy (%s to %s)",
					a.Job, a.Number, a.Start.Format("15:04:05.000"), e.Start.Format("15:04:05.000"), e.End.Format("15:04:05.000"))
			}
		}
	}
	// The GPU stayed marked until steady, the last client, left (its memory goes 4.05 s after it
	// starts; under -race the process itself exits a second later), and the re-run came after.
	last := res.GPUEvents[len(res.GPUEvents)-1]
	if st := attemptsOf(res, "steady")[0]; last.End.Before(st.Start.Add(4*time.Second)) || v[1].Start.Before(last.End) {
		t.Errorf("GPU healthy %s after steady started, victim re-run %s after: the mark must hold until steady's memory is gone (4.05s), the re-run wait for it",
			last.End.Sub(st.Start), v[1].Start.Sub(st.Start))
	}
}

func TestOwnFailureIsNotCollateral(t *testing.T) {
	t.Parallel()
	sim := newSim(t, "H100=80GiB")
	q := queue.Queue{
		Jobs: []queue.Job{
			simJob(t, "crash", "crash", "--peak", "2GiB", "--ramp", "50ms", "--hold", "5s", "--fail-after", "300ms", "--mps-fault"),
			simJob(t, "ok", "ok", "--peak", "2GiB", "--ramp", "50ms", "--hold", "500ms"),
		},
		Templates: map[string]queue.TemplateSpec{
			"crash": {Name: "crash", PeakBytes: 2 * size.GiB},
			"ok":    {Name: "ok", PeakBytes: 2 * size.GiB},
		},
	}
	o := testOptions(t, sim, record.ArmPacked)
	o.Mode = policy.ModeMPS
	res := runQueue(t, q, o)
	if got := outcomes(attemptsOf(res, "crash")); !slices.Equal(got, []record.Outcome{record.OutcomeFailed}) {
		t.Fatalf("crash attempts %v, want [failed] and no re-run", got)
	}
	if res.Collateral != 0 || len(res.GPUEvents) != 0 || res.Completed != 1 {
		t.Fatalf("collateral %d, events %v, completed %d: want 0, none, 1", res.Collateral, res.GPUEvents, res.Completed)
	}
}
