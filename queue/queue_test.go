package queue

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

func TestParseQueueErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		// want are substrings of the error: the position and the bad value.
		want []string
	}{
		{"syntax", "job \"a\" {\n  command = [\n", []string{"q.hcl:"}},
		{"no jobs", `arm = "packed"`, []string{"q.hcl:1", "no job blocks"}},
		{"missing command", "job \"a\" {\n  template = \"t\"\n}\n", []string{"q.hcl:1", `job "a" has no command: add command = [`}},
		{"empty command", "job \"a\" {\n  command = []\n}\n", []string{"q.hcl:2", "command = []"}},
		{"command not strings", "job \"a\" {\n  command = [\"x\", [1]]\n}\n", []string{"q.hcl:2", "command[1]"}},
		{"unknown attribute", "job \"a\" {\n  command = [\"x\"]\n  gpus = 2\n}\n", []string{"q.hcl:3", "gpus"}},
		{"duplicate job", "job \"a\" {\n  command = [\"x\"]\n}\njob \"a\" {\n  command = [\"y\"]\n}\n", []string{"q.hcl:4", `job "a" is declared twice`}},
		{"bad job name", "job \"a b\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:1", `"a b"`}},
		// The policy store refuses a '.' (policy.CheckName), so a queue may not name one.
		{"dot in a template block", "template \"lora-0.6b\" {\n  peak = \"1GiB\"\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:1", `template "lora-0.6b": must be 1-64 letters, digits, '-', '_' or '~'`}},
		{"dot in a job's template", "job \"a\" {\n  template = \"lora-0.6b\"\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", `template = "lora-0.6b": must be`}},
		{"dot in a job name", "job \"lora-0.6b-1\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:1", `job "lora-0.6b-1": must be`}},
		{"empty simulated GPUs", "gpus {\n  simulated = []\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", "simulated = [] } names no GPU"}},
		{"bad arm", "arm = \"fastest\"\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:1", `"fastest"`}},
		{"bad profiles", "profiles = \"hot\"\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:1", `"hot"`}},
		{"bad size", "template \"t\" {\n  peak = \"12XB\"\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", `"12XB"`}},
		{"bad probe cap", "template \"t\" {\n  probe_cap = \"half\"\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", "probe_cap", `"half"`}},
		{"bad window", "template \"t\" {\n  probe_window = \"soon\"\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", `"soon"`}},
		{"env not a map", "job \"a\" {\n  command = [\"x\"]\n  env = [\"A=1\"]\n}\n", []string{"q.hcl:3", "env must be a map"}},
		// A name with '=' would set another variable; one gpufrac sets would be replaced silently.
		{"env name with =", "job \"a\" {\n  command = [\"x\"]\n  env = { \"A=B\" = \"1\" }\n}\n", []string{"q.hcl:3", `env["A=B"]`, "without '='"}},
		{"env empty name", "job \"a\" {\n  command = [\"x\"]\n  env = { \"\" = \"1\" }\n}\n", []string{"q.hcl:3", `env[""]`}},
		{"env NUL value", "job \"a\" {\n  command = [\"x\"]\n  env = { A = \"x\\u0000y\" }\n}\n", []string{"q.hcl:3", `env["A"]`, "NUL"}},
		{"env gpufrac sets", "job \"a\" {\n  command = [\"x\"]\n  env = { CUDA_VISIBLE_DEVICES = \"1\" }\n}\n", []string{"q.hcl:3", `env["CUDA_VISIBLE_DEVICES"]`, "gpufrac sets it"}},
		{"env a reservation key", "job \"a\" {\n  command = [\"x\"]\n  env = { GPUFRAC_RESERVATION_GPU_1 = \"t\" }\n}\n", []string{"q.hcl:3", "GPUFRAC_RESERVATION_GPU_1", "gpufrac sets it"}},
		{"policy value", "policy {\n  max_tasks_per_gpu = 0\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", "max_tasks_per_gpu = 0"}},
		// A fraction is no count of tasks, and a huge one must be named as written.
		{"policy task count a fraction", "policy {\n  max_tasks_per_gpu = 2.5\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", "max_tasks_per_gpu = 2.5", "whole number"}},
		{"policy task count below one", "policy {\n  max_tasks_per_gpu = 0.9\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", "max_tasks_per_gpu = 0.9"}},
		{"policy task count huge", "policy {\n  max_tasks_per_gpu = 1e30\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", "max_tasks_per_gpu = 1e+30"}},
		{"policy mode", "policy {\n  mode = \"mig\"\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", `"mig"`}},
		{"policy sm budget", "policy {\n  sm_budget_percent = 0.5\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", "sm_budget_percent = 0.5"}},
		{"result climbs out", "job \"a\" {\n  command = [\"x\"]\n  result = \"../../etc/x\"\n}\n", []string{"q.hcl:3", `"../../etc/x" leaves the results directory`}},
		{"result climbs out after a detour", "job \"a\" {\n  command = [\"x\"]\n  result = \"r/../../x\"\n}\n", []string{"q.hcl:3", `"r/../../x" leaves`}},
		{"negative size", "template \"t\" {\n  peak = \"-1GiB\"\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", `"-1GiB"`, "negative"}},
		{"policy headroom", "policy {\n  headroom = \"lots\"\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", `"lots"`}},
		// A zero was read as "not set": the template was probed, or kept its computed or
		// protective cap, without a word.
		{"zero peak", "template \"t\" {\n  peak = \"0GiB\"\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", `peak = "0GiB": want more than 0`}},
		{"zero peak as a number", "template \"t\" {\n  peak = 0\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", `peak = "0": want more than 0`}},
		{"zero cap", "template \"t\" {\n  cap = \"0\"\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", `cap = "0": want more than 0`}},
		{"zero probe cap", "template \"t\" {\n  probe_cap = \"0MiB\"\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", `probe_cap = "0MiB": want more than 0`}},
		// One string is not a command line: run without a shell, "python3 train.py" was a
		// program of that whole name, found nowhere once the job started.
		{"command a string", "job \"a\" {\n  command = \"python3 train.py --seed 1\"\n}\n", []string{"q.hcl:2", `job "a": command = "python3 train.py --seed 1" must be a list`, `["python3", "train.py", "--seed", "1"]`}},
		// Past 64TiB a size is a typo (80TB for 80GB), as the policy store and gpufrac units
		// say; here it ran the job alone on a whole GPU without a word.
		{"peak past any GPU", "template \"t\" {\n  peak = \"80TB\"\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", `peak = "80TB"`, "at most 64TiB"}},
		{"cap past any GPU", "template \"t\" {\n  cap = \"100TiB\"\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", `cap = "100TiB"`, "at most 64TiB"}},
		{"probe cap past any GPU", "template \"t\" {\n  probe_cap = \"80TB\"\n}\njob \"a\" {\n  command = [\"x\"]\n}\n", []string{"q.hcl:2", `probe_cap = "80TB"`, "at most 64TiB"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := parseInvalid(t, tc.src)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestParseQueueFull(t *testing.T) {
	dir := t.TempDir()
	src := `
arm      = "static"
profiles = "cold"
gpus {
  simulated = ["2xH100=80GiB"]
}
policy {
  headroom           = "4GiB"
  cap_margin_percent = 20
  cap_margin         = "1GB"
  max_tasks_per_gpu  = 4
  unit               = "512MiB"
  mode               = "mps"
  watchdog_interval  = "50ms"
  sm_budget_percent  = 150
}
template "lora" {
  probe_window = "5s"
  probe_cap    = "30GiB"
  peak         = "14.5GiB"
  cap          = "20GiB"
}
job "lora-1" {
  template = "lora"
  command  = ["python3", "train.py", "--seed", "1"]
  env      = { SEED = "1", STEPS = 60, VERBOSE = true }
  dir      = "work"
  result   = "results/lora-1.json"
}
job "plain" {
  command = ["sh", "-c", "echo hi"]
}
`
	path := filepath.Join(dir, "q.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	q, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if q.Arm != record.ArmStatic || q.Profiles != record.ProfilesCold || q.Mode != policy.ModeMPS {
		t.Errorf("arm %q profiles %q mode %q", q.Arm, q.Profiles, q.Mode)
	}
	if len(q.SimulatedGPUs) != 1 || q.SimulatedGPUs[0] != "2xH100=80GiB" {
		t.Errorf("simulated GPUs %v", q.SimulatedGPUs)
	}
	p := q.Policy
	if p == nil || p.HeadroomBytes != 4*size.GiB || p.CapMarginPercent != 20 || p.CapMarginBytes != size.GB ||
		p.MaxTasksPerGPU != 4 || p.UnitBytes != 512*size.MiB || p.WatchdogInterval != 50*time.Millisecond || p.SMBudgetPercent != 150 {
		t.Errorf("policy %+v", p)
	}
	tm := q.Templates["lora"]
	if tm.ProbeWindow != 5*time.Second || tm.ProbeCapBytes != 30*size.GiB || tm.PeakBytes != size.MustParse("14.5GiB") || tm.CapBytes != 20*size.GiB {
		t.Errorf("template %+v", tm)
	}
	if len(q.Jobs) != 2 {
		t.Fatalf("%d jobs", len(q.Jobs))
	}
	j := q.Jobs[0]
	if j.Name != "lora-1" || j.Template != "lora" || strings.Join(j.Command, " ") != "python3 train.py --seed 1" {
		t.Errorf("job %+v", j)
	}
	if j.Env["SEED"] != "1" || j.Env["STEPS"] != "60" || j.Env["VERBOSE"] != "true" {
		t.Errorf("env %v", j.Env)
	}
	if j.Dir != filepath.Join(dir, "work") || j.Result != filepath.Join("results", "lora-1.json") {
		t.Errorf("dir %q result %q", j.Dir, j.Result)
	}
	if q.Jobs[1].Template != "plain" {
		t.Errorf("a job without a template is its own template, got %q", q.Jobs[1].Template)
	}
}

func TestDemoQueueParses(t *testing.T) {
	q, err := Load(filepath.Join("..", "examples", "queues", "demo.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	leakers := 0
	for _, j := range q.Jobs {
		if j.Command[0] != "gpufrac" || j.Command[1] != "simjob" {
			t.Errorf("demo job %s does not run gpufrac simjob: %v", j.Name, j.Command)
		}
		if j.Template == "leaker" {
			leakers++
		}
	}
	if len(q.Jobs) < 6 || leakers != 1 {
		t.Errorf("demo has %d jobs and %d leakers; want about 8 and exactly 1", len(q.Jobs), leakers)
	}
}

// FuzzParseQueue: the queue parser never panics, every error is a queue error that names the
// file, and what it accepts (results in files of their own, declared templates) is a queue the runner can start (jobs with names and commands), whose
// names the policy store accepts too.
func FuzzParseQueue(f *testing.F) {
	for _, src := range []string{
		"job \"a\" {\n  command = [\"x\"]\n}\n",
		"arm = \"packed\"\nprofiles = \"cold\"\ntemplate \"t\" {}\njob \"a\" {\n  template = \"t\"\n  command = [\"gpufrac\", \"simjob\"]\n  result = \"r/a.json\"\n  dir = \"w\"\n  env = { A = \"1\" }\n}\n",
		"template \"t\" {\n  peak = \"-1GiB\"\n  probe_window = \"5s\"\n}\njob \"a\" {\n  command = [\"x\"]\n}\n",
		"policy {\n  headroom = \"2GiB\"\n  max_tasks_per_gpu = 4\n  mode = \"mps\"\n}\njob \"a\" {\n  command = \"x\"\n  result = \"../../etc/x\"\n}\n",
		"gpus {\n  simulated = [\"2xH100=80GiB\"]\n}\njob \"a b\" {\n  command = []\n}\n",
		"job \"a\" {\n  command = [\"x\", [1]]\n}\n",
		"template \"t\" {}\njob \"a\" {\n  template = \"u\"\n  command = [\"x\"]\n  result = \"logs/a.1.log\"\n}\njob \"b\" {\n  command = [\"x\"]\n  result = \"r\"\n}\njob \"c\" {\n  command = [\"x\"]\n  result = \"r\"\n}\n",
	} {
		f.Add(src)
	}
	f.Fuzz(func(t *testing.T, src string) {
		q, err := Parse([]byte(src), "fuzz.hcl")
		if err != nil {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "fuzz.hcl") {
				t.Fatalf("Parse(%q): error %q is not a queue error naming the file", src, err)
			}
			return
		}
		if len(q.Jobs) == 0 {
			t.Fatalf("Parse(%q) accepted a queue with no jobs", src)
		}
		results := map[string]bool{}
		for _, j := range q.Jobs {
			if j.Result != "" {
				if results[j.Result] || ownOutput(j.Result) != "" {
					t.Fatalf("Parse(%q) accepted result %q, another job's or the run's own", src, j.Result)
				}
				results[j.Result] = true
			}
			if _, declared := q.Templates[j.Template]; !declared && j.Template != j.Name {
				t.Fatalf("Parse(%q) accepted job %q of undeclared template %q", src, j.Name, j.Template)
			}
			if !policy.ValidName(j.Name) || !policy.ValidName(j.Template) || len(j.Command) == 0 {
				t.Fatalf("Parse(%q) accepted job %+v", src, j)
			}
			if j.Result == ".." || strings.HasPrefix(j.Result, "../") {
				t.Fatalf("Parse(%q) accepted result %q outside the results directory", src, j.Result)
			}
		}
	})
}

// A command HCL cannot evaluate (a variable, a function call) is one error: it was followed by
// "Empty command: command = [] must name a program", which sent the reader looking for an
// empty list that the file does not hold.
func TestParseReportsABrokenCommandOnce(t *testing.T) {
	for name, cmd := range map[string]string{
		"variable": `["echo", "${foo}"]`,
		"function": `[upper("x")]`,
	} {
		t.Run(name, func(t *testing.T) {
			err := parseInvalid(t, "job \"a\" {\n  command = "+cmd+"\n}\n")
			var qe *Error
			if !errors.As(err, &qe) {
				t.Fatalf("error %v is no *Error", err)
			}
			if len(qe.Diags) != 1 || strings.Contains(err.Error(), "Empty command") {
				t.Errorf("want one error, got %d:\n%v", len(qe.Diags), err)
			}
		})
	}
}
