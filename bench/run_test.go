package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/runner"
	"github.com/gpufrac/gpufrac/size"
)

func TestParseArms(t *testing.T) {
	got, err := ParseArms("exclusive, packed-mps,packed-isolated,exclusive,packed-warm,static,uncapped-mps,uncapped-retry,uncapped-retry-isolated,packed-isolated-warm-lend,packed-wait,packed-warm-wait-instant,packed-warm-hold10s,packed-hold30s-after5s,packed-isolated-warm-sm150,packed-warm-lend-hold10s-sm62.5,packed-isolated-warm-stage2,packed-isolated-warm-stage0,packed-isolated-cold-probeknown,packed-mps-cold-wait-stage0-probeknown", "isolated")
	if err != nil {
		t.Fatal(err)
	}
	want := []ArmSpec{
		{Label: "exclusive", Arm: "exclusive"},
		{Label: "packed-mps", Arm: "packed", Stage: runner.DefaultStage, Mode: "mps", Profiles: "cold"},
		{Label: "packed-isolated", Arm: "packed", Stage: runner.DefaultStage, Mode: "isolated", Profiles: "cold"},
		{Label: "exclusive-2", Arm: "exclusive"},
		{Label: "packed-warm", Arm: "packed", Stage: runner.DefaultStage, Mode: "isolated", Profiles: "warm"},
		{Label: "static", Arm: "static", Mode: "isolated", Profiles: "cold"},
		{Label: "uncapped-mps", Arm: "uncapped", Mode: "mps", Profiles: "cold"},
		{Label: "uncapped-retry", Arm: "uncapped-retry", Mode: "isolated", Profiles: "cold"},
		{Label: "uncapped-retry-isolated", Arm: "uncapped-retry", Mode: "isolated", Profiles: "cold"},
		{Label: "packed-isolated-warm-lend", Arm: "packed", Stage: runner.DefaultStage, Mode: "isolated", Profiles: "warm", Borrow: "lend"},
		{Label: "packed-wait", Arm: "packed", Stage: runner.DefaultStage, Mode: "isolated", Profiles: "cold", Borrow: "wait"},
		{Label: "packed-warm-wait-instant", Arm: "packed", Stage: runner.DefaultStage, Mode: "isolated", Profiles: "warm", Borrow: "wait", Hold: &policy.NoHold},
		{Label: "packed-warm-hold10s", Arm: "packed", Stage: runner.DefaultStage, Mode: "isolated", Profiles: "warm",
			Hold: &policy.HoldRule{Quiet: policy.DefaultHold.Quiet, Bound: 10 * time.Second}},
		{Label: "packed-hold30s-after5s", Arm: "packed", Stage: runner.DefaultStage, Mode: "isolated", Profiles: "cold",
			Hold: &policy.HoldRule{Quiet: policy.DefaultHold.Quiet, Bound: 30 * time.Second, After: 5 * time.Second}},
		{Label: "packed-isolated-warm-sm150", Arm: "packed", Stage: runner.DefaultStage, Mode: "isolated", Profiles: "warm", SMBudget: 150},
		{Label: "packed-warm-lend-hold10s-sm62.5", Arm: "packed", Stage: runner.DefaultStage, Mode: "isolated", Profiles: "warm", Borrow: "lend",
			Hold: &policy.HoldRule{Quiet: policy.DefaultHold.Quiet, Bound: 10 * time.Second}, SMBudget: 62.5},
		{Label: "packed-isolated-warm-stage2", Arm: "packed", Mode: "isolated", Profiles: "warm", Stage: 2, StageNamed: true},
		{Label: "packed-isolated-warm-stage0", Arm: "packed", Mode: "isolated", Profiles: "warm", StageNamed: true},
		{Label: "packed-isolated-cold-probeknown", Arm: "packed", Stage: runner.DefaultStage, Mode: "isolated", Profiles: "cold", ProbeKnown: true},
		{Label: "packed-mps-cold-wait-stage0-probeknown", Arm: "packed", Mode: "mps", Profiles: "cold", Borrow: "wait", StageNamed: true, ProbeKnown: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	for list, wantErr := range map[string]string{
		"":                                 "no arms",
		"packed-mps,exclusive":             "first arm must be exclusive",
		"exclusive,packd":                  `"packd"`,
		"exclusive,packed-fast":            `"fast"`,
		"exclusive,packed-warm-x":          `"x"`,
		"exclusive,uncapped-retries":       `"retries"`,
		"exclusive,retry":                  `"retry"`,
		"exclusive,uncapped-lend":          `"lend"`,
		"exclusive,packed-warm-lent":       `"lent"`,
		"exclusive,packed-warm-holdx":      `"holdx"`,
		"exclusive,packed-hold10ms":        "bound 10ms",
		"exclusive,packed-hold10s-after":   `"after"`,
		"exclusive,packed-instant-after5s": `"after5s"`,
		"exclusive,static-hold10s":         `"hold10s"`,
		"exclusive,packed-sm0":             `"sm0"`,
		"exclusive,packed-sm7000":          "sm_budget_percent = 7000",
		"exclusive,packed-smx":             `"smx"`,
		"exclusive,uncapped-sm150":         `"sm150"`,
		"exclusive,packed-stage-1":         `"stage"`,
		"exclusive,packed-stage17":         `"stage17"`,
		"exclusive,uncapped-stage4":        `"stage4"`,
		"exclusive,uncapped-probeknown":    `"probeknown"`,
		"exclusive,packed-probeknown-warm": `"warm" is neither`,
	} {
		if _, err := ParseArms(list, "mps"); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ParseArms(%q): error %v, want one containing %s", list, err, wantErr)
		}
	}
	if _, err := ParseArms("exclusive", "shared"); err == nil || !strings.Contains(err.Error(), `"shared"`) {
		t.Errorf("bad default mode: %v", err)
	}
}

// fakeArms plays a runner: every job runs for a second, one after another or six at a time,
// and writes a result; the packed arm's eval job writes a different value.
type fakeArms struct {
	states map[string]string // label -> state dir it got
	fail   string            // label that returns an error after running half its jobs
}

func (f *fakeArms) RunArm(ctx context.Context, spec ArmSpec, jobs []JobSpec, stateDir, outDir string) (ArmRun, error) {
	f.states[spec.Label] = stateDir
	if spec.Arm == "packed" && spec.Profiles == "cold" {
		if err := os.WriteFile(filepath.Join(stateDir, "profiles.json"), []byte(`{"measured":true}`), 0o644); err != nil {
			return ArmRun{}, err
		}
	}
	var run ArmRun
	per := 1
	if spec.Arm != "exclusive" {
		per = 6
	}
	for i, j := range jobs {
		if spec.Label == f.fail && i == len(jobs)/2 {
			return run, errors.New("runner gave up")
		}
		start := at(float64(i / per))
		vals := `[1, 2]`
		if j.Template == Eval17B && spec.Arm == "packed" {
			vals = `[1, 3]`
		}
		kind := KindExact
		if j.Template == LoRA06B || j.Template == ResNet50 || j.Template == LoRA17B || j.Template == FullFT06B {
			kind, vals = KindLosses, `[3, 2, 1]`
		}
		body, _ := json.Marshal(map[string]any{"template": j.Template, "kind": kind, "values": json.RawMessage(vals)})
		if err := os.WriteFile(j.Result, body, 0o644); err != nil {
			return run, err
		}
		run.Attempts = append(run.Attempts, record.Attempt{Job: j.Name, Template: j.Template, Start: start, End: start.Add(time.Second), Outcome: record.OutcomeOK})
	}
	return run, nil
}

// mustArms is ParseArms of a list the test knows to be good.
func mustArms(t *testing.T, list, mode string) []ArmSpec {
	t.Helper()
	a, err := ParseArms(list, mode)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestRunScoresAgainstFirstExclusive(t *testing.T) {
	arms := mustArms(t, "exclusive,packed-mps,packed-mps-warm,static,exclusive", "isolated")
	fake := &fakeArms{states: map[string]string{}, fail: "static"}
	dir := t.TempDir()
	sum, runs, err := Run(context.Background(), Config{Seed: 1, Arms: arms, Runner: fake, OutDir: dir,
		Workloads: PythonWorkloads{Dir: "/w"}, Command: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 5 || len(sum.Scores) != 5 {
		t.Fatalf("%d runs, %d scores; want 5", len(runs), len(sum.Scores))
	}
	evals := 0
	for _, e := range Draw(1) {
		if e.Template == Eval17B {
			evals++
		}
	}
	byLabel := map[string]Score{}
	for _, s := range sum.Scores {
		byLabel[s.Label] = s
	}
	if s := byLabel["exclusive"]; s.Completed != 12 || s.Makespan != 12*time.Second {
		t.Fatalf("exclusive: %+v", s)
	}
	if s := byLabel["packed-mps"]; s.Completed != 12-evals || s.Makespan != 2*time.Second {
		t.Fatalf("packed-mps: completed %d (want %d: its eval results differ), makespan %v", s.Completed, 12-evals, s.Makespan)
	}
	// 12 jobs in 12 s exclusive (both runs), 12-evals in 2 s packed.
	if s := byLabel["packed-mps"]; math.Abs(s.Ratio-float64(12-evals)/2*12/12) > 1e-9 {
		t.Fatalf("packed ratio %v", s.Ratio)
	}
	if s := byLabel["static"]; s.Error != "runner gave up" || s.Completed != 6 {
		t.Fatalf("static: error %q completed %d", s.Error, s.Completed)
	}
	warm := filepath.Join(fake.states["packed-mps-warm"], "profiles.json")
	if _, err := os.Stat(warm); err != nil {
		t.Fatalf("the warm arm did not get the cold arm's profiles: %v", err)
	}
	// No --profiles here: the note ends at the cold arm's name (", not from --profiles" would
	// name a file nobody gave).
	if !slices.Contains(sum.Notes, "packed-mps-warm: starts from the footprints the cold mps arm before it learned (packed-mps)") {
		t.Fatalf("notes %q do not say where the warm arm's footprints came from", sum.Notes)
	}
	// With --profiles the note says the stored file was not read.
	pf := &fakeArms{states: map[string]string{}}
	psum, _, err := Run(context.Background(), Config{Seed: 1, Arms: mustArms(t, "exclusive,packed-mps,packed-mps-warm", "isolated"), Runner: pf,
		OutDir: t.TempDir(), Workloads: PythonWorkloads{Dir: "/w"}, Command: "test",
		Profiles: []ledger.Profile{{Template: Eval17B, PeakBytes: size.GiB}}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(psum.Notes, "packed-mps-warm: starts from the footprints the cold mps arm before it learned (packed-mps), not from --profiles") {
		t.Fatalf("with --profiles, notes %q do not say the stored file was not read", psum.Notes)
	}
	if !strings.Contains(strings.Join(sum.Notes, "\n"), "exclusive-2 vs exclusive: 12 of 12") {
		t.Fatalf("notes %q lack the exclusive agreement", sum.Notes)
	}
	if _, err := LoadSummary(filepath.Join(dir, "summary.json")); err != nil {
		t.Fatal(err)
	}
}

func TestRunDeadlineSkipsArms(t *testing.T) {
	arms := mustArms(t, "exclusive,packed-mps", "mps")
	fake := &fakeArms{states: map[string]string{}}
	sum, runs, err := Run(context.Background(), Config{Seed: 3, Arms: arms, Runner: fake, OutDir: t.TempDir(),
		Workloads: PythonWorkloads{Dir: "/w"}, Deadline: time.Now().Add(-time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	// /w holds no scripts: the first note says no digest was recorded, then one per skipped arm.
	if len(runs) != 0 || len(sum.Notes) != 3 || !strings.Contains(sum.Notes[0], "no workloads digest") ||
		!strings.Contains(sum.Notes[1], "exclusive skipped: the deadline") || !strings.Contains(sum.Notes[2], "packed-mps skipped") ||
		!reflect.DeepEqual(sum.Skipped, []string{"exclusive", "packed-mps"}) {
		t.Fatalf("runs %d notes %q", len(runs), sum.Notes)
	}
	if _, _, err := Run(context.Background(), Config{Arms: arms}); err == nil {
		t.Fatal("a config without runner and workloads should fail")
	}
}

// BeforeArm sees every arm before it starts, in order, and an arm it refuses is skipped and
// noted while the others run.
func TestRunBeforeArm(t *testing.T) {
	arms := mustArms(t, "exclusive,packed-mps,packed-isolated", "mps")
	fake := &fakeArms{states: map[string]string{}}
	var seen []string
	sum, runs, err := Run(context.Background(), Config{Seed: 3, Arms: arms, Runner: fake, OutDir: t.TempDir(),
		Workloads: PythonWorkloads{Dir: "/w"}, BeforeArm: func(spec ArmSpec) error {
			seen = append(seen, spec.Label+"/"+spec.Mode)
			if spec.Mode == "mps" {
				return errors.New("no contention model for mps")
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"exclusive/", "packed-mps/mps", "packed-isolated/isolated"}; !reflect.DeepEqual(seen, want) {
		t.Errorf("BeforeArm saw %q, want %q", seen, want)
	}
	var ran []string
	for _, r := range runs {
		ran = append(ran, r.Label)
	}
	if !reflect.DeepEqual(ran, []string{"exclusive", "packed-isolated"}) || !reflect.DeepEqual(sum.Skipped, []string{"packed-mps"}) ||
		!slices.ContainsFunc(sum.Notes, func(n string) bool { return strings.Contains(n, "packed-mps skipped: no contention model for mps") }) {
		t.Fatalf("ran %q, skipped %q, notes %q", ran, sum.Skipped, sum.Notes)
	}
}

// A reference from an earlier call must be an exclusive arm of the same seed and profile.
func TestCheckRef(t *testing.T) {
	dir := t.TempDir()
	sum := Summary{Seed: 2, Workload: ProfileBusy, Scores: []Score{
		{Label: "exclusive", Arm: record.ArmExclusive}, {Label: "packed-isolated", Arm: record.ArmPacked}}}
	if err := WriteRaw(dir, sum, nil); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"exclusive", "packed-isolated"} {
		if err := os.MkdirAll(filepath.Join(dir, l, "results"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	want := filepath.Join(dir, "exclusive", "results")
	for _, tc := range []struct {
		dir     string
		seed    uint64
		p       WorkloadProfile
		wantErr string
	}{
		{filepath.Join(dir, "exclusive"), 2, ProfileBusy, ""},
		{want, 2, ProfileBusy, ""},
		{filepath.Join(dir, "exclusive"), 3, ProfileBusy, "seed 2, busy profile; this run is seed 3"},
		{filepath.Join(dir, "exclusive"), 2, ProfileStartup, "this run is seed 2, startup profile"},
		{filepath.Join(dir, "packed-isolated"), 2, ProfileBusy, "not an exclusive arm"},
		{filepath.Join(dir, "nope"), 2, ProfileBusy, "no results directory"},
	} {
		got, err := CheckRef(tc.dir, tc.seed, tc.p)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("CheckRef(%s, %d, %s): %v, want an error containing %q", tc.dir, tc.seed, tc.p, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("CheckRef(%s) = %q, %v; want %q", tc.dir, got, err, want)
		}
	}
	if specs, err := ParseArmsWithRef("packed-isolated-warm,uncapped-retry", "isolated"); err != nil || len(specs) != 2 {
		t.Errorf("arms after a reference: %+v, %v", specs, err)
	}
}

// A busy seed in two calls: the exclusive arm in one invocation, the packed arm in the next
// against it (--ref); the combined report scores the packed arm against that exclusive run and
// gives it the SM bound, as if they had run in one call.
func TestRunAgainstAnEarlierExclusiveRun(t *testing.T) {
	fake := &fakeArms{states: map[string]string{}}
	first, second := t.TempDir(), t.TempDir()
	ex := mustArms(t, "exclusive", "isolated")
	sum1, runs1, err := Run(context.Background(), Config{Seed: 4, Arms: ex, Runner: withGPM{fake, 60}, OutDir: first,
		Workloads: PythonWorkloads{Dir: "/w", Profile: ProfileBusy}, Workload: ProfileBusy})
	if err != nil || len(runs1) != 1 {
		t.Fatal(err)
	}
	ref, err := CheckRef(filepath.Join(first, "exclusive"), 4, ProfileBusy)
	if err != nil {
		t.Fatal(err)
	}
	packed, _ := ParseArmsWithRef("packed-mps", "isolated")
	sum2, _, err := Run(context.Background(), Config{Seed: 4, Arms: packed, Runner: withGPM{fake, 90}, OutDir: second, RefDir: ref,
		Workloads: PythonWorkloads{Dir: "/w", Profile: ProfileBusy}, Workload: ProfileBusy})
	if err != nil {
		t.Fatal(err)
	}
	evals := 0
	for _, e := range Draw(4) {
		if e.Template == Eval17B {
			evals++
		}
	}
	// Exclusive: 12 jobs in 12 s at 60% SM; packed: 12-evals jobs in 2 s.
	ratio := float64(12-evals) / 2
	if s := sum2.Scores[0]; s.Completed != 12-evals || math.Abs(s.Ratio-ratio) > 1e-9 || s.SM == nil || s.SM.Bound == 0 {
		t.Fatalf("packed alone: completed %d (want %d: its eval results differ from the reference's), ratio %v (want %v over the reference), SM %+v",
			s.Completed, 12-evals, s.Ratio, ratio, s.SM)
	}
	if sum2.Ref == nil || sum2.Ref.Label != "exclusive" || sum2.Ref.Seed != 4 {
		t.Fatalf("the second call's summary names no reference: %+v", sum2.Ref)
	}
	want := fmt.Sprintf("| packed-mps (busy) | %.3fx (%d/12) |", ratio, 12-evals)
	bound := fmt.Sprintf("%s of 1.67x", fmtPct(ratio*0.6))
	// Given both calls the baseline counts once; given the second alone, its reference is it.
	for name, sums := range map[string][]Summary{"both calls": {sum1, sum2}, "the arms' call alone": {sum2}} {
		out := RenderCombined(sums)
		if !strings.Contains(out, want) || !strings.Contains(out, bound) {
			t.Fatalf("%s: combined report lacks %q or %q:\n%s", name, want, bound, out)
		}
	}
	if out := RenderCombined([]Summary{sum1, sum2}); strings.Count(out, "| exclusive (busy) | 1.000x (12/12) |") != 1 {
		t.Fatalf("the reference run is listed once, as itself:\n%s", out)
	}
}

// withGPM adds GPM samples at a fixed SM util over each arm's attempts.
type withGPM struct {
	ArmRunner
	util float64
}

func (w withGPM) RunArm(ctx context.Context, spec ArmSpec, jobs []JobSpec, stateDir, outDir string) (ArmRun, error) {
	run, err := w.ArmRunner.RunArm(ctx, spec, jobs, stateDir, outDir)
	if from, to, ok := span(run.Attempts); ok {
		run.GPM = []GPMSample{{GPU: "g", Start: from, End: to, SMUtil: w.util, SMOccupancy: 10}}
	}
	return run, err
}

// TestArmOptionsSMBudget: an arm's compute budget reaches the runner as the policy's, over the
// invocation's policy (or the default one); an arm without one leaves the policy's alone.
func TestArmOptionsSMBudget(t *testing.T) {
	specs := mustArms(t, "exclusive,packed-isolated-warm-sm150,packed-isolated-warm", "isolated")
	custom := policy.Default()
	custom.Name, custom.MaxTasksPerGPU = "bench", 4
	for _, tc := range []struct {
		pol  policy.Policy
		spec ArmSpec
		want float64
		name string
	}{
		{policy.Policy{}, specs[1], 150, policy.DefaultName},
		{custom, specs[1], 150, "bench"},
		{custom, specs[2], 0, "bench"},
	} {
		o, err := RunnerArms{Policy: tc.pol}.options(tc.spec, t.TempDir(), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if o.Policy.SMBudgetPercent != tc.want || o.Policy.Name != tc.name {
			t.Errorf("%s over policy %q: budget %g%% in policy %q, want %g%% in %q", tc.spec.Label, tc.pol.Name, o.Policy.SMBudgetPercent, o.Policy.Name, tc.want, tc.name)
		}
	}
	if custom.MaxTasksPerGPU != 4 || custom.SMBudgetPercent != 0 {
		t.Errorf("the invocation's policy was changed: %+v", custom)
	}
}

// One reader of a GPU's performance monitor: while the benchmark records GPM the runner meters
// no attempt; with the benchmark's recording off the runner learns shares as gpufrac run does.
func TestArmOptionsOneGPMReader(t *testing.T) {
	spec := mustArms(t, "exclusive,packed-isolated-warm", "isolated")[1]
	for _, tc := range []struct {
		bench   time.Duration
		metered bool
	}{{0, false}, {time.Second, false}, {-1, true}} {
		o, err := RunnerArms{GPMInterval: tc.bench}.options(spec, t.TempDir(), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if metered := o.GPMInterval >= 0; metered != tc.metered {
			t.Errorf("benchmark GPM interval %s: the runner's is %s, metering %v, want %v", tc.bench, o.GPMInterval, metered, tc.metered)
		}
	}
}

// Arms checked against an earlier call's exclusive run must run the jobs it ran: a reference
// whose workload scripts, sizes or extra environment differ is refused before any arm starts,
// and one that recorded no digest passes with a note.
func TestRefOfOtherWorkloadsIsRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "common.py"), []byte("deterministic = True\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wl := PythonWorkloads{Dir: dir, Profile: ProfileBusy}
	fake := &fakeArms{states: map[string]string{}}
	first := t.TempDir()
	sum1, _, err := Run(context.Background(), Config{Seed: 4, Arms: mustArms(t, "exclusive", "isolated"), Runner: fake, OutDir: first,
		Workloads: wl, Workload: ProfileBusy})
	if err != nil || !strings.HasPrefix(sum1.WorkloadsDigest, "sha256:") {
		t.Fatalf("exclusive run: digest %q, %v", sum1.WorkloadsDigest, err)
	}
	ref, err := CheckRef(filepath.Join(first, "exclusive"), 4, ProfileBusy)
	if err != nil {
		t.Fatal(err)
	}
	packed, _ := ParseArmsWithRef("packed-isolated", "isolated")
	run := func(w PythonWorkloads) (Summary, error) {
		sum, _, err := Run(context.Background(), Config{Seed: 4, Arms: packed, Runner: fake, OutDir: t.TempDir(), RefDir: ref,
			Workloads: w, Workload: ProfileBusy})
		return sum, err
	}
	if sum, err := run(wl); err != nil || sum.WorkloadsDigest != sum1.WorkloadsDigest || len(sum.Scores) != 1 {
		t.Fatalf("the same workloads: digest %q, %d scores, %v", sum.WorkloadsDigest, len(sum.Scores), err)
	}
	changed := []struct {
		name string
		w    PythonWorkloads
		edit func()
	}{
		{"--job-env", PythonWorkloads{Dir: dir, Profile: ProfileBusy, Env: map[string]string{"GPUFRAC_STEPS": "4"}}, nil},
		{"a script", wl, func() {
			if err := os.WriteFile(filepath.Join(dir, "common.py"), []byte("deterministic = False\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range changed {
		if tc.edit != nil {
			tc.edit()
		}
		sum, err := run(tc.w)
		if err == nil || !strings.Contains(err.Error(), "ran other workloads (digest "+sum1.WorkloadsDigest) || len(sum.Scores) != 0 {
			t.Errorf("%s changed: %d arms ran, error %v; want refused before any arm, naming the reference's digest", tc.name, len(sum.Scores), err)
		}
	}
	// A reference from before digests: it runs, and the summary says what it could not check.
	if note, err := checkRefDigest("old/exclusive", "", sum1.WorkloadsDigest); err != nil || !strings.Contains(note, "recorded no workloads digest") {
		t.Errorf("a reference without a digest: note %q, %v", note, err)
	}
}
