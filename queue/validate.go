package queue

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
	"github.com/hashicorp/hcl/v2"
)

// RunOutputs are the names a run writes at the top of its results directory (runner.Options.OutDir):
// a job's result there would be overwritten by the run, or overwrite it. ".fence" holds the
// allocation fence's tables when the ledger is in memory; the records are written to their temp
// files first and renamed over the old ones, which would take a result there away.
var RunOutputs = []string{record.ResultsFile, record.AttemptsFile, record.ReportFile, "logs", ".fence",
	record.ResultsFile + record.TempSuffix, record.AttemptsFile + record.TempSuffix}

// Warning is a problem in a queue file that does not stop the run, with its position.
type Warning struct {
	Pos     hcl.Range
	Message string
}

func (w Warning) String() string {
	return fmt.Sprintf("%s:%d,%d: %s", w.Pos.Filename, w.Pos.Start.Line, w.Pos.Start.Column, w.Message)
}

// checkTemplates refuses a job that names a template the file does not declare, and warns of a
// template block no job uses. A typo in `template = "..."` would otherwise create and probe a
// new template and run the job under a footprint nobody meant, which nobody would notice; a
// declaration costs one line (`template "x" {}`). A job without `template` is its own template,
// so only names a person typed must be declared.
func (d *decoder) checkTemplates(fq *fileQueue, q *Queue) {
	declared := map[string]bool{}
	for _, t := range fq.Templates {
		declared[t.Name] = true
	}
	used := map[string]bool{}
	for i, j := range fq.Jobs {
		if i >= len(q.Jobs) {
			break
		}
		name := q.Jobs[i].Template
		used[name] = true
		if isNull(j.Template) || name == j.Name || declared[name] || !policy.ValidName(name) {
			continue
		}
		hint := fmt.Sprintf("declare it with template %q {} (an empty block is enough: its footprint is then probed, or taken from the policy store)", name)
		if near := nearest(name, fq.Templates); near != "" {
			hint = fmt.Sprintf("did you mean %q? Else declare it with template %q {}", near, name)
		}
		d.add(j.Template.Range(), "Undeclared template", fmt.Sprintf("job %q: template = %q is not declared in this file; %s", j.Name, name, hint))
	}
	for _, t := range fq.Templates {
		if !used[t.Name] {
			q.Warnings = append(q.Warnings, Warning{Pos: t.DefRange, Message: fmt.Sprintf(
				"Unused template: template %q is used by no job (a job uses the template it names, or the one named like itself)", t.Name)})
		}
	}
}

// nearest is the declared template one or two edits away from name, if exactly one is.
func nearest(name string, ts []fileTemplate) string {
	found := ""
	for _, t := range ts {
		if editDistance(name, t.Name) <= 2 {
			if found != "" {
				return ""
			}
			found = t.Name
		}
	}
	return found
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// checkResults refuses two jobs writing one result file, and a result that is one of the run's
// own outputs. Relative paths are inside the results directory; absolute ones are compared as
// written here, and against the results directory by CheckOutDir once it is known.
func (d *decoder) checkResults(fq *fileQueue, q *Queue) {
	for i := range q.Jobs {
		if i < len(fq.Jobs) && !isNull(fq.Jobs[i].Result) {
			q.Jobs[i].resultAt = fq.Jobs[i].Result.Range()
		}
	}
	d.diags = append(d.diags, resultProblems(q.Jobs, "")...)
}

// CheckOutDir checks the jobs' result paths against the results directory a run will use:
// an absolute result inside it must not be one of the run's outputs nor another job's result.
// Errors name the file and line, as Load's do.
func (q Queue) CheckOutDir(outDir string) error {
	abs, err := filepath.Abs(outDir)
	if err != nil {
		return fmt.Errorf("results directory %q: %w", outDir, err)
	}
	if diags := resultProblems(q.Jobs, abs); diags.HasErrors() {
		return diagError(diags)
	}
	return nil
}

// resultProblems finds the result paths that collide. With outDir empty it checks relative
// paths (and absolute ones among themselves); with outDir set, absolute paths inside it too.
func resultProblems(jobs []Job, outDir string) hcl.Diagnostics {
	var diags hcl.Diagnostics
	add := func(j Job, summary, detail string) { diags = append(diags, jobDiag(j.resultAt, summary, detail)) }
	first := map[string]Job{}
	for _, j := range jobs {
		if j.Result == "" {
			continue
		}
		key := filepath.Clean(j.Result)
		inOut := !filepath.IsAbs(key)
		if outDir != "" && filepath.IsAbs(key) {
			if rel, ok := record.Within(outDir, key); ok {
				key, inOut = rel, true
			}
		}
		if inOut {
			if own := ownOutput(key); own != "" {
				if outDir == "" || filepath.IsAbs(j.Result) {
					add(j, "Result overwrites the run's outputs", fmt.Sprintf(
						"job %q: result = %q is the run's own %s in the results directory; choose another path, e.g. \"results/%s.json\"", j.Name, j.Result, own, j.Name))
				}
				continue
			}
		}
		if prev, dup := first[key]; dup {
			// At load time the relative paths were compared already; report a pair once.
			if outDir == "" || filepath.IsAbs(j.Result) || filepath.IsAbs(prev.Result) {
				add(j, "Duplicate result", fmt.Sprintf("job %q: result = %q is also the result of job %q%s; each job needs its own result file",
					j.Name, j.Result, prev.Name, at(prev.resultAt)))
			}
			continue
		}
		first[key] = j
	}
	return diags
}

// ownOutput names the run output rel (relative to the results directory) is, or is inside.
func ownOutput(rel string) string {
	top, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
	for _, o := range RunOutputs {
		if top == o {
			if o == "logs" || o == ".fence" {
				return o + "/ directory"
			}
			return o
		}
	}
	return ""
}

// jobDiag is an error at r, a place a job's attribute has in the queue file. A queue built in
// code has no positions: it is "queue", and the job's name in detail still says where.
func jobDiag(r hcl.Range, summary, detail string) *hcl.Diagnostic {
	if r.Filename == "" {
		r.Filename = "queue"
	}
	return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: &r}
}

func at(r hcl.Range) string {
	if r.Filename == "" {
		return ""
	}
	return fmt.Sprintf(" (%s:%d,%d)", r.Filename, r.Start.Line, r.Start.Column)
}

// CheckDirs refuses a job's dir that does not exist or is not a directory, at its place in the
// file. The runner refuses one too, but with no position: a queue is checked here, where the
// reader is told the line and the path as written. Parse does not look at the filesystem, so a
// queue may be parsed where it will not run.
func (q Queue) CheckDirs() error {
	var diags hcl.Diagnostics
	for _, j := range q.Jobs {
		if j.Dir == "" {
			continue
		}
		fi, err := os.Stat(j.Dir)
		if err == nil && fi.IsDir() {
			continue
		}
		what := fmt.Sprintf("dir = %q", j.dirWritten)
		if j.dirWritten != j.Dir {
			what += " (" + j.Dir + ")"
		}
		switch {
		case err == nil:
			what += " is not a directory"
		case errors.Is(err, fs.ErrNotExist):
			what += " does not exist"
		default:
			what += fmt.Sprintf(": %v", err)
		}
		diags = append(diags, jobDiag(j.dirAt, "Missing directory", fmt.Sprintf("job %q: %s", j.Name, what)))
	}
	if diags.HasErrors() {
		return diagError(diags)
	}
	return nil
}

// CheckCommands refuses a job whose program cannot be started, at its place in the file, as
// exec would look for it: a bare name in this process's $PATH, a path with a slash relative to
// the job's dir. Found only once the job was admitted, a typo ("pyhton3") failed that job hours
// into a long queue. "gpufrac" is this binary wherever the queue runs (runner.Options.Self).
func (q Queue) CheckCommands() error {
	var diags hcl.Diagnostics
	for _, j := range q.Jobs {
		if len(j.Command) == 0 || j.Command[0] == "gpufrac" {
			continue
		}
		prog := j.Command[0]
		why := ""
		if strings.Contains(prog, "/") {
			p := prog
			if !filepath.IsAbs(p) && j.Dir != "" {
				p = filepath.Join(j.Dir, p)
			}
			fi, err := os.Stat(p)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				why = p + " does not exist"
			case err != nil:
				why = err.Error()
			case fi.IsDir():
				why = p + " is a directory"
			case fi.Mode().Perm()&0o111 == 0:
				why = p + " is not executable"
			}
		} else if _, err := exec.LookPath(prog); errors.Is(err, exec.ErrNotFound) {
			why = fmt.Sprintf("%q is not in $PATH", prog)
		} else if err != nil {
			why = err.Error()
		}
		if why == "" {
			continue
		}
		written := fmt.Sprintf("[%q]", prog)
		if len(j.Command) > 1 {
			written = fmt.Sprintf("[%q, ...]", prog)
		}
		diags = append(diags, jobDiag(j.commandAt, "Program not found", fmt.Sprintf("job %q: command = %s: %s", j.Name, written, why)))
	}
	if diags.HasErrors() {
		return diagError(diags)
	}
	return nil
}

// CheckSimulated checks each gpus.simulated entry with parse (the GPU backend's reader, which
// the queue does not import), and names a bad one with its position, as Load names a bad value:
// with no position, an error about "H100=80XB" left the reader to find which file said it.
// Every command checks --simulated-gpus whether or not it opens the simulated backend, and so
// gpufrac run checks these.
func (q Queue) CheckSimulated(parse func(string) ([]string, error)) error {
	var diags hcl.Diagnostics
	for _, s := range q.SimulatedGPUs {
		if _, err := parse(s); err != nil {
			r := q.simulatedAt
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid simulated GPU",
				Detail: fmt.Sprintf("simulated = %q: %v", s, err), Subject: &r})
		}
	}
	if diags.HasErrors() {
		return diagError(diags)
	}
	return nil
}
