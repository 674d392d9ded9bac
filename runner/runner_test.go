package runner

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/gpu/simjob"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/report"
	"github.com/gpufrac/gpufrac/size"
)

func TestMain(m *testing.M) {
	simjob.RunIfChild() // a job started by a test runs here and exits
	os.Exit(m.Run())
}

// simJob is a job that re-executes this test binary as a simulated GPU job.
func simJob(t testing.TB, name, template string, args ...string) queue.Job {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return queue.Job{Name: name, Template: template, Command: append([]string{exe}, args...),
		Env: map[string]string{simjob.EnvChild: "1"}}
}

func newSim(t testing.TB, gpus ...string) *gpu.Simulated {
	t.Helper()
	s, _ := testutil.NewSim(t, gpus...)
	return s
}

// testRule is an admission rule other than packed, as the benchmark supplies them (bench/arms):
// jobs alone or side by side with no caps.
type testRule struct {
	arm   record.Arm
	alone bool
}

func (r testRule) Arm() record.Arm { return r.arm }
func (r testRule) PerGPU(policyMax int) int {
	if r.alone {
		return 1
	}
	return policyMax
}
func (r testRule) Alone(bool) bool                        { return r.alone }
func (testRule) Share(ledger.GPUState) (size.Bytes, bool) { return 0, false }
func (testRule) Retries() int                             { return 0 }

func testOptions(t testing.TB, b gpu.Backend, arm record.Arm) Options {
	p := policy.Default()
	p.WatchdogInterval = 20 * time.Millisecond
	return Options{Arm: arm, Backend: b, OutDir: t.TempDir(), Policy: p, SampleInterval: 10 * time.Millisecond,
		StopGrace: 2 * time.Second}
}

// withoutBorrowing is a run where a cap is a job's guarantee and the most it may use: the rules
// for probes and re-runs that hold when borrowing is off (and always under MPS).
func withoutBorrowing(o Options) Options {
	o.Borrow = node.BorrowOff
	return o
}

func runQueue(t *testing.T, q queue.Queue, o Options) *record.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Run(ctx, q, o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

// runAll runs q and fails the test unless every job of it completed.
func runAll(t *testing.T, q queue.Queue, o Options) *record.Result {
	t.Helper()
	res := runQueue(t, q, o)
	if res.Completed != len(q.Jobs) {
		t.Fatalf("completed %d of %d: %+v", res.Completed, len(q.Jobs), res.Attempts)
	}
	return res
}

func attemptsOf(res *record.Result, job string) []record.Attempt {
	var out []record.Attempt
	for _, a := range res.Attempts {
		if a.Job == job {
			out = append(out, a)
		}
	}
	return out
}

func outcomes(atts []record.Attempt) []record.Outcome {
	var out []record.Outcome
	for _, a := range atts {
		out = append(out, a.Outcome)
	}
	return out
}

func TestColdProbeThenWarmReuse(t *testing.T) {
	t.Parallel()
	sim := newSim(t, "H100=80GiB")
	state := t.TempDir()
	q := queue.Queue{Jobs: []queue.Job{
		simJob(t, "a1", "small", "--peak", "2GiB", "--ramp", "50ms", "--hold", "300ms"),
		simJob(t, "a2", "small", "--peak", "2GiB", "--ramp", "50ms", "--hold", "300ms"),
		simJob(t, "a3", "small", "--peak", "2GiB", "--ramp", "50ms", "--hold", "300ms"),
	}}
	o := withoutBorrowing(testOptions(t, sim, record.ArmPacked))
	o.StateDir, o.Profiles = state, record.ProfilesCold
	cold := runQueue(t, q, o)
	if cold.Completed != 3 {
		t.Fatalf("cold run completed %d of 3: %+v", cold.Completed, cold.Jobs)
	}
	// Isolated mode probes in place, under a protective cap of half the 78GiB budget. The
	// template's other jobs still wait for the probe.
	first := attemptsOf(cold, "a1")
	if len(first) != 1 || !first[0].Probe || first[0].WholeGPU || first[0].CapBytes != 39*size.GiB || first[0].Outcome != record.OutcomeOK {
		t.Fatalf("a1 should be one completed probe under a 39GiB protective cap, got %+v", first)
	}
	// The probe sees the whole 2GiB (simjob's peak includes its context).
	if first[0].PeakBytes < 2*size.GiB-64*size.MiB || first[0].PeakBytes > 2*size.GiB {
		t.Fatalf("probe peak %s, want about 2GiB", first[0].PeakBytes)
	}
	wantCap := size.Bytes(o.Policy.Units(o.Policy.Cap(first[0].PeakBytes))) * o.Policy.UnitBytes
	for _, name := range []string{"a2", "a3"} {
		a := attemptsOf(cold, name)
		if len(a) != 1 || a[0].Probe || a[0].WholeGPU || a[0].CapBytes != wantCap {
			t.Fatalf("%s: want one capped attempt with cap %s, got %+v", name, wantCap, a)
		}
		if a[0].Start.Before(first[0].End) {
			t.Errorf("%s started before the probe ended", name)
		}
	}
	snap, err := ledger.ReadSnapshot(state)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Profiles) != 1 || snap.Profiles[0].Template != "small" || snap.Profiles[0].Source != ledger.ProfileProbe {
		t.Fatalf("profiles after the cold run: %+v", snap.Profiles)
	}

	o2 := withoutBorrowing(testOptions(t, sim, record.ArmPacked))
	o2.StateDir, o2.Profiles = state, record.ProfilesWarm
	warm := runQueue(t, q, o2)
	if warm.Completed != 3 {
		t.Fatalf("warm run completed %d of 3", warm.Completed)
	}
	for _, a := range warm.Attempts {
		if a.Probe || a.WholeGPU || a.CapBytes != wantCap {
			t.Errorf("warm attempt %s: probe=%v whole=%v cap=%s, want a packed job with cap %s", a.Job, a.Probe, a.WholeGPU, a.CapBytes, wantCap)
		}
	}
	if got := record.UseOf(warm.Attempts).MostRunning; got != 3 {
		t.Errorf("warm run packed %d jobs at once, want all 3", got)
	}
}

func TestPackingAdmitsWhileCapsFit(t *testing.T) {
	t.Parallel()
	// Budget 20GiB - 2GiB headroom = 18GiB; cap of a 2GiB peak = 2GiB x 1.15 + 1.5GB -> 4 units:
	// four jobs fit (16GiB), the fifth and sixth wait.
	sim := newSim(t, "A100=20GiB")
	var jobs []queue.Job
	for _, n := range []string{"j1", "j2", "j3", "j4", "j5", "j6"} {
		jobs = append(jobs, simJob(t, n, "t", "--peak", "2GiB", "--ramp", "50ms", "--hold", "500ms"))
	}
	q := queue.Queue{Jobs: jobs, Templates: map[string]queue.TemplateSpec{"t": {Name: "t", PeakBytes: 2 * size.GiB}}}
	o := testOptions(t, sim, record.ArmPacked)
	res := runQueue(t, q, o)
	if res.Completed != 6 {
		t.Fatalf("completed %d of 6", res.Completed)
	}
	if got := record.UseOf(res.Attempts).MostRunning; got != 4 {
		t.Fatalf("%d jobs ran at once, want 4 (the caps of 4 fill the 18GiB budget)", got)
	}
	for _, a := range res.Attempts {
		if a.CapBytes != 4*size.GiB || a.Probe {
			t.Errorf("%s: cap %s probe %v, want a 4GiB cap and no probe (declared footprint)", a.Job, a.CapBytes, a.Probe)
		}
	}
}

func TestLeakerIsContainedAndRerunAlone(t *testing.T) {
	t.Parallel()
	type arm struct {
		mode  policy.Mode
		fence enforcer.FenceMode
	}
	for _, c := range []arm{{policy.ModeIsolated, enforcer.FenceOn}, {policy.ModeIsolated, enforcer.FenceOff}, {policy.ModeMPS, enforcer.FenceOn}, {policy.ModeMPS, enforcer.FenceOff}} {
		mode := c.mode
		t.Run(string(mode)+"/fence-"+string(c.fence), func(t *testing.T) {
			t.Parallel()
			sim := newSim(t, "H100=80GiB")
			q := queue.Queue{
				Jobs: []queue.Job{
					simJob(t, "good1", "good", "--peak", "4GiB", "--ramp", "50ms", "--hold", "900ms", "--result", "$GPUFRAC_RESULT"),
					simJob(t, "leaker", "leak", "--peak", "2GiB", "--ramp", "50ms", "--hold", "100ms", "--leak-to", "12GiB", "--leak-rate", "8GiB"),
					simJob(t, "good2", "good", "--peak", "4GiB", "--ramp", "50ms", "--hold", "900ms", "--result", "$GPUFRAC_RESULT"),
				},
				Templates: map[string]queue.TemplateSpec{
					"good": {Name: "good", PeakBytes: 4 * size.GiB},
					"leak": {Name: "leak", PeakBytes: 2 * size.GiB},
				},
			}
			q.Jobs[0].Result = "results/good1.json"
			q.Jobs[2].Result = "results/good2.json"
			o := withoutBorrowing(testOptions(t, sim, record.ArmPacked))
			o.Mode = mode
			o.Fence = c.fence
			o.StateDir = t.TempDir()
			res := runAll(t, q, o)
			// It climbs the ladder: its cap, a larger guarantee, then the GPU alone, where its
			// 12GiB fit.
			checkLadder(t, res, "leaker", policy.DefaultMaxAttempts, record.OutcomeOK)
			l := attemptsOf(res, "leaker")
			if got := outcomes(l); !slices.Equal(got, []record.Outcome{record.OutcomeCapViolation, record.OutcomeCapViolation, record.OutcomeOK}) {
				t.Fatalf("leaker attempts %v, want [cap-violation cap-violation ok]", got)
			}
			if l[0].WholeGPU || l[1].WholeGPU || !l[2].WholeGPU {
				t.Fatalf("leaker: want packed, packed with more room, then alone: %+v", l)
			}
			v := l[0].Violation
			switch {
			case c.fence == enforcer.FenceOn && mode == policy.ModeIsolated && (v == nil || v.Action != enforcer.ActionOOMInProcess):
				t.Errorf("with the fence the leaker should fail inside itself at its cap, got %+v", v)
			case c.fence == enforcer.FenceOn && v != nil && v.Action != enforcer.ActionOOMInProcess:
				// Under MPS the watchdog names the in-process exit only when a sample caught the
				// leaker near its limit, which a loaded machine can skip (the runner still sees
				// the job's out-of-memory exit); what it records must be that and nothing harsher.
				t.Errorf("with the fence the leaker should fail inside itself at its cap, got %+v", v)
			case c.fence == enforcer.FenceOn && mode == policy.ModeIsolated && !strings.Contains(v.Detail, "allocation fence refused"):
				// Under MPS the simulated pinned limit, which counts the context, bites first.
				t.Errorf("isolated mode: the fence should have refused the leak, got %+v", v)
			case c.fence == enforcer.FenceOn && l[0].PeakBytes > l[0].CapBytes+enforcer.DefaultAllowance:
				// The fence counts allocations; the context is the allowance's.
				t.Errorf("with the fence the leaker held %s, past its %s cap and the context allowance", l[0].PeakBytes, l[0].CapBytes)
			case c.fence == enforcer.FenceOff && mode == policy.ModeIsolated && (v == nil || v.Action != enforcer.ActionSIGKILL):
				t.Errorf("isolated mode without the fence: the watchdog should have killed the leaker, got %+v", v)
			}
			for _, name := range []string{"good1", "good2"} {
				a := attemptsOf(res, name)
				if len(a) != 1 || a[0].Outcome != record.OutcomeOK || a[0].ExitCode != 0 {
					t.Errorf("%s was affected by the leaker: %+v", name, a)
				}
				if _, err := os.Stat(a[0].Result); err != nil {
					t.Errorf("%s wrote no result: %v", name, err)
				}
				if l[2].Start.Before(a[0].End) {
					t.Errorf("the leaker's re-run alone started at %s while %s ran until %s: it must run alone", l[2].Start, name, a[0].End)
				}
			}
			snap, err := ledger.ReadSnapshot(o.StateDir)
			if err != nil {
				t.Fatal(err)
			}
			var prof *ledger.Profile
			for i := range snap.Profiles {
				if snap.Profiles[i].Template == "leak" {
					prof = &snap.Profiles[i]
				}
			}
			if prof == nil || prof.Source != ledger.ProfileViolation || prof.PeakBytes < l[2].PeakBytes {
				t.Fatalf("leak profile %+v: want source violation and a peak of at least the re-run's %s", prof, l[2].PeakBytes)
			}
		})
	}
}

func TestOutputsAreWrittenAndParse(t *testing.T) {
	t.Parallel()
	sim := newSim(t, "H100=80GiB")
	q := queue.Queue{Jobs: []queue.Job{
		simJob(t, "x", "t", "--peak", "1GiB", "--ramp", "50ms", "--hold", "200ms"),
		simJob(t, "y", "t", "--peak", "1GiB", "--ramp", "50ms", "--hold", "200ms"),
		simJob(t, "bad", "u", "--peak", "1GiB", "--hold", "1s", "--fail-after", "100ms"),
	}}
	o := testOptions(t, sim, record.ArmPacked)
	var progress bytes.Buffer
	o.Progress = &progress
	res := runQueue(t, q, o)
	if res.Completed != 2 {
		t.Fatalf("completed %d, want 2 (bad fails)", res.Completed)
	}
	data, err := os.ReadFile(filepath.Join(o.OutDir, record.ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	var back record.Result
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatalf("results.json does not parse: %v", err)
	}
	if back.Arm != record.ArmPacked || len(back.Attempts) != len(res.Attempts) || back.Backend != gpu.KindSimulated {
		t.Errorf("results.json: arm %q, %d attempts, backend %q", back.Arm, len(back.Attempts), back.Backend)
	}
	f, err := os.Open(filepath.Join(o.OutDir, record.AttemptsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("attempts.csv does not parse: %v", err)
	}
	if len(rows) != len(res.Attempts)+1 || !slices.Equal(rows[0], record.CSVHeader) {
		t.Fatalf("attempts.csv: %d rows (want %d) header %v", len(rows), len(res.Attempts)+1, rows[0])
	}
	var badOutcome record.Outcome
	col := slices.Index(record.CSVHeader, "outcome")
	for _, r := range rows[1:] {
		if r[0] == "bad" {
			badOutcome = record.Outcome(r[col])
		}
	}
	if badOutcome != record.OutcomeFailed {
		t.Errorf("bad job's outcome in the CSV is %q, want failed", badOutcome)
	}
	html, err := os.ReadFile(filepath.Join(o.OutDir, report.File))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "SIMULATED", "packed arm", "jobs per GPU-hour", "</html>"} {
		if !bytes.Contains(html, []byte(want)) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	out := progress.String()
	for _, want := range []string{"SIMULATED", "FAILED", "report:", "2 of 3 jobs completed"} {
		if !strings.Contains(out, want) {
			t.Errorf("progress output lacks %q:\n%s", want, out)
		}
	}
}

func TestRunRejectsBadOptions(t *testing.T) {
	t.Parallel()
	sim := newSim(t, "H100=80GiB")
	q := queue.Queue{Jobs: []queue.Job{{Name: "a", Template: "a", Command: []string{"true"}}}}
	tests := []struct {
		name string
		mod  func(*Options)
		want string
	}{
		{"arm", func(o *Options) { o.Arm = "fast" }, `"fast"`},
		{"baseline without its rules", func(o *Options) { o.Arm = record.ArmStatic }, `"static" is one of the benchmark's baselines`},
		{"rules of another arm", func(o *Options) { o.Arm, o.Admission = record.ArmStatic, testRule{arm: record.ArmUncapped} }, `"uncapped"`},
		{"packed with other rules", func(o *Options) { o.Admission = testRule{arm: record.ArmPacked} }, "takes no other admission rules"},
		{"hold without a bound", func(o *Options) { o.BorrowHold = &policy.HoldRule{Quiet: time.Second} }, "bound 0s"},
		{"profiles", func(o *Options) { o.Profiles = "lukewarm" }, `"lukewarm"`},
		{"mode", func(o *Options) { o.Mode = "mig" }, `"mig"`},
		{"backend", func(o *Options) { o.Backend = nil }, "no GPU backend"},
		{"gpu", func(o *Options) { o.GPUs = []string{"GPU-nope"} }, `"GPU-nope"`},
		{"fence", func(o *Options) { o.Fence = "maybe" }, `"maybe"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t, sim, record.ArmPacked)
			tc.mod(&o)
			_, err := Run(context.Background(), q, o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func TestInterruptStopsJobsAndStillWritesResults(t *testing.T) {
	t.Parallel()
	sim := newSim(t, "H100=80GiB")
	q := queue.Queue{Jobs: []queue.Job{
		simJob(t, "long1", "t", "--peak", "1GiB", "--hold", "30s"),
		simJob(t, "long2", "t", "--peak", "1GiB", "--hold", "30s"),
		{Name: "missing", Template: "m", Command: []string{"/no/such/program"}},
	}}
	o := testOptions(t, sim, record.ArmPacked)
	o.Arm, o.Admission = "", testRule{arm: record.ArmUncapped} // every job at once, nothing to probe
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, q, o)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the context's", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("stopping took %s: SIGINT should end simulated jobs at once", time.Since(start))
	}
	got := map[string]record.Outcome{}
	for _, a := range res.Attempts {
		got[a.Job] = a.Outcome
	}
	if got["long1"] != record.OutcomeCanceled || got["long2"] != record.OutcomeCanceled || got["missing"] != record.OutcomeFailed {
		t.Fatalf("outcomes %v", got)
	}
	if _, err := os.Stat(filepath.Join(o.OutDir, record.ResultsFile)); err != nil {
		t.Fatal(err)
	}
	procs, _ := sim.Processes(context.Background(), res.GPUs[0].UUID)
	if len(procs) != 0 {
		t.Fatalf("%d simulated processes left on the GPU", len(procs))
	}
}

func TestWrapperOfAStoppedViolatorIsEnded(t *testing.T) {
	t.Parallel()
	sim := newSim(t, "H100=80GiB")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A launcher that outlives its GPU process when that process is killed.
	script := exe + " --peak 2GiB --ramp 50ms --hold 100ms --leak-to 12GiB --leak-rate 8GiB || sleep 30"
	q := queue.Queue{
		Jobs:      []queue.Job{{Name: "wrapped", Template: "w", Command: []string{"sh", "-c", script}, Env: map[string]string{simjob.EnvChild: "1"}}},
		Templates: map[string]queue.TemplateSpec{"w": {Name: "w", PeakBytes: 2 * size.GiB}},
	}
	start := time.Now()
	o := testOptions(t, sim, record.ArmPacked)
	// The fence would fail the leak inside the GPU process and the launcher's "|| sleep" would
	// swallow it: this test is about what the watchdog's stop does to a wrapper.
	o.Fence = enforcer.FenceOff
	res := runQueue(t, q, o)
	if got := outcomes(res.Attempts); !slices.Equal(got, []record.Outcome{record.OutcomeCapViolation, record.OutcomeCapViolation, record.OutcomeOK}) {
		t.Fatalf("attempts %v, want [cap-violation cap-violation ok]: its guarantee raised once, then the GPU alone", got)
	}
	for _, a := range res.Attempts[:2] {
		if d := a.Duration(); d > 10*time.Second {
			t.Fatalf("violating attempt %d lasted %s: its wrapper was left running", a.Number, d)
		}
	}
	if time.Since(start) > 20*time.Second {
		t.Fatalf("run took %s", time.Since(start))
	}
}
