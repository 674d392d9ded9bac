package queue

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/policy"
)

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
