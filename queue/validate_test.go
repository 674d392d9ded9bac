package queue

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// parseInvalid parses src as q.hcl and fails the test unless it is refused with ErrInvalid.
func parseInvalid(t *testing.T, src string) error {
	t.Helper()
	_, err := Parse([]byte(src), "q.hcl")
	if err == nil {
		t.Fatal("no error")
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("error %v does not wrap ErrInvalid", err)
	}
	return err
}

// mustParse parses src as q.hcl and fails the test on any error.
func mustParse(t *testing.T, src string) Queue {
	t.Helper()
	q, err := Parse([]byte(src), "q.hcl")
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// A queue that would overwrite its own outputs or another job's result, or names a template it
// never declared, is refused at load time with every problem's position and bad value.
func TestParseRefusesCollisionsAndUndeclaredTemplates(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string // the whole error
	}{
		{"two jobs, one result", `
job "a" {
  command = ["x"]
  result  = "out.json"
}
job "b" {
  command = ["x"]
  result  = "./out.json"
}
`, `q.hcl:8,13: Duplicate result: job "b": result = "out.json" is also the result of job "a" (q.hcl:4,13); each job needs its own result file`},
		{"result is results.json", `
job "a" {
  command = ["x"]
  result  = "results.json"
}
`, `q.hcl:4,13: Result overwrites the run's outputs: job "a": result = "results.json" is the run's own results.json in the results directory; choose another path, e.g. "results/a.json"`},
		{"result in logs", `
job "z" {
  command = ["x"]
  result  = "logs/z.1.log"
}
`, `q.hcl:4,13: Result overwrites the run's outputs: job "z": result = "logs/z.1.log" is the run's own logs/ directory in the results directory; choose another path, e.g. "results/z.json"`},
		{"result is report.html after a detour", `
job "a" {
  command = ["x"]
  result  = "r/../report.html"
}
`, `q.hcl:4,13: Result overwrites the run's outputs: job "a": result = "report.html" is the run's own report.html in the results directory; choose another path, e.g. "results/a.json"`},
		{"result is attempts.csv", `
job "a" {
  command = ["x"]
  result  = "attempts.csv"
}
`, `q.hcl:4,13: Result overwrites the run's outputs: job "a": result = "attempts.csv" is the run's own attempts.csv in the results directory; choose another path, e.g. "results/a.json"`},
		// The run writes its records to these first and renames them over results.json and
		// attempts.csv: a job's result there was truncated, then renamed away.
		{"result is results.json's temp file", `
job "a" {
  command = ["x"]
  result  = "results.json.tmp"
}
`, `q.hcl:4,13: Result overwrites the run's outputs: job "a": result = "results.json.tmp" is the run's own results.json.tmp in the results directory; choose another path, e.g. "results/a.json"`},
		{"result is attempts.csv's temp file", `
job "a" {
  command = ["x"]
  result  = "attempts.csv.tmp"
}
`, `q.hcl:4,13: Result overwrites the run's outputs: job "a": result = "attempts.csv.tmp" is the run's own attempts.csv.tmp in the results directory; choose another path, e.g. "results/a.json"`},
		{"two absolute results", `
job "a" {
  command = ["x"]
  result  = "/data/r.json"
}
job "b" {
  command = ["x"]
  result  = "/data//r.json"
}
`, `q.hcl:8,13: Duplicate result: job "b": result = "/data/r.json" is also the result of job "a" (q.hcl:4,13); each job needs its own result file`},
		{"undeclared template, near a declared one", `
template "train" {}
job "a" {
  template = "trian"
  command  = ["x"]
}
`, `q.hcl:4,14: Undeclared template: job "a": template = "trian" is not declared in this file; did you mean "train"? Else declare it with template "trian" {}`},
		{"undeclared template", `
job "a" {
  template = "eval"
  command  = ["x"]
}
`, `q.hcl:3,14: Undeclared template: job "a": template = "eval" is not declared in this file; declare it with template "eval" {} (an empty block is enough: its footprint is then probed, or taken from the policy store)`},
		{"every problem at once", `
job "a" {
  template = "t"
  command  = ["x"]
  result   = "results.json"
}
job "b" {
  command = ["x"]
  result  = "r.json"
}
job "c" {
  command = ["x"]
  result  = "r.json"
}
`, `q.hcl:3,14: Undeclared template: job "a": template = "t" is not declared in this file; declare it with template "t" {} (an empty block is enough: its footprint is then probed, or taken from the policy store)
q.hcl:5,14: Result overwrites the run's outputs: job "a": result = "results.json" is the run's own results.json in the results directory; choose another path, e.g. "results/a.json"
q.hcl:13,13: Duplicate result: job "c": result = "r.json" is also the result of job "b" (q.hcl:9,13); each job needs its own result file`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := parseInvalid(t, tc.src); err.Error() != tc.want {
				t.Errorf("error\n\t%s\nwant\n\t%s", strings.ReplaceAll(err.Error(), "\n", "\n\t"), strings.ReplaceAll(tc.want, "\n", "\n\t"))
			}
		})
	}
}

// What the checks must let through: results in their own files, a job that is its own
// template, a template named by a job and declared, and a job that names itself.
func TestParseAcceptsDistinctResultsAndDeclaredTemplates(t *testing.T) {
	q := mustParse(t, `
template "train" {}
job "a" {
  template = "train"
  command  = ["x"]
  result   = "results/a.json"
}
job "b" {
  template = "train"
  command  = ["x"]
  result   = "results/b.json"
}
job "c" {
  template = "c"
  command  = ["x"]
  result   = "logs.json"
}
job "d" {
  command = ["x"]
}
job "e" {
  command = ["x"]
}
`)
	var got []string
	for _, j := range q.Jobs {
		got = append(got, j.Name+":"+j.Template)
	}
	if want := []string{"a:train", "b:train", "c:c", "d:d", "e:e"}; !slices.Equal(got, want) {
		t.Errorf("jobs:templates %v, want %v", got, want)
	}
	if len(q.Warnings) != 0 {
		t.Errorf("warnings %v, want none", q.Warnings)
	}
}

func TestParseWarnsOfUnusedTemplates(t *testing.T) {
	q := mustParse(t, `
template "eval" {
  peak = "1GiB"
}
template "b" {}
template "train" {}
job "a" {
  template = "train"
  command  = ["x"]
}
job "b" {
  command = ["x"]
}
`)
	var got []string
	for _, w := range q.Warnings {
		got = append(got, w.String())
	}
	want := []string{`q.hcl:2,1: Unused template: template "eval" is used by no job (a job uses the template it names, or the one named like itself)`}
	if !slices.Equal(got, want) {
		t.Errorf("warnings\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// An absolute result is checked against the results directory once the run knows it.
func TestCheckOutDir(t *testing.T) {
	out := t.TempDir()
	tests := []struct {
		name   string
		result string
		want   string // "" for no error
	}{
		{"absolute results.json", filepath.Join(out, "results.json"), `q.hcl:8,13: Result overwrites the run's outputs: job "b": result = "` + filepath.Join(out, "results.json") + `" is the run's own results.json in the results directory; choose another path, e.g. "results/b.json"`},
		{"absolute log", filepath.Join(out, "logs", "a.1.log"), `q.hcl:8,13: Result overwrites the run's outputs: job "b": result = "` + filepath.Join(out, "logs", "a.1.log") + `" is the run's own logs/ directory in the results directory; choose another path, e.g. "results/b.json"`},
		{"absolute path of a's relative result", filepath.Join(out, "r", "a.json"), `q.hcl:8,13: Duplicate result: job "b": result = "` + filepath.Join(out, "r", "a.json") + `" is also the result of job "a" (q.hcl:4,13); each job needs its own result file`},
		{"absolute elsewhere", filepath.Join(filepath.Dir(out), "elsewhere", "results.json"), ""},
		{"absolute beside a's", filepath.Join(out, "r", "b.json"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := "\njob \"a\" {\n  command = [\"x\"]\n  result  = \"r/a.json\"\n}\njob \"b\" {\n  command = [\"x\"]\n  result  = \"" + tc.result + "\"\n}\n"
			err := mustParse(t, src).CheckOutDir(out)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("CheckOutDir: %v", err)
			case tc.want != "" && err == nil:
				t.Errorf("CheckOutDir accepted result %q", tc.result)
			case tc.want != "" && err.Error() != tc.want:
				t.Errorf("error\n\t%s\nwant\n\t%s", err, tc.want)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
}
