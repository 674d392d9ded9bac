package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/bench"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
)

func call(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	rc := run(args, &out, &errb)
	return rc, out.String(), errb.String()
}

func TestQueue(t *testing.T) {
	rc, out, _ := call("queue", "--seed", "2")
	if rc != 0 {
		t.Fatalf("rc %d", rc)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != bench.QueueLen {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), bench.QueueLen, out)
	}
	for i, e := range bench.Draw(2) {
		if lines[i] != e.Name+"\t"+e.Template {
			t.Fatalf("line %d %q, want %q", i, lines[i], e.Name+"\t"+e.Template)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		rc   int
		want string
	}{
		{nil, 2, "usage"},
		{[]string{"bogus"}, 2, `unknown command "bogus"`},
		{[]string{"run", "--arms", "packed-mps"}, 2, "first arm must be exclusive"},
		{[]string{"run", "--workloads-dir", "/nonexistent", "--out", "OUTDIR"}, 2, "does not hold the workloads"},
		{[]string{"run", "--workloads", "docker", "--out", "OUTDIR"}, 2, `--workloads "docker"`},
		{[]string{"run", "--probe-cap", "lots", "--out", "OUTDIR"}, 2, `--probe-cap "lots"`},
		{[]string{"run", "--probe-cap", "0", "--out", "OUTDIR"}, 2, `--probe-cap "0"`},
		{[]string{"report"}, 2, "name at least one results directory"},
		{[]string{"report", "/nonexistent"}, 1, "summary"},
		{[]string{"simjob", "--template", "gpt", "--result", "/tmp/x"}, 2, `"gpt"`},
		{[]string{"simjob", "--template", "leaker", "--profile", "huge", "--result", "/tmp/x"}, 2, `"huge"`},
		{[]string{"run", "--profile", "heavy", "--out", "OUTDIR"}, 2, `"heavy"`},
		{[]string{"calibrate", "--arms", "exclusive,packed", "--out", "OUTDIR"}, 2, "one exclusive arm"},
	}
	for _, c := range cases {
		for i, a := range c.args {
			if a == "OUTDIR" {
				c.args[i] = t.TempDir()
			}
		}
		rc, _, errs := call(c.args...)
		if rc != c.rc || !strings.Contains(errs, c.want) {
			t.Errorf("%v: rc %d stderr %q; want rc %d and %q", c.args, rc, errs, c.rc, c.want)
		}
	}
}

func TestReportInto(t *testing.T) {
	dir := t.TempDir()
	res := filepath.Join(dir, "2026-11-29-seed1")
	sum := bench.Summary{Seed: 1, Started: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), Command: "gpufrac-bench run --seed 1",
		Scores: []bench.Score{{Label: "exclusive", Arm: "exclusive", Seed: 1, Jobs: 12, Completed: 12, Ratio: 1, JobsPerGPUHour: 200}}}
	if err := bench.WriteRaw(res, sum, nil); err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(dir, "benchmarks.md")
	before := "# Benchmarks\n\n## Enforcer on the H200\n\nsomeone else's\n"
	if err := os.WriteFile(doc, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	rc, _, errs := call("report", "--title", "Run one", "--into", doc, res)
	if rc != 0 {
		t.Fatalf("rc %d: %s", rc, errs)
	}
	got, _ := os.ReadFile(doc)
	if !strings.HasPrefix(string(got), before) {
		t.Fatalf("the other section changed:\n%s", got)
	}
	for _, want := range []string{"## Packing benchmark", "### Run one", "| exclusive | 1.000x (12/12) | 1.000x | 12 of 12 |", "#### Seed 1"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("document lacks %q:\n%s", want, got)
		}
	}
}

// The test binary doubles as `gpufrac-bench simjob`, which `run --workloads sim` executes.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "simjob" {
		os.Exit(bench.SimJobMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestRunSimulated(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 12 simulated jobs")
	}
	out := t.TempDir()
	rc, stdout, errs := call("run", "--seed", "3", "--arms", "exclusive", "--workloads", "sim", "--backend", "simulated",
		"--sim-scale", "0.01", "--suffix", "t", "--out", out, "--log-level", "warn")
	if rc != 0 {
		t.Fatalf("rc %d\n%s\n%s", rc, stdout, errs)
	}
	if !strings.Contains(stdout, "| exclusive | - | - |") || !strings.Contains(stdout, "12 of 12") {
		t.Fatalf("table missing or incomplete:\n%s", stdout)
	}
	dir := filepath.Join(out, time.Now().UTC().Format("2006-01-02")+"-seed3-t")
	s, err := bench.LoadSummary(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Backend != "simulated" || !strings.HasPrefix(s.Command, "gpufrac-bench run --seed 3") || s.Scores[0].Completed != 12 {
		t.Fatalf("summary %+v", s)
	}
}

func TestCompare(t *testing.T) {
	write := func(dir, job, kind, values string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, "results"), 0o755); err != nil {
			t.Fatal(err)
		}
		doc := `{"template":"eval-1.7b","kind":"` + kind + `","values":` + values + `}`
		if err := os.WriteFile(filepath.Join(dir, "results", job+".json"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ref, same, other := t.TempDir(), t.TempDir(), t.TempDir()
	for _, d := range []string{ref, same, other} {
		write(d, "j01-eval-1.7b", "exact", "[-1.5, -2.25]")
	}
	write(ref, "j02-eval-1.7b", "exact", "[-3.0]")
	write(same, "j02-eval-1.7b", "exact", "[-3.0]")
	write(other, "j02-eval-1.7b", "exact", "[-3.5]")

	rc, out, _ := call("compare", ref, same)
	if rc != 0 || !strings.Contains(out, "2 of 2 jobs within tolerance") {
		t.Fatalf("identical runs: rc %d\n%s", rc, out)
	}
	rc, out, _ = call("compare", ref, filepath.Join(other, "results"))
	if rc != 1 || !strings.Contains(out, "j02-eval-1.7b            differs") || !strings.Contains(out, "1 of 2 jobs within tolerance") {
		t.Fatalf("one job differs: rc %d\n%s", rc, out)
	}
	if rc, _, errs := call("compare", t.TempDir(), ref); rc != 2 || !strings.Contains(errs, "no job results") {
		t.Fatalf("empty reference: rc %d %q", rc, errs)
	}
	if rc, _, errs := call("compare", ref); rc != 2 || !strings.Contains(errs, "usage") {
		t.Fatalf("one argument: rc %d %q", rc, errs)
	}
}

// `calibrate` on the simulated backend: every template alone in the busy profile, a table with
// each job's SM activity, and the footprints it measured, readable for the busy profile only.
func TestCalibrateSimulated(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 8 simulated jobs")
	}
	out := t.TempDir()
	rc, stdout, errs := call("calibrate", "--workloads", "sim", "--backend", "simulated", "--sim-scale", "0.02",
		"--gpm-interval", "20ms", "--out", out, "--log-level", "warn")
	if rc != 0 {
		t.Fatalf("rc %d\n%s\n%s", rc, stdout, errs)
	}
	for _, tpl := range bench.Templates {
		if !regexp.MustCompile(`\| c0\d-` + regexp.QuoteMeta(tpl) + ` \| ` + regexp.QuoteMeta(tpl) + ` \| 0 \| [0-9.]+ s \| [0-9.]+ s \| [0-9.]+% \|`).MatchString(stdout) {
			t.Errorf("no calibration row with SM figures for %s:\n%s", tpl, stdout)
		}
	}
	dir := filepath.Join(out, time.Now().UTC().Format("2006-01-02")+"-calibration-busy")
	for _, f := range []string{"calibration.md", "summary.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	profs, err := bench.LoadProfilesFor(filepath.Join(dir, "profiles-busy.json"), bench.ProfileBusy)
	if err != nil || len(profs) != len(bench.Templates)-1 {
		t.Fatalf("footprints %+v, %v: want every template but the leaker", profs, err)
	}
	if rc, _, errs := call("run", "--profile", "busy", "--profiles", filepath.Join(dir, "profiles-busy.json"), "--queue-len", "13", "--out", out); rc != 2 || !strings.Contains(errs, "--queue-len 13") {
		t.Errorf("queue length past the queue: rc %d %q", rc, errs)
	}
	if rc, _, errs := call("run", "--profile", "startup", "--profiles", filepath.Join(dir, "profiles-busy.json"), "--workloads", "sim", "--backend", "simulated", "--out", out); rc != 2 || !strings.Contains(errs, "busy profile's jobs") {
		t.Errorf("busy footprints for a startup run: rc %d %q", rc, errs)
	}
}

// An mps arm's simulated jobs share the SMs (their kernels run at once); every other arm's GPU
// time-slices at the kernel SM share given.
func TestArmContention(t *testing.T) {
	for _, tc := range []struct {
		spec bench.ArmSpec
		want gpu.SimContention
	}{
		{bench.ArmSpec{Label: "exclusive", Arm: record.ArmExclusive}, gpu.SimContention{SwitchCost: 0.02, KernelSM: 0.91}},
		{bench.ArmSpec{Label: "packed-isolated-warm", Arm: record.ArmPacked, Mode: string(policy.ModeIsolated)}, gpu.SimContention{SwitchCost: 0.02, KernelSM: 0.91}},
		{bench.ArmSpec{Label: "packed-mps-warm", Arm: record.ArmPacked, Mode: string(policy.ModeMPS)}, gpu.SimContention{SwitchCost: 0.02}},
	} {
		if got := armContention(tc.spec, 0.02, 0.91); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.spec.Label, got, tc.want)
		}
	}
}
