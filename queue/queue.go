package queue

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
	"github.com/gpufrac/gpufrac/taskenv"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"
)

// Job is one entry of a queue.
type Job struct {
	Name     string
	Template string
	// Command is the program and its arguments. A first word of "gpufrac" means the running
	// gpufrac binary (runner.Options.Self), so queue files can use `gpufrac simjob` wherever they run.
	Command []string
	Env     map[string]string
	// Dir is the working directory (absolute after Load); empty means the runner's.
	Dir string
	// Result is the file the job writes its result to; a relative path is inside the results
	// directory (runner.Options.OutDir). The job receives the absolute path as $GPUFRAC_RESULT, and
	// "$GPUFRAC_RESULT" in its command is replaced by it.
	Result string
	// MaxAttempts and CapFixed: the job's ladder (ladder.go); 0 and nil when not set, so its
	// template's hold. A job's cap_fixed = false undoes its template's true.
	MaxAttempts int
	CapFixed    *bool
	// resultAt is where the queue file says Result, for CheckOutDir's errors.
	resultAt hcl.Range
	// dirAt and dirWritten are where and how the file says Dir, for CheckDirs' errors;
	// commandAt where it says Command, for CheckCommands'.
	dirAt      hcl.Range
	dirWritten string
	commandAt  hcl.Range
}

// TemplateSpec is what a queue file may say about a template.
type TemplateSpec struct {
	Name string
	// ProbeWindow, when set, makes the probe of this template a window: its peak in the first
	// ProbeWindow of the first job's run becomes the footprint. In place (isolated mode) the job
	// runs on under the cap that footprint earns; alone (mps) it is stopped and queued again.
	ProbeWindow time.Duration
	// ProbeCapBytes, when set, replaces the protective cap of this template's in-place probe
	// (half the GPU's budget): what the probe may use before it is stopped and re-run alone. A
	// smaller one lets more probes, or more known jobs, run beside it.
	ProbeCapBytes size.Bytes
	// PeakBytes is a declared footprint, used when no measured profile exists.
	PeakBytes size.Bytes
	// CapBytes overrides the computed cap.
	CapBytes size.Bytes
	// MaxAttempts and CapFixed: its jobs' ladder (ladder.go).
	MaxAttempts int
	CapFixed    bool
}

// Queue is a parsed queue file.
type Queue struct {
	Jobs []Job
	// Policy is the queue's policy block applied over policy.Default(), or nil when absent.
	Policy    *policy.Policy
	Templates map[string]TemplateSpec
	// Arm, Profiles and Mode are the queue file's defaults; command-line flags win.
	Arm      record.Arm
	Profiles record.Profiles
	Mode     policy.Mode
	// SimulatedGPUs is used when the simulated backend runs and nothing else configures it.
	SimulatedGPUs []string
	// simulatedAt is where the file says SimulatedGPUs, for CheckSimulated's errors.
	simulatedAt hcl.Range
	// Path is the file the queue came from.
	Path string
	// MaxAttempts bounds every job's attempts (ladder.go); 0 when not set. BorrowWait is the
	// queue's default for how long a borrower's allocation waits (ladder.go); 0 when not set.
	MaxAttempts int
	BorrowWait  time.Duration
	// Warnings are problems that do not stop a run (a template no job uses), to be shown
	// before it starts.
	Warnings []Warning
}

type fileQueue struct {
	Arm       hcl.Expression `hcl:"arm,optional"`
	Profiles  hcl.Expression `hcl:"profiles,optional"`
	Policy    *filePolicy    `hcl:"policy,block"`
	GPUs      *fileGPUs      `hcl:"gpus,block"`
	Templates []fileTemplate `hcl:"template,block"`
	Jobs      []fileJob      `hcl:"job,block"`
	Attempts  hcl.Expression `hcl:"max_attempts,optional"`
	Wait      hcl.Expression `hcl:"borrow_wait,optional"`
}

type filePolicy struct {
	Headroom         hcl.Expression `hcl:"headroom,optional"`
	CapMarginPercent hcl.Expression `hcl:"cap_margin_percent,optional"`
	CapMargin        hcl.Expression `hcl:"cap_margin,optional"`
	MaxTasksPerGPU   hcl.Expression `hcl:"max_tasks_per_gpu,optional"`
	Unit             hcl.Expression `hcl:"unit,optional"`
	Mode             hcl.Expression `hcl:"mode,optional"`
	WatchdogInterval hcl.Expression `hcl:"watchdog_interval,optional"`
	Unmanaged        hcl.Expression `hcl:"unmanaged,optional"`
	SMBudgetPercent  hcl.Expression `hcl:"sm_budget_percent,optional"`
	DefRange         hcl.Range      `hcl:",def_range"`
}

type fileGPUs struct {
	Simulated hcl.Expression `hcl:"simulated,optional"`
}

type fileTemplate struct {
	Name        string         `hcl:"name,label"`
	ProbeWindow hcl.Expression `hcl:"probe_window,optional"`
	ProbeCap    hcl.Expression `hcl:"probe_cap,optional"`
	Peak        hcl.Expression `hcl:"peak,optional"`
	Cap         hcl.Expression `hcl:"cap,optional"`
	CapFixed    hcl.Expression `hcl:"cap_fixed,optional"`
	Attempts    hcl.Expression `hcl:"max_attempts,optional"`
	DefRange    hcl.Range      `hcl:",def_range"`
}

type fileJob struct {
	Name     string         `hcl:"name,label"`
	Template hcl.Expression `hcl:"template,optional"`
	Command  hcl.Expression `hcl:"command"`
	Env      hcl.Expression `hcl:"env,optional"`
	Dir      hcl.Expression `hcl:"dir,optional"`
	Result   hcl.Expression `hcl:"result,optional"`
	CapFixed hcl.Expression `hcl:"cap_fixed,optional"`
	Attempts hcl.Expression `hcl:"max_attempts,optional"`
	DefRange hcl.Range      `hcl:",def_range"`
}

// Load reads and validates a queue file. Errors name the file, line and bad value.
func Load(path string) (Queue, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return Queue{}, fmt.Errorf("queue file: %w", err)
	}
	return Parse(src, path)
}

// Parse parses queue source; filename is used in errors and to resolve relative paths.
func Parse(src []byte, filename string) (Queue, error) {
	p := hclparse.NewParser()
	f, diags := p.ParseHCL(src, filename)
	if diags.HasErrors() {
		return Queue{}, diagError(diags)
	}
	var fq fileQueue
	if diags := gohcl.DecodeBody(f.Body, nil, &fq); diags.HasErrors() {
		return Queue{}, diagError(diags)
	}
	base := "."
	if filename != "" {
		if abs, err := filepath.Abs(filename); err == nil {
			base = filepath.Dir(abs)
		}
	}
	d := &decoder{}
	q := Queue{Path: filename, Templates: map[string]TemplateSpec{}}
	q.Arm = oneOf(d, fq.Arm, "arm", record.Arms)
	q.Profiles = oneOf(d, fq.Profiles, "profiles", record.ProfileChoices)
	if fq.GPUs != nil {
		q.SimulatedGPUs = d.strList(fq.GPUs.Simulated, "simulated")
		q.simulatedAt = fq.GPUs.Simulated.Range()
		if v, ok := d.value(fq.GPUs.Simulated); ok && v.CanIterateElements() && v.LengthInt() == 0 {
			// An empty list would fall back to the default GPU without a word: whoever wrote
			// it meant some GPUs, or none of this block.
			d.add(q.simulatedAt, "Empty simulated GPUs", `gpus { simulated = [] } names no GPU: list them ("H100=80GiB", "2xA100=40GiB") or leave simulated out for the default`)
		}
	}
	if fq.Policy != nil {
		pol := d.policy(fq.Policy)
		q.Policy = &pol
		q.Mode = pol.Mode
	}
	for _, t := range fq.Templates {
		if !policy.ValidName(t.Name) {
			d.add(t.DefRange, "Invalid template name", fmt.Sprintf("template %q: must be %s", t.Name, policy.NameRule))
		}
		if _, dup := q.Templates[t.Name]; dup {
			d.add(t.DefRange, "Duplicate template", fmt.Sprintf("template %q is declared twice", t.Name))
		}
		q.Templates[t.Name] = TemplateSpec{
			Name:          t.Name,
			ProbeWindow:   d.duration(t.ProbeWindow, "probe_window"),
			ProbeCapBytes: d.positiveSize(t.ProbeCap, "probe_cap", "half the GPU's budget"),
			PeakBytes:     d.positiveSize(t.Peak, "peak", "a probe of the template"),
			CapBytes:      d.positiveSize(t.Cap, "cap", "the cap its peak earns"),
		}
	}
	seen := map[string]bool{}
	for _, j := range fq.Jobs {
		// A job's name is its template's when it names none, so both follow the template rule.
		if !policy.ValidName(j.Name) {
			d.add(j.DefRange, "Invalid job name", fmt.Sprintf("job %q: must be %s", j.Name, policy.NameRule))
		}
		if seen[j.Name] {
			d.add(j.DefRange, "Duplicate job", fmt.Sprintf("job %q is declared twice; job names must be unique", j.Name))
		}
		seen[j.Name] = true
		job := Job{Name: j.Name, Template: d.str(j.Template, "template"), Env: d.env(j.Env)}
		if job.Template == "" {
			job.Template = j.Name
		} else if !policy.ValidName(job.Template) {
			d.add(j.Template.Range(), "Invalid template name", fmt.Sprintf("template = %q: must be %s", job.Template, policy.NameRule))
		}
		job.Command = d.command(j.Command, j.Name)
		job.commandAt = j.Command.Range()
		switch {
		case len(job.Command) > 0 || d.failedAt(j.Command.Range()):
		case isNull(j.Command):
			d.add(j.DefRange, "Missing command", fmt.Sprintf("job %q has no command: add command = [\"program\", \"arg\", ...]", j.Name))
		default:
			d.add(j.Command.Range(), "Empty command", fmt.Sprintf("job %q: command = [] must name a program", j.Name))
		}
		if dir := d.str(j.Dir, "dir"); dir != "" {
			job.Dir = absFrom(base, dir)
			job.dirAt, job.dirWritten = j.Dir.Range(), dir
		}
		// A relative result path is resolved against the results directory at run time; one
		// that climbs out of it would write anywhere ("../../etc/x"), so only an absolute path
		// may name a file elsewhere, and says so plainly.
		job.Result = filepath.Clean(d.str(j.Result, "result"))
		if job.Result == "." {
			job.Result = ""
		}
		if !filepath.IsAbs(job.Result) && (job.Result == ".." || strings.HasPrefix(job.Result, ".."+string(filepath.Separator))) {
			d.add(j.Result.Range(), "Result outside the results directory", fmt.Sprintf(
				"job %q: result = %q leaves the results directory; use a path inside it, or an absolute path to write elsewhere", j.Name, d.str(j.Result, "result")))
		}
		q.Jobs = append(q.Jobs, job)
	}
	d.checkTemplates(&fq, &q)
	d.checkResults(&fq, &q)
	if len(fq.Jobs) == 0 {
		d.add(hcl.Range{Filename: filename, Start: hcl.InitialPos, End: hcl.InitialPos}, "No jobs", "the queue has no job blocks; add at least one job \"name\" { command = [...] }")
	}
	d.ladder(&fq, &q)
	if d.diags.HasErrors() {
		return Queue{}, diagError(d.diags)
	}
	return q, nil
}

func absFrom(base, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(base, p)
}

// ErrInvalid is wrapped by every queue file error.
var ErrInvalid = errors.New("invalid queue file")

// Error carries every problem found in a queue file, each with its position.
type Error struct{ Diags hcl.Diagnostics }

func (e *Error) Error() string {
	s := ""
	for i, d := range e.Diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		if i > 0 && s != "" {
			s += "\n"
		}
		pos := ""
		if d.Subject != nil {
			pos = fmt.Sprintf("%s:%d,%d: ", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column)
		}
		s += pos + d.Summary
		if d.Detail != "" {
			s += ": " + d.Detail
		}
	}
	return s
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

func diagError(d hcl.Diagnostics) error { return &Error{Diags: d} }

// decoder turns attribute expressions into values, collecting diagnostics that point at them.
type decoder struct{ diags hcl.Diagnostics }

func (d *decoder) add(r hcl.Range, summary, detail string) {
	rr := r
	d.diags = append(d.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: &rr})
}

// failedAt says whether an error was reported at or inside r: HCL points a variable or a
// function call at the element that holds it, not at the start of the attribute's value.
func (d *decoder) failedAt(r hcl.Range) bool {
	for _, x := range d.diags {
		if x.Subject != nil && x.Subject.Filename == r.Filename &&
			x.Subject.Start.Byte >= r.Start.Byte && x.Subject.Start.Byte <= r.End.Byte {
			return true
		}
	}
	return false
}

// value evaluates expr; ok is false when the attribute is absent or broken (reported).
// isNull says whether an attribute is absent (gohcl gives a missing one a null expression).
func isNull(expr hcl.Expression) bool {
	if expr == nil {
		return true
	}
	v, diags := expr.Value(nil)
	return !diags.HasErrors() && v.IsNull()
}

func (d *decoder) value(expr hcl.Expression) (cty.Value, bool) {
	if expr == nil {
		return cty.NilVal, false
	}
	v, diags := expr.Value(nil)
	if diags.HasErrors() {
		d.diags = append(d.diags, diags...)
		return cty.NilVal, false
	}
	if v.IsNull() {
		return v, false
	}
	return v, true
}

func (d *decoder) str(expr hcl.Expression, name string) string {
	v, ok := d.value(expr)
	if !ok {
		return ""
	}
	if v.Type() != cty.String {
		d.add(expr.Range(), "Wrong type", fmt.Sprintf("%s must be a string, not %s", name, v.Type().FriendlyName()))
		return ""
	}
	return v.AsString()
}

// oneOf is a string attribute that must be one of allowed (a method cannot be generic).
func oneOf[T ~string](d *decoder, expr hcl.Expression, name string, allowed []T) T {
	s := T(d.str(expr, name))
	if s == "" {
		return ""
	}
	if slices.Contains(allowed, s) {
		return s
	}
	d.add(expr.Range(), "Invalid value", fmt.Sprintf("%s = %q: must be one of %q", name, string(s), allowed))
	return ""
}

func (d *decoder) strList(expr hcl.Expression, name string) []string {
	v, ok := d.value(expr)
	if !ok {
		return nil
	}
	if v.Type() == cty.String {
		return []string{v.AsString()}
	}
	if !v.Type().IsTupleType() && !v.Type().IsListType() {
		d.add(expr.Range(), "Wrong type", fmt.Sprintf("%s must be a list of strings, not %s", name, v.Type().FriendlyName()))
		return nil
	}
	var out []string
	for i, e := range v.AsValueSlice() {
		if e.IsNull() || e.Type() != cty.String {
			d.add(expr.Range(), "Wrong type", fmt.Sprintf("%s[%d] must be a string, not %s", name, i, e.Type().FriendlyName()))
			return nil
		}
		out = append(out, e.AsString())
	}
	return out
}

// command is a job's program and arguments. A single string is refused rather than taken as
// a one-word list: jobs run without a shell, so "python3 train.py" would name a program of that
// whole name, and the mistake would show only once the job failed to start, mid-run.
func (d *decoder) command(expr hcl.Expression, job string) []string {
	if v, diags := expr.Value(nil); !diags.HasErrors() && !v.IsNull() && v.Type() == cty.String {
		words := strings.Fields(v.AsString())
		d.add(expr.Range(), "Wrong type", fmt.Sprintf(
			"job %q: command = %q must be a list of strings, the program and its arguments (it runs without a shell): command = %s",
			job, v.AsString(), hclList(words)))
		return nil
	}
	return d.strList(expr, "command")
}

// hclList writes words as an HCL list of strings.
func hclList(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = strconv.Quote(w)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func (d *decoder) strMap(expr hcl.Expression, name string) map[string]string {
	v, ok := d.value(expr)
	if !ok {
		return nil
	}
	if !v.Type().IsObjectType() && !v.Type().IsMapType() {
		d.add(expr.Range(), "Wrong type", fmt.Sprintf("%s must be a map of strings, not %s", name, v.Type().FriendlyName()))
		return nil
	}
	out := map[string]string{}
	keys := []string{}
	for k := range v.AsValueMap() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		e := v.AsValueMap()[k]
		switch {
		case e.IsNull():
			d.add(expr.Range(), "Wrong type", fmt.Sprintf("%s[%q] is null", name, k))
		case e.Type() == cty.String:
			out[k] = e.AsString()
		case e.Type() == cty.Number || e.Type() == cty.Bool:
			// Numbers and booleans are written naturally in HCL; the process sees text anyway.
			out[k] = e.GoString()
			if e.Type() == cty.Number {
				out[k] = e.AsBigFloat().Text('f', -1)
			} else if e.True() {
				out[k] = "true"
			} else {
				out[k] = "false"
			}
		default:
			d.add(expr.Range(), "Wrong type", fmt.Sprintf("%s[%q] must be a string, not %s", name, k, e.Type().FriendlyName()))
		}
	}
	return out
}

// env is a job's environment: names a process can be given, and none that gpufrac sets for
// every attempt (taskenv.Owned), which would replace the job's value without a word.
func (d *decoder) env(expr hcl.Expression) map[string]string {
	env := d.strMap(expr, "env")
	keys := slices.Sorted(maps.Keys(env))
	for _, k := range keys {
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00"):
			d.add(expr.Range(), "Invalid env", fmt.Sprintf("env[%q]: a variable's name must be non-empty, without '=' or NUL", k))
		case strings.ContainsRune(env[k], 0):
			d.add(expr.Range(), "Invalid env", fmt.Sprintf("env[%q]: its value holds a NUL byte, which no process environment can", k))
		case taskenv.Owned(k):
			d.add(expr.Range(), "Invalid env", fmt.Sprintf("env[%q]: gpufrac sets it for each attempt (its GPU, cap, fence or reservation), so the job's value would be lost; leave it out", k))
		default:
			continue
		}
		delete(env, k)
	}
	return env
}

func (d *decoder) size(expr hcl.Expression, name string) size.Bytes {
	v, ok := d.value(expr)
	if !ok {
		return 0
	}
	var s string
	switch v.Type() {
	case cty.String:
		s = v.AsString()
	case cty.Number:
		s = v.AsBigFloat().Text('f', -1)
	default:
		d.add(expr.Range(), "Wrong type", fmt.Sprintf("%s must be a size such as \"12GiB\", not %s", name, v.Type().FriendlyName()))
		return 0
	}
	b, err := size.Parse(s)
	if err != nil {
		d.add(expr.Range(), "Invalid size", fmt.Sprintf("%s = %q: %v", name, s, err))
		return 0
	}
	return b
}

// positiveSize is a size that, where it is written, must be more than nothing. A template's
// zero meant "not set" further on: peak = "0" had its template probed from scratch, cap = "0"
// left the computed cap and probe_cap = "0" half the budget, all without a word (gpufrac run
// --probe-cap 0 is refused), and the policy store refuses a template without a footprint.
// unset is what leaving it out gives.
func (d *decoder) positiveSize(expr hcl.Expression, name, unset string) size.Bytes {
	b := d.size(expr, name)
	// No GPU holds 64TiB: past it a size is a typo (80TB for 80GB), which the policy store and
	// gpufrac units refuse too; here it made the job's cap a whole GPU without a word.
	if b > policy.MaxTemplateBytes {
		d.add(expr.Range(), "Invalid size", fmt.Sprintf("%s = %q is %s, more than any GPU holds (at most %s)", name, written(expr), b, policy.MaxTemplateBytes))
		return 0
	}
	if b != 0 || isNull(expr) || d.failedAt(expr.Range()) {
		return b
	}
	d.add(expr.Range(), "Invalid size", fmt.Sprintf("%s = %q: want more than 0 (leave it out for %s)", name, written(expr), unset))
	return 0
}

// written is a size attribute as the file has it: its string, or its number as text.
func written(expr hcl.Expression) string {
	v, diags := expr.Value(nil)
	switch {
	case diags.HasErrors() || v.IsNull():
		return ""
	case v.Type() == cty.String:
		return v.AsString()
	case v.Type() == cty.Number:
		return v.AsBigFloat().Text('f', -1)
	}
	return ""
}

func (d *decoder) duration(expr hcl.Expression, name string) time.Duration {
	s := d.str(expr, name)
	if s == "" {
		return 0
	}
	t, err := time.ParseDuration(s)
	if err != nil || t <= 0 {
		d.add(expr.Range(), "Invalid duration", fmt.Sprintf("%s = %q: want a positive duration such as \"30s\"", name, s))
		return 0
	}
	return t
}

func (d *decoder) number(expr hcl.Expression, name string) (float64, bool) {
	v, ok := d.value(expr)
	if !ok {
		return 0, false
	}
	if v.Type() != cty.Number {
		d.add(expr.Range(), "Wrong type", fmt.Sprintf("%s must be a number, not %s", name, v.Type().FriendlyName()))
		return 0, false
	}
	f, _ := v.AsBigFloat().Float64()
	return f, true
}

// policy applies the block over the defaults and validates the result, pointing each problem
// at its attribute.
func (d *decoder) policy(fp *filePolicy) policy.Policy {
	p := policy.Default()
	p.Name = "queue"
	ranges := map[string]hcl.Range{}
	setSize := func(expr hcl.Expression, name string, dst *size.Bytes) {
		if v, ok := d.value(expr); ok && v.IsKnown() {
			ranges[name] = expr.Range()
			*dst = d.size(expr, name)
		}
	}
	setSize(fp.Headroom, "headroom", &p.HeadroomBytes)
	setSize(fp.CapMargin, "cap_margin", &p.CapMarginBytes)
	setSize(fp.Unit, "unit", &p.UnitBytes)
	if f, ok := d.number(fp.CapMarginPercent, "cap_margin_percent"); ok {
		ranges["cap_margin_percent"] = fp.CapMarginPercent.Range()
		p.CapMarginPercent = f
	}
	if f, ok := d.number(fp.MaxTasksPerGPU, "max_tasks_per_gpu"); ok {
		ranges["max_tasks_per_gpu"] = fp.MaxTasksPerGPU.Range()
		// A fraction is no count of tasks: 2.5 must not quietly become 2, nor 1e30 a
		// negative number that the policy's check then names instead of what was written.
		if f != math.Trunc(f) || math.Abs(f) > math.MaxInt32 {
			d.add(fp.MaxTasksPerGPU.Range(), "Invalid policy", fmt.Sprintf("max_tasks_per_gpu = %v: must be a whole number of tasks", f))
		} else {
			p.MaxTasksPerGPU = int(f)
		}
	}
	if f, ok := d.number(fp.SMBudgetPercent, "sm_budget_percent"); ok {
		ranges["sm_budget_percent"] = fp.SMBudgetPercent.Range()
		p.SMBudgetPercent = f
	}
	if m := d.str(fp.Mode, "mode"); m != "" {
		ranges["mode"] = fp.Mode.Range()
		p.Mode = policy.Mode(m)
	}
	if u := d.str(fp.Unmanaged, "unmanaged"); u != "" {
		ranges["unmanaged"] = fp.Unmanaged.Range()
		p.Unmanaged = policy.Unmanaged(u)
	}
	if w := d.duration(fp.WatchdogInterval, "watchdog_interval"); w != 0 {
		ranges["watchdog_interval"] = fp.WatchdogInterval.Range()
		p.WatchdogInterval = w
	}
	if d.diags.HasErrors() {
		return p
	}
	if err := p.Validate(); err != nil {
		for _, e := range unjoin(err) {
			r := fp.DefRange
			var fe *policy.FieldError
			if errors.As(e, &fe) {
				if rr, ok := ranges[fe.Field]; ok {
					r = rr
				}
			}
			d.add(r, "Invalid policy", e.Error())
		}
	}
	return p
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
