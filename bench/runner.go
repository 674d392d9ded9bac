package bench

import (
	"context"
	"io"
	"path/filepath"
	"time"

	"github.com/gpufrac/gpufrac/bench/arms"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/runner"
	"github.com/gpufrac/gpufrac/size"
	"github.com/hashicorp/go-hclog"
)

// RunnerArms runs arms through the runner package, the same code path as `gpufrac run`.
type RunnerArms struct {
	Backend gpu.Backend
	// Policy, when its Name is set, replaces policy.Default() (the cap rule, headroom, limits).
	Policy policy.Policy
	// ProbeWindow makes cold probes windows of this length (0: a probe is a whole run).
	ProbeWindow time.Duration
	// ProbeCap is the protective cap of in-place probes (0: half the GPU's budget).
	ProbeCap size.Bytes
	// Borrow and BorrowWait are the runner's borrowing settings of the packed arms.
	Borrow     string
	BorrowWait time.Duration
	// Templates are declared template specs (peaks, caps, probe windows), usually none.
	Templates map[string]queue.TemplateSpec
	MPS       runner.MPSOptions
	// GPMInterval is how often the GPUs' performance monitors are read during an arm (0:
	// DefaultGPMInterval; negative: not read).
	GPMInterval time.Duration
	// Self replaces a job command's first word "gpufrac".
	Self     string
	Logger   hclog.Logger
	Progress io.Writer
}

// RunArm implements ArmRunner. The runner's own outputs (results.json, attempts.csv, report.html,
// one log per attempt) go to outDir/runner.
func (r RunnerArms) RunArm(ctx context.Context, spec ArmSpec, jobs []JobSpec, stateDir, outDir string) (ArmRun, error) {
	q := queue.Queue{Templates: r.Templates}
	for _, j := range jobs {
		q.Jobs = append(q.Jobs, queue.Job{Name: j.Name, Template: j.Template, Command: j.Command, Env: j.Env, Result: j.Result})
	}
	o, err := r.options(spec, stateDir, outDir)
	if err != nil {
		return ArmRun{}, err
	}
	var rec *gpmRecorder
	var notes []string
	if r.GPMInterval >= 0 {
		iv := r.GPMInterval
		if iv == 0 {
			iv = DefaultGPMInterval
		}
		rec, notes = startGPM(ctx, r.Backend, iv)
	}
	res, err := runner.Run(ctx, q, o)
	run := FromRunner(res)
	if rec != nil {
		var more []string
		run.GPM, more = rec.finish()
		notes = append(notes, more...)
	}
	run.GPMNotes = notes
	return run, err
}

// runnerGPM is the runner's GPMInterval: off (negative) while the benchmark records GPM.
func (r RunnerArms) runnerGPM() time.Duration {
	if r.GPMInterval >= 0 {
		return -1
	}
	return 0
}

// options are the runner's options of one arm: the arm's rules, its borrowing, hold and compute
// budget over the invocation's.
func (r RunnerArms) options(spec ArmSpec, stateDir, outDir string) (runner.Options, error) {
	o, err := arms.Options(runner.Options{
		Mode: policy.Mode(spec.Mode), Profiles: spec.Profiles, Backend: r.Backend,
		StateDir: stateDir, Policy: r.Policy, OutDir: filepath.Join(outDir, "runner"),
		Logger: r.Logger, Progress: r.Progress, MPS: r.MPS, ProbeWindow: r.ProbeWindow, ProbeCap: r.ProbeCap, Self: r.Self,
		Borrow: r.Borrow, BorrowWait: r.BorrowWait, BorrowHold: spec.Hold,
		// The benchmark reads the GPUs' performance monitors itself (startGPM) whenever it
		// records them: one reader per GPU, so the runner meters nothing then.
		GPMInterval: r.runnerGPM(),
	}, spec.Arm)
	if err != nil {
		return o, err
	}
	if spec.Borrow != "" {
		o.Borrow = spec.Borrow
	}
	o.Stage, o.StageByDefault = spec.Stage, !spec.StageNamed
	o.ProbeKnown = spec.ProbeKnown
	if spec.SMBudget > 0 {
		if o.Policy.Name == "" {
			o.Policy = policy.Default()
		}
		o.Policy.SMBudgetPercent = spec.SMBudget
	}
	if o.Profiles == "" {
		// Exclusive: no footprints are needed, and none should leak in from elsewhere.
		o.Profiles = record.ProfilesCold
	}
	return o, nil
}

// FromRunner keeps the runner's records of a run for the benchmark (nil gives an empty run),
// without the attempts' memory samples, which the runner's own results.json keeps.
func FromRunner(res *record.Result) ArmRun {
	var run ArmRun
	if res == nil {
		return run
	}
	run.BusyFraction = res.BusyFraction
	if len(res.GPUs) > 0 {
		run.Budgets = map[string]size.Bytes{}
		for _, g := range res.GPUs {
			run.Budgets[g.UUID] = g.BudgetBytes
		}
	}
	for _, a := range res.Attempts {
		a.Samples = nil
		run.Attempts = append(run.Attempts, a)
	}
	return run
}
