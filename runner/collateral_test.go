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
	o.Fence = enforcer.FenceOff
	res := runAll(t, q, o)
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
