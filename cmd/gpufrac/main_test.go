package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/report"
	"github.com/gpufrac/gpufrac/runstatus"
	"github.com/gpufrac/gpufrac/size"
)

// envCLI makes this test binary behave as the gpufrac binary, so that `gpufrac simjob ...` in
// queue files and probe commands (which resolve to this executable) runs realMain.
const envCLI = "GPUFRAC_TEST_AS_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(envCLI) == "1" {
		os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

type cli struct {
	t       *testing.T
	state   string
	simDir  string
	simGPUs string
}

func newCLI(t *testing.T) *cli {
	t.Setenv(envCLI, "1") // children (simulated jobs) run as gpufrac
	return &cli{t: t, state: t.TempDir(), simDir: t.TempDir(), simGPUs: "H100=80GiB"}
}

func (c *cli) run(args ...string) (int, string, string) {
	c.t.Helper()
	var out, errb bytes.Buffer
	all := append([]string{"--state-dir", c.state, "--sim-dir", c.simDir, "--gpu-backend", "simulated", "--simulated-gpus", c.simGPUs}, args...)
	code := realMain(all, &out, &errb)
	return code, out.String(), errb.String()
}

// runJSON runs a command that must succeed and decodes its --json output into a T; its stderr
// comes back for the checks that read it.
func runJSON[T any](t *testing.T, c *cli, args ...string) (T, string) {
	t.Helper()
	var v T
	code, out, errs := c.run(args...)
	if code != 0 {
		t.Fatalf("%s exit %d: %s", args[0], code, errs)
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return v, errs
}

func TestUnitsMath(t *testing.T) {
	c := newCLI(t)
	p := policy.Default()
	tests := []struct {
		peak      string
		wantCap   size.Bytes
		wantUnits int
	}{
		{"12GiB", p.Cap(12 * size.GiB), p.Units(p.Cap(12 * size.GiB))},
		{"14.5GiB", p.Cap(size.MustParse("14.5GiB")), 19},
		{"1", p.Cap(1), 2},
		{"100GB", p.Cap(100 * size.GB), p.Units(p.Cap(100 * size.GB))},
	}
	for _, tc := range tests {
		t.Run(tc.peak, func(t *testing.T) {
			got, _ := runJSON[unitsOutput](t, c, "units", "--peak", tc.peak, "--json")
			if got.CapBytes != tc.wantCap || got.Units != tc.wantUnits {
				t.Errorf("cap %s units %d, want %s and %d", got.CapBytes, got.Units, tc.wantCap, tc.wantUnits)
			}
		})
	}
	// 12GiB x 1.15 + 1.5GB = 15.197GiB -> 16 units, in words too.
	code, out, _ := c.run("units", "--peak", "12GiB")
	if code != 0 || !strings.Contains(out, "cap 15.2GiB") || !strings.Contains(out, "units: 16 of 1GiB") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

func TestBadInputNamesTheValue(t *testing.T) {
	c := newCLI(t)
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"units", "--peak", "12XB"}, 2, `"12XB"`},
		{[]string{"units"}, 2, "--peak"},
		{[]string{"units", "--template", "nothere"}, 1, `"nothere"`},
		{[]string{"frobnicate"}, 2, `"frobnicate"`},
		{[]string{"--log-level", "loud", "units", "--peak", "1GiB"}, 2, `"loud"`},
		{[]string{"run", "--arm", "fastest", "x.hcl"}, 2, `--arm "fastest"`},
		{[]string{"run", "--profiles", "hot", "x.hcl"}, 2, `--profiles "hot"`},
		{[]string{"run", "--max-concurrent", "-3", "x.hcl"}, 2, "--max-concurrent -3"},
		{[]string{"run", "--mode", "turbo", "x.hcl"}, 2, `--mode "turbo"`},
		{[]string{"run", "--probe-window", "-1s", "x.hcl"}, 2, "--probe-window -1s"},
		{[]string{"run", "--max-concurrent", "many", "x.hcl"}, 2, `"many"`},
		{[]string{"run", "--stage", "-1", "x.hcl"}, 2, "--stage -1"},
		{[]string{"run", "--stage", "17", "x.hcl"}, 2, "--stage 17"},
		{[]string{"run", "--probe-guarantee", "median", "x.hcl"}, 2, `--probe-guarantee "median"`},
		{[]string{"run", "missing.hcl"}, 1, "missing.hcl"},
		{[]string{"status", "--simulated-gpus", "H100=80XB"}, 2, `"80XB"`},
		{[]string{"--ignored-xids", "63,0", "status"}, 2, "--ignored-xids: XID 0 does not exist"},
		{[]string{"run", "--ignored-xids", "63,x", "x.hcl"}, 2, `--ignored-xids: XID "x"`},
		{[]string{"units", "--peak", "-1GiB"}, 2, "negative"},
		{[]string{"units", "--peak", "1.5"}, 2, "a fraction of a byte"},
		// Past uint64 at x1.15 the cap wrapped: 16000PiB printed a cap of 8192PiB.
		{[]string{"units", "--peak", "16000PiB"}, 2, `--peak "16000PiB" is 16000PiB, more than any GPU holds (at most 64TiB`},
		{[]string{"units", "--peak", "65TiB"}, 2, `--peak "65TiB"`},
		{[]string{"run"}, 2, "queue file"},
		{[]string{"run", "--probe-cap", "lots", "x.hcl"}, 2, `--probe-cap: invalid size "lots"`},
		{[]string{"run", "--probe-cap", "-1GiB", "x.hcl"}, 2, "negative"},
		{[]string{"run", "--probe-cap", "1.5", "x.hcl"}, 2, "a fraction of a byte"},
		{[]string{"run", "--probe-cap", "0", "x.hcl"}, 2, `--probe-cap "0"`},
		// 0 read as "not given": the queue's borrow_wait, else 5 minutes, where no wait was
		// asked for; past 10m, what the queue file's borrow_wait refuses.
		{[]string{"run", "--borrow-wait", "0", "x.hcl"}, 2, "--borrow-wait 0s: want more than 0s and at most 10m0s"},
		{[]string{"run", "--borrow-wait", "11m", "x.hcl"}, 2, "--borrow-wait 11m0s: want more than 0s and at most 10m0s"},
		{[]string{"run", "--borrow-wait", "-1s", "x.hcl"}, 2, "--borrow-wait -1s"},
		{[]string{"probe", "--", "true"}, 2, "--template"},
		{[]string{"probe", "--template", "bad name", "--", "true"}, 2, `"bad name"`},
		{[]string{"probe", "--template", "t"}, 2, "no command"},
		{[]string{"status", "extra"}, 2, `"extra"`},
		// A GPU that is not there is refused with the ones that are, by index and UUID.
		{[]string{"run", "--gpus", "0,7", "../../examples/queues/demo.hcl"}, 2, `--gpus: "7" is neither the index nor the UUID of one of the 1 GPUs (0 = GPU-`},
		// One GPU named twice, by index and by UUID alike, is a mistake, not one GPU.
		{[]string{"run", "--gpus", "0,0", "../../examples/queues/demo.hcl"}, 2, `--gpus "0,0" names GPU GPU-`},
		{[]string{"probe", "--template", "t", "--gpu", "7", "--", "true"}, 2, `--gpu "7" is neither the index nor the UUID of one of the 1 GPUs (0 = GPU-`},
		{[]string{"status", "--interval", "5s"}, 2, "--interval 5s: it is how often --watch redraws; add --watch"},
		// A policy name that is not there is refused, not run with the defaults under its name.
		{[]string{"units", "--policy", "nosuch", "--peak", "1GiB"}, 1, `--policy "nosuch" is not in the policy file `},
		{[]string{"probe", "--policy", "nosuch", "--template", "t", "--", "true"}, 1, `--policy "nosuch" is not in the policy file `},
		{[]string{"run", "--policy", "nosuch", "../../examples/queues/demo.hcl"}, 1, `--policy "nosuch" is not in the policy file `},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, errs := c.run(tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.want) {
				t.Fatalf("exit %d (want %d), stderr %q should name %s", code, tc.code, errs, tc.want)
			}
		})
	}
}

// A fresh state directory holds an empty ledger: status says so and succeeds.
func TestStatusOnAFreshStateDir(t *testing.T) {
	c := newCLI(t)
	c.state = filepath.Join(t.TempDir(), "never-used")
	code, out, errs := c.run("status", "--no-usage")
	if code != 0 || !strings.Contains(out, "empty (nothing recorded yet") || !strings.Contains(out, c.state) {
		t.Fatalf("exit %d, stdout %q, stderr %q: want 0 and an empty ledger named by its directory", code, out, errs)
	}
	code, out, errs = c.run("status", "--no-usage", "--json")
	var got statusOutput
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.StateDir != c.state || got.GPUs == nil || len(got.GPUs) != 0 {
		t.Fatalf("--json: exit %d, stdout %q, stderr %q: want 0 and an empty ledger", code, out, errs)
	}
	// A damaged run.json beside no ledger is named, as it is beside one.
	if err := os.MkdirAll(c.state, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.state, runstatus.File), []byte("{half"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs = c.run("status", "--no-usage")
	if code != 0 || !strings.Contains(out, "empty (nothing recorded yet") || !strings.Contains(errs, filepath.Join(c.state, runstatus.File)) {
		t.Fatalf("damaged run.json: exit %d, stdout %q, stderr %q: want the empty ledger and the file named", code, out, errs)
	}
}

func TestProbeThenUnitsAndStatus(t *testing.T) {
	c := newCLI(t)
	po, errs := runJSON[probeOutput](t, c, "probe", "--template", "lora", "--json", "--", "gpufrac", "simjob", "--peak", "3GiB", "--ramp", "100ms", "--hold", "300ms")
	if !strings.Contains(errs, "SIMULATED") {
		t.Errorf("a simulated probe must say so: stderr %q", errs)
	}
	if po.PeakBytes < 3*size.GiB-100*size.MiB || po.PeakBytes > 3*size.GiB || po.Backend != "simulated" {
		t.Fatalf("probe output %+v", po)
	}
	if po.CapBytes != policy.Default().Cap(po.PeakBytes) || len(po.StoredIn) != 2 {
		t.Errorf("cap %s stored in %v", po.CapBytes, po.StoredIn)
	}
	// The template's peak is in the local policy file, so units finds it.
	uo, _ := runJSON[unitsOutput](t, c, "units", "--template", "lora", "--json")
	if uo.PeakBytes != po.PeakBytes || uo.CapBytes != po.CapBytes {
		t.Errorf("units from the template: %+v, probe said %+v", uo, po)
	}
	// Status shows the profile, and a reservation with its task and cap.
	led, err := ledger.Open(c.state, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := led.States()
	res, err := led.ReserveBytes(st[0].UUID, 5*size.GiB, ledger.Task{JobName: "train", TaskName: "main", Template: "lora"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := led.RecordViolation(ledger.Violation{Token: res.Token, GPU: st[0].UUID, Task: res.Task, Mode: policy.ModeIsolated,
		CapBytes: 5 * size.GiB, PeakBytes: 6 * size.GiB, Action: "sigkill", CrossedAt: now, ContainedAt: now.Add(120 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	led.Close()
	so, _ := runJSON[statusOutput](t, c, "status", "--json")
	if len(so.GPUs) != 1 || len(so.GPUs[0].Reservations) != 1 || len(so.Profiles) != 1 || len(so.Violations) != 1 {
		t.Fatalf("status: %+v", so)
	}
	r := so.GPUs[0].Reservations[0]
	if r.Task.JobName != "train" || r.CapBytes != 5*size.GiB || r.UsageBytes == nil || *r.UsageBytes != 0 || len(r.Token) != 8 {
		t.Errorf("reservation %+v", r)
	}
	if v := so.Violations[0]; v.ContainmentS < 0.119 || v.ContainmentS > 0.121 || v.Token != res.Token[:8] {
		t.Errorf("violation %+v", v)
	}
	code, out, _ := c.run("status")
	for _, want := range []string{"SIMULATED", "GPU0", "train/main", "lora", "sigkill", "0.12s", "probe"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
}

func TestRunCommand(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	q := filepath.Join(dir, "q.hcl")
	src := `
profiles = "cold"
template "t" {}
job "a" {
  template = "t"
  command  = ["gpufrac", "simjob", "--peak", "2GiB", "--hold", "200ms", "--result", "$GPUFRAC_RESULT"]
  result   = "results/a.json"
}
job "b" {
  template = "t"
  command  = ["gpufrac", "simjob", "--peak", "2GiB", "--hold", "200ms"]
}
`
	if err := os.WriteFile(q, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	outDir := filepath.Join(dir, "out")
	code, out, errs := c.run("run", "--out", outDir, q)
	if code != 0 {
		t.Fatalf("run exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	first := strings.SplitN(out, "\n", 2)[0]
	if !strings.Contains(first, "SIMULATED") {
		t.Errorf("first line %q does not say the GPUs are simulated", first)
	}
	for _, want := range []string{"PROBE", "2 of 2 jobs completed", "report:"} {
		if !strings.Contains(out, want) {
			t.Errorf("run output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(outDir, "results", "a.json")); err != nil {
		t.Errorf("job a's result: %v", err)
	}
	for _, f := range []string{record.ResultsFile, record.AttemptsFile, report.File} {
		if _, err := os.Stat(filepath.Join(outDir, f)); err != nil {
			t.Error(err)
		}
	}
	// A named policy in the state directory's file is the run's policy, not the queue's block.
	team := policy.Default()
	team.Name, team.CapMarginBytes = "team", 3*size.GB
	if _, err := policy.NewFileStore(filepath.Join(c.state, PolicyFileName), policy.FileOptions{}).PutPolicy(context.Background(), team, 0); err != nil {
		t.Fatal(err)
	}
	teamOut := filepath.Join(dir, "team")
	if code, out, errs := c.run("run", "--policy", "team", "--out", teamOut, q); code != 0 {
		t.Fatalf("run --policy team exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	var res record.Result
	if data, err := os.ReadFile(filepath.Join(teamOut, record.ResultsFile)); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	if res.Policy.Name != "team" || res.Policy.CapMarginBytes != 3*size.GB {
		t.Errorf("run --policy team ran under %q (cap margin %s), want team's 3GB", res.Policy.Name, res.Policy.CapMarginBytes)
	}
	// A queue error names the file and line.
	bad := filepath.Join(dir, "bad.hcl")
	os.WriteFile(bad, []byte("job \"x\" {\n  command = []\n}\n"), 0o644)
	code, _, errs = c.run("run", "--out", outDir, bad)
	if code != 1 || !strings.Contains(errs, "bad.hcl:2") {
		t.Errorf("exit %d, stderr %q: want the file and line", code, errs)
	}
}

func TestVersionAndHelp(t *testing.T) {
	c := newCLI(t)
	code, out, _ := c.run("version")
	if code != 0 || !strings.HasPrefix(out, "gpufrac ") {
		t.Errorf("version: %d %q", code, out)
	}
	var o, e bytes.Buffer
	if code := realMain([]string{"help"}, &o, &e); code != 0 || strings.Contains(o.String(), "simjob") || !strings.Contains(o.String(), "probe") {
		t.Errorf("help (exit %d) lists hidden commands or misses real ones:\n%s", code, o.String())
	}
}

// `gpufrac run` runs a benchmark baseline by hand, named by --arm or by the queue file's arm:
// its rules come from the benchmark (bench/arms), and the run records the arm and its caps.
func TestRunTakesABaselineArm(t *testing.T) {
	for _, tc := range []struct {
		name, flag, fileArm string
		want                record.Arm
		capped              bool
	}{
		{"flag", "static", "", record.ArmStatic, true},
		{"queue file", "", "uncapped", record.ArmUncapped, false},
		{"the flag wins", "exclusive", "uncapped", record.ArmExclusive, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			dir := t.TempDir()
			q := filepath.Join(dir, "q.hcl")
			src := "template \"t\" {}\njob \"a\" {\n  template = \"t\"\n  command  = [\"gpufrac\", \"simjob\", \"--peak\", \"1GiB\", \"--hold\", \"100ms\"]\n}\n"
			if tc.fileArm != "" {
				src = "arm = \"" + tc.fileArm + "\"\n" + src
			}
			if err := os.WriteFile(q, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out")
			args := []string{"run", "--out", out}
			if tc.flag != "" {
				args = append(args, "--arm", tc.flag)
			}
			if code, stdout, stderr := c.run(append(args, q)...); code != 0 {
				t.Fatalf("run exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			data, err := os.ReadFile(filepath.Join(out, record.ResultsFile))
			if err != nil {
				t.Fatal(err)
			}
			var res record.Result
			if err := json.Unmarshal(data, &res); err != nil {
				t.Fatal(err)
			}
			if res.Arm != tc.want || len(res.Attempts) != 1 || res.Attempts[0].Capped != tc.capped || res.Attempts[0].Probe {
				t.Fatalf("arm %q, attempts %+v: want arm %q, one attempt, capped %v, no probe", res.Arm, res.Attempts, tc.want, tc.capped)
			}
		})
	}
}

// A probe whose job fails says that it failed, with its exit code, whether or not it took GPU
// memory first: a job that died at start-up (a typo, a missing module) once read "no GPU memory
// was attributed to the job", which sends its user looking for an attribution problem.
func TestProbeOfAFailedJobSaysItFailed(t *testing.T) {
	exe, err := os.Executable() // gpufrac, under envCLI
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cmd  []string
		want string
	}{
		{"before any GPU memory", []string{"sh", "-c", "exit 4"}, "the job exited with code 4 after"},
		{"after GPU memory", []string{"sh", "-c", "\"$0\" simjob --peak 1GiB --ramp 50ms --hold 50ms; exit 5", exe}, "the job exited with code 5 after"},
		{"ok but no GPU memory", []string{"true"}, "no GPU memory was attributed to the job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			code, _, errs := c.run(append([]string{"probe", "--template", "t", "--"}, tc.cmd...)...)
			if code != 1 || !strings.Contains(errs, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 1 and %q", code, errs, tc.want)
			}
		})
	}
}

// A bad gpus.simulated entry in a queue file is named with its file and line, as every other
// bad value of a queue file is, and refused whether or not --simulated-gpus replaces it.
func TestBadSimulatedGPUInTheQueueSaysWhere(t *testing.T) {
	c := newCLI(t)
	q := filepath.Join(t.TempDir(), "q.hcl")
	src := "gpus {\n  simulated = [\"H100=80GiB\", \"H100=80XB\"]\n}\njob \"a\" {\n  command = [\"true\"]\n}\n"
	if err := os.WriteFile(q, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	want := q + `:2,15: Invalid simulated GPU: simulated = "H100=80XB": simulated GPU entry "H100=80XB": invalid size "80XB"`
	for _, args := range [][]string{
		{"--state-dir", c.state, "--sim-dir", c.simDir, "--gpu-backend", "simulated", "run", "--out", t.TempDir(), q},
		{"--state-dir", c.state, "--sim-dir", c.simDir, "--gpu-backend", "simulated", "--simulated-gpus", "H100=80GiB", "run", "--out", t.TempDir(), q},
	} {
		var out, errb bytes.Buffer
		if code := realMain(args, &out, &errb); code != 1 || !strings.Contains(errb.String(), want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", args, code, errb.String(), want)
		}
	}
}
