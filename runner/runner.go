package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/probe"
	"github.com/gpufrac/gpufrac/size"
	"github.com/hashicorp/go-hclog"
)

// Options configure one run of a queue.
type Options struct {
	// Arm is ArmPacked (default), ArmExclusive, ArmStatic, ArmUncapped or ArmUncappedRetry.
	Arm string
	// Mode is the enforcement mode of the packed and static arms; empty = the policy's mode.
	Mode policy.Mode
	// Profiles is ProfilesWarm (default) or ProfilesCold.
	Profiles string
	// Backend is the GPU backend; required.
	Backend gpu.Backend
	// StateDir holds the ledger (profiles survive between runs there). Empty keeps the ledger
	// in memory: nothing is remembered, which suits benchmarks that must not share state.
	StateDir string
	// Policy, when its Name is set, wins over the queue's policy block; else the queue's block,
	// else policy.Default().
	Policy policy.Policy
	// OutDir receives results.json, attempts.csv, report.html and logs/; required.
	OutDir string
	Logger hclog.Logger
	// Progress receives one line per event, and a status line when it is a terminal.
	Progress io.Writer
	// MPS configures the MPS control daemon in mps mode.
	MPS MPSOptions
	// MaxConcurrent bounds the jobs running at once on all GPUs together; 0 = the arm's rule.
	MaxConcurrent int
	// ProbeWindow, when set, makes probes windows of this length for templates that do not set
	// their own probe_window: in place the job runs on under its cap when the window ends;
	// alone (mps) the probe attempt is stopped and the job runs again.
	ProbeWindow time.Duration
	// ProbeCap, when set, is the protective cap of in-place probes of templates that do not set
	// their own probe_cap (default: half the GPU's budget).
	ProbeCap size.Bytes
	// GPUs restricts the run to these GPU UUIDs; empty = every healthy GPU.
	GPUs []string
	// SampleInterval is how often each GPU's processes are sampled; 0 = 20ms (50 Hz).
	SampleInterval time.Duration
	// StopGrace is the time between SIGINT and SIGKILL when a job is stopped; 0 = 10s.
	StopGrace time.Duration
	// Self replaces a command's first word "gpufrac"; empty = this executable.
	Self string
	// ExtraEnv is added to every job's environment (under the job's own env and gpufrac's).
	ExtraEnv map[string]string
	// Fence is the allocation fence: FenceAuto (default), FenceOn or FenceOff.
	Fence string
	// FenceLibrary is libgpufrac-fence.so; empty = beside the executable.
	FenceLibrary string
	// Borrow is BorrowAuto (default), BorrowOff, BorrowNow or BorrowWait: whether a packed job
	// may use memory past its cap that no other job's guarantee covers (borrow.go).
	Borrow string
	// BorrowWait bounds how long a borrower's allocation waits for memory; 0 = DefaultBorrowWait.
	BorrowWait time.Duration
}

// Outcomes of an attempt.
const (
	OutcomeOK           = "ok"
	OutcomeCapViolation = "cap-violation"
	OutcomeFailed       = "failed"
	// OutcomeProbe is a probe window that ended: the job runs again under its cap.
	OutcomeProbe    = "probe"
	OutcomeCanceled = "canceled"
)

// Attempt is one run of one job.
type Attempt struct {
	Job      string     `json:"job"`
	Template string     `json:"template"`
	Number   int        `json:"attempt"` // 1 for a job's first attempt
	GPU      string     `json:"gpu"`
	GPUIndex int        `json:"gpu_index"`
	CapBytes size.Bytes `json:"cap_bytes"` // 0 when uncapped
	Capped   bool       `json:"capped"`
	WholeGPU bool       `json:"whole_gpu"`
	Probe    bool       `json:"probe"`
	Start    time.Time  `json:"start"`
	End      time.Time  `json:"end"`
	ExitCode int        `json:"exit_code"`
	Outcome  string     `json:"outcome"`
	// PeakBytes is the highest memory of the job's whole process tree, sampled at 50 Hz.
	PeakBytes size.Bytes `json:"peak_bytes"`
	Detail    string     `json:"detail,omitempty"`
	// Violation is set when the enforcer caught the attempt above its cap.
	Violation *ledger.Violation `json:"violation,omitempty"`
	Log       string            `json:"log,omitempty"`
	Result    string            `json:"result,omitempty"`
	// Samples is the attempt's memory over time (downsampled to about 10 a second).
	Samples []MemSample `json:"samples,omitempty"`
	// CapChanges are the changes of the cap while the attempt ran (an in-place probe's
	// protective cap lowered when its window ends); CapBytes is the cap after the last one.
	CapChanges []CapChange `json:"cap_changes,omitempty"`
}

// CapChange is a cap lowered (or raised) in place while an attempt ran.
type CapChange struct {
	At   time.Time  `json:"at"`
	From size.Bytes `json:"from_bytes"`
	To   size.Bytes `json:"to_bytes"`
}

// capAt is the attempt's cap at time t.
func (a Attempt) capAt(t time.Time) size.Bytes {
	c := a.CapBytes
	for i := len(a.CapChanges) - 1; i >= 0; i-- {
		if t.Before(a.CapChanges[i].At) {
			c = a.CapChanges[i].From
		}
	}
	return c
}

// CapLabel is the attempt's cap for people, with its history when it changed in place:
// "39GiB -> 5GiB". The terminal summary and the report say it the same way.
func (a Attempt) CapLabel() string {
	switch {
	case a.WholeGPU:
		return "whole GPU"
	case !a.Capped:
		return "none"
	}
	s := ""
	for _, c := range a.CapChanges {
		s += c.From.String() + " -> "
	}
	return s + a.CapBytes.String()
}

// Duration is how long the attempt ran.
func (a Attempt) Duration() time.Duration { return a.End.Sub(a.Start) }

// MemSample is an attempt's memory at one moment, in seconds since the run started.
type MemSample struct {
	T     float64    `json:"t"`
	Bytes size.Bytes `json:"bytes"`
}

// JobResult is a job's final state.
type JobResult struct {
	Name     string `json:"name"`
	Template string `json:"template"`
	Outcome  string `json:"outcome"` // of the final attempt
	Attempts int    `json:"attempts"`
	ExitCode int    `json:"exit_code"`
	Result   string `json:"result,omitempty"`
}

// GPUResult describes a GPU the run used.
type GPUResult struct {
	UUID        string     `json:"uuid"`
	Index       int        `json:"index"`
	Model       string     `json:"model"`
	TotalBytes  size.Bytes `json:"total_bytes"`
	BudgetBytes size.Bytes `json:"budget_bytes"`
	Mode        string     `json:"mode"`
	Busy        float64    `json:"busy_fraction"`
	// Completed counts the jobs whose final attempt exited 0 on this GPU.
	Completed int `json:"completed"`
	// JobsPerGPUHour = Completed / makespan; the run's figure is the mean over its GPUs.
	JobsPerGPUHour float64 `json:"jobs_per_gpu_hour"`
}

// Result is everything a run did.
type Result struct {
	Arm      string        `json:"arm"`
	Mode     string        `json:"mode"`
	Profiles string        `json:"profiles"`
	Backend  string        `json:"backend"`
	Driver   string        `json:"driver"`
	Queue    string        `json:"queue,omitempty"`
	Policy   policy.Policy `json:"policy"`
	Start    time.Time     `json:"start"`
	End      time.Time     `json:"end"`
	GPUs     []GPUResult   `json:"gpus"`
	Jobs     []JobResult   `json:"jobs"`
	Attempts []Attempt     `json:"attempts"`
	// BusyFraction is the mean GPU utilization during the run, 0 to 1.
	BusyFraction float64 `json:"busy_fraction"`
	// Use is where the makespan went: jobs running on average, time a job held a GPU alone.
	Use TimeUse `json:"time_use"`
	// Completed counts jobs whose final attempt exited 0.
	Completed int `json:"completed"`
	// JobsPerGPUHour = Completed / (makespan x GPUs used).
	JobsPerGPUHour float64 `json:"jobs_per_gpu_hour"`
	// ExclusiveEstimate is the makespan one-job-at-a-time would take, from this run's alone
	// attempts per template; zero when some template never ran alone here.
	ExclusiveEstimate time.Duration `json:"exclusive_estimate,omitempty"`
	Violations        int           `json:"violations"`
	// Collateral counts attempts that failed during a GPU-wide event and were re-run.
	Collateral int `json:"collateral"`
	// GPUEvents are the enforcer's GPU-wide events during the run (GPU marked unhealthy).
	GPUEvents []GPUEvent `json:"gpu_events,omitempty"`
	OutDir    string     `json:"out_dir"`
}

// Makespan is the time from the first job's start to the last job's exit.
func (r *Result) Makespan() time.Duration {
	var first, last time.Time
	for _, a := range r.Attempts {
		if first.IsZero() || a.Start.Before(first) {
			first = a.Start
		}
		if a.End.After(last) {
			last = a.End
		}
	}
	if first.IsZero() {
		return 0
	}
	return last.Sub(first)
}

// ErrOptions is wrapped by option errors.
var ErrOptions = errors.New("invalid run options")

func (o *Options) fill(q Queue) error {
	if o.Arm == "" {
		o.Arm = q.Arm
	}
	if o.Arm == "" {
		o.Arm = ArmPacked
	}
	if !slices.Contains(Arms, o.Arm) {
		return fmt.Errorf("%w: arm %q: want one of %q", ErrOptions, o.Arm, Arms)
	}
	if o.Profiles == "" {
		o.Profiles = q.Profiles
	}
	if o.Profiles == "" {
		o.Profiles = ProfilesWarm
	}
	if o.Profiles != ProfilesCold && o.Profiles != ProfilesWarm {
		return fmt.Errorf("%w: profiles %q: want %q or %q", ErrOptions, o.Profiles, ProfilesCold, ProfilesWarm)
	}
	if o.Policy.Name == "" {
		if q.Policy != nil {
			o.Policy = *q.Policy
		} else {
			o.Policy = policy.Default()
		}
	}
	if o.Mode != "" {
		o.Policy.Mode = o.Mode
	}
	if err := o.Policy.Validate(); err != nil {
		return fmt.Errorf("%w: policy: %w", ErrOptions, err)
	}
	if o.Backend == nil {
		return fmt.Errorf("%w: no GPU backend", ErrOptions)
	}
	if o.OutDir == "" {
		return fmt.Errorf("%w: no output directory", ErrOptions)
	}
	if o.MaxConcurrent < 0 {
		return fmt.Errorf("%w: max concurrency %d is negative", ErrOptions, o.MaxConcurrent)
	}
	if err := enforcer.CheckFenceMode(o.Fence); err != nil {
		return fmt.Errorf("%w: %w", ErrOptions, err)
	}
	if err := CheckBorrow(o.Borrow); err != nil {
		return fmt.Errorf("%w: %w", ErrOptions, err)
	}
	if o.BorrowWait < 0 {
		return fmt.Errorf("%w: borrow wait %s is negative", ErrOptions, o.BorrowWait)
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.SampleInterval <= 0 {
		o.SampleInterval = probe.DefaultInterval
	}
	if o.StopGrace <= 0 {
		o.StopGrace = probe.DefaultStopGrace
	}
	if o.Self == "" {
		if exe, err := os.Executable(); err == nil {
			o.Self = exe
		}
	}
	return nil
}

// modeOf is the mode the run's GPUs are put in: arms without caps need no MPS daemon.
func (o *Options) modeOf() policy.Mode {
	switch o.Arm {
	case ArmPacked, ArmStatic:
		return o.Policy.Mode
	}
	return policy.ModeIsolated
}

// enforced says whether the arm runs the watchdog.
func (o *Options) enforced() bool { return o.Arm == ArmPacked || o.Arm == ArmStatic }

// Run executes the queue and returns what happened. Results are written to o.OutDir even when
// the run is interrupted (ctx ends): jobs are then stopped and recorded as canceled.
func Run(ctx context.Context, q Queue, o Options) (*Result, error) {
	if err := o.fill(q); err != nil {
		return nil, err
	}
	if len(q.Jobs) == 0 {
		return nil, fmt.Errorf("%w: the queue has no jobs", ErrOptions)
	}
	for _, j := range q.Jobs {
		if len(j.Command) == 0 {
			return nil, fmt.Errorf("%w: job %q has no command", ErrOptions, j.Name)
		}
		if j.Dir != "" {
			// Else the launch fails with a fork/exec error that blames the program.
			if fi, err := os.Stat(j.Dir); err != nil || !fi.IsDir() {
				return nil, fmt.Errorf("%w: job %q: working directory dir = %q does not exist or is not a directory", ErrOptions, j.Name, j.Dir)
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(o.OutDir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("results directory %q: %w", o.OutDir, err)
	}
	r, err := newRun(ctx, q, o)
	if err != nil {
		return nil, err
	}
	defer r.close()
	defer r.prog.unpublish() // gpufrac status shows no progress of a run that ended
	res, runErr := r.loop(ctx)
	if err := writeOutputs(res, o.OutDir); err != nil {
		return res, errors.Join(runErr, err)
	}
	r.prog.summary(res)
	return res, runErr
}

// run is one execution of a queue.
type run struct {
	o     Options
	q     Queue
	log   hclog.Logger
	led   *ledger.Ledger
	guard guard
	s     *sched
	gpus  map[string]GPUResult
	prog  *progress
	// fenceNote says whether the allocation fence is on and why; borrowNote the same of
	// borrowing.
	fenceNote, borrowNote string
	borrows               bool
	start                 time.Time

	mu       sync.Mutex
	active   map[*active]bool
	attempts []Attempt
	busy     map[string][]int
	wide     gpuEvents // GPU-wide events, for collateral failures

	done     chan *active
	recap    chan *active // in-place probes whose window ended
	stopBusy context.CancelFunc
	wg       sync.WaitGroup
}

func newRun(ctx context.Context, q Queue, o Options) (*run, error) {
	log := o.Logger.Named("runner")
	r := &run{o: o, q: q, log: log, gpus: map[string]GPUResult{}, active: map[*active]bool{},
		busy: map[string][]int{}, done: make(chan *active, 64), recap: make(chan *active, 64)}
	lopts := ledger.Options{Logger: o.Logger, NoPersist: o.StateDir == ""}
	if !lopts.NoPersist {
		lopts.Holder = selfHolder()
	}
	led, err := ledger.Open(o.StateDir, lopts)
	if err != nil {
		return nil, fmt.Errorf("ledger in %q: %w", o.StateDir, err)
	}
	r.led = led
	r.prog = newProgress(o.Progress, r)
	for _, rep := range led.Repairs() {
		r.prog.line("%-8s %s", "ledger", rep)
	}
	// A run killed outright (SIGKILL, a crash) took its jobs with it (parent-death signal) but
	// left its reservations: they go now, not after the grace.
	gone, err := led.ReleaseOrphans(holderAlive)
	if err != nil {
		r.log.Warn("cannot release the reservations of a gpufrac run that is gone", "error", err)
	}
	for _, res := range gone {
		r.prog.line("%-8s reservation of %s on %s (cap %s): its gpufrac run (%s) is gone", "released", res.Task.JobName, res.GPU,
			res.CapBytes, res.Holder)
	}
	ok := false
	defer func() {
		if !ok {
			r.close()
		}
	}()
	if err := led.SetPolicy(o.Policy); err != nil {
		return nil, fmt.Errorf("ledger policy: %w", err)
	}
	devs, err := o.Backend.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing GPUs: %w", err)
	}
	var infos []ledger.GPUInfo
	var uuids []string
	for _, d := range devs {
		infos = append(infos, ledger.GPUInfo{UUID: d.UUID, Index: d.Index, Model: d.Model, TotalBytes: d.MemoryBytes,
			PCIBusID: d.PCIBusID, Healthy: d.Healthy, HealthReason: d.HealthReason})
		if !d.Healthy || (len(o.GPUs) > 0 && !slices.Contains(o.GPUs, d.UUID)) {
			continue
		}
		uuids = append(uuids, d.UUID)
	}
	for _, want := range o.GPUs {
		if !slices.ContainsFunc(devs, func(d gpu.Device) bool { return d.UUID == want }) {
			return nil, fmt.Errorf("%w: GPU %q is not one of this machine's (%d GPUs)", ErrOptions, want, len(devs))
		}
	}
	if len(uuids) == 0 {
		return nil, fmt.Errorf("%w: no healthy GPU to run on (%d listed)", ErrOptions, len(devs))
	}
	if err := led.SyncGPUs(infos); err != nil {
		return nil, fmt.Errorf("ledger GPUs: %w", err)
	}
	mode := o.modeOf()
	for _, u := range uuids {
		if err := led.SetMode(u, mode); err != nil {
			return nil, fmt.Errorf("ledger mode of %s: %w", u, err)
		}
		st, err := led.State(u)
		if err != nil {
			return nil, err
		}
		if len(st.Reservations) > 0 {
			r.log.Warn("GPU already holds reservations from another process; they count against its budget",
				"gpu", u, "reservations", len(st.Reservations))
		}
		r.gpus[u] = GPUResult{UUID: u, Index: st.Index, Model: st.Model, TotalBytes: st.TotalBytes,
			BudgetBytes: st.BudgetBytes, Mode: string(mode)}
	}
	if o.enforced() {
		g, notes, err := newGuard(ctx, o, led, uuids, r.onEvent)
		if err != nil {
			return nil, err
		}
		r.guard, r.fenceNote, r.borrowNote, r.borrows = g, notes.fence, notes.borrow, notes.borrows
	}
	jobs := make([]*jobState, len(q.Jobs))
	for i, j := range q.Jobs {
		jobs[i] = &jobState{Job: j, idx: i}
	}
	r.s = newSched(o.Arm, o.Policy, led, uuids, jobs, o.MaxConcurrent, log)
	r.s.window = o.ProbeWindow
	r.s.probeCap = o.ProbeCap
	r.s.probeInPlace = o.Arm == ArmPacked && mode == policy.ModeIsolated && r.guard != nil
	if r.borrows && r.guard != nil {
		r.s.lender = r.guard
	}
	for name, t := range q.Templates {
		r.s.templates[name] = t
		if t.PeakBytes > 0 {
			r.s.peaks[name] = t.PeakBytes
		}
	}
	if o.Profiles == ProfilesWarm {
		for _, p := range led.Profiles() {
			r.s.peaks[p.Template] = p.PeakBytes
		}
	}
	ok = true
	return r, nil
}

func (r *run) close() {
	if r.stopBusy != nil {
		r.stopBusy()
	}
	r.wg.Wait()
	if r.guard != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := r.guard.Shutdown(ctx); err != nil {
			r.log.Warn("enforcer shutdown", "error", err)
		}
		cancel()
	}
	if r.led != nil {
		if err := r.led.Close(); err != nil {
			r.log.Warn("ledger close", "error", err)
		}
	}
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
