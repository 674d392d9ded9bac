package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gpufrac/gpufrac/attribution"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/procfs"
	"github.com/gpufrac/gpufrac/size"
	"github.com/hashicorp/go-hclog"
)

// DefaultInterval samples at 50 Hz: NVML answers in tens of microseconds, and a short spike
// (an optimizer step) lasts longer than 20 ms.
const DefaultInterval = 20 * time.Millisecond

// DefaultStopGraceJob is how long a job that probe or the runner stops has between SIGINT and
// SIGKILL: long enough for a training job to save a checkpoint. (The enforcer's own grace for
// a task over its cap is shorter, and named apart, so the two are not confused.)
const DefaultStopGraceJob = 10 * time.Second

// Config is one probe run.
type Config struct {
	Backend gpu.Backend
	// GPU is the UUID of the GPU the job runs on, alone.
	GPU     string
	Command []string
	// Env is the complete environment of the job; it should pin the job to GPU.
	Env []string
	Dir string
	// Token is the reservation token in the job's environment, when it has one; it lets
	// processes that left the job's tree still be attributed to it.
	Token string
	// Window, when not zero, stops the job this long after its first GPU memory (SIGINT, then
	// SIGKILL after StopGrace): the footprint of its first Window on the GPU is the probe's
	// answer. Start-up before it touches the GPU does not use the window up.
	Window    time.Duration
	Interval  time.Duration
	StopGrace time.Duration
	Stdout    io.Writer
	Stderr    io.Writer
	// GPMInterval, when set, reads the GPU's performance monitor this often: the result's
	// SMActivePercent. 0: SM activity is not measured.
	GPMInterval time.Duration
	// OnSample, when set, sees every sample (for progress lines); it must be quick.
	OnSample func(Sample)
	Logger   hclog.Logger
}

// Sample is the job's memory at one moment.
type Sample struct {
	At    time.Duration `json:"at"` // since the job started
	Bytes size.Bytes    `json:"bytes"`
	Peak  size.Bytes    `json:"peak"`
}

// Result is what a probe measured.
type Result struct {
	GPU      string        `json:"gpu"`
	Peak     size.Bytes    `json:"peak_bytes"`
	Samples  int           `json:"samples"`
	Start    time.Time     `json:"start"`
	Duration time.Duration `json:"duration"`
	ExitCode int           `json:"exit_code"`
	// Stopped is true when the window ended the job: it was still running when the window's
	// stop was about to be sent. A job whose exit was in by then, even at that very instant, was
	// not stopped, and ExitCode is its own (see Run).
	Stopped bool `json:"stopped"`
	// SampleErrors counts samples the backend failed to answer.
	SampleErrors int `json:"sample_errors,omitempty"`
	// SMActivePercent is the share of the probe the GPU's SMs were active (GPM SM util): the
	// job's, as it ran alone. nil: not measured (no GPMInterval, no performance monitor).
	SMActivePercent *float64 `json:"sm_active_percent,omitempty"`
}

// ErrNoMemory means the job finished without ever holding GPU memory that could be attributed
// to it: it did not use the GPU it was given, or its processes were invisible.
var ErrNoMemory = errors.New("no GPU memory was attributed to the job")

// Run starts the job, samples it until it exits (or its window ends) and returns the peak.
// The result is returned together with ErrNoMemory when nothing was attributed, and with the
// context's error when ctx ends first (the job is stopped then).
//
// A job that exits as its window ends has exited: its own status counts, and Result.Stopped is
// false. Whether it has is asked when the window's stop is about to be sent, and only a job
// still running then is the window's; one that ends while the stop is on its way is the
// window's too, as its status can no longer be told from the stop's. This matters because
// `gpufrac probe` stores the peak of a job the window stopped as the template's footprint, and
// stores nothing for a job that failed: a failure landing on the window's last instant is still
// a failure, and which of two ready events a select happened to pick must not make it a
// footprint.
func Run(ctx context.Context, c Config) (Result, error) {
	return run(ctx, c, realSeams)
}

// job is what Run needs of the process it measures: *Proc, or a test's, whose exit the test
// decides.
type job interface {
	Done() <-chan struct{}
	Exited() bool
	Stop(grace time.Duration)
	ExitCode() int
	Reap()
	root() int
}

// seams are what Run takes from outside itself: the job it starts and the timers it waits on.
// A test replaces them to put a job's exit and its window's end in the one order it needs, which
// real processes and timers never promise.
type seams struct {
	start func(Spec) (job, error)
	// every makes the sampling ticks and after the window's end, each with a stop for it.
	every, after func(time.Duration) (<-chan time.Time, func())
}

var realSeams = seams{
	start: func(s Spec) (job, error) {
		p, err := Start(s)
		if err != nil {
			return nil, err // not a nil *Proc in a non-nil job
		}
		return p, nil
	},
	every: func(d time.Duration) (<-chan time.Time, func()) {
		t := time.NewTicker(d)
		return t.C, t.Stop
	},
	after: func(d time.Duration) (<-chan time.Time, func()) {
		t := time.NewTimer(d)
		return t.C, func() { t.Stop() }
	},
}

func run(ctx context.Context, c Config, s seams) (Result, error) {
	if c.Backend == nil {
		return Result{}, errors.New("probe: no GPU backend")
	}
	if c.GPU == "" {
		return Result{}, errors.New("probe: no GPU chosen")
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.StopGrace <= 0 {
		c.StopGrace = DefaultStopGraceJob
	}
	logger := c.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	logger = logger.Named("probe")
	proc, err := s.start(Spec{Command: c.Command, Env: c.Env, Dir: c.Dir, Stdout: c.Stdout, Stderr: c.Stderr})
	if err != nil {
		return Result{}, fmt.Errorf("probe: %w", err)
	}
	res := Result{GPU: c.GPU, Start: time.Now()}
	// The job's processes: its root, its process group, the processes below it and those that
	// carry its token, by the rule the watchdog applies (attribution).
	attr := attribution.New(procfs.Linux(""))
	tasks := attribution.NewTasks(attribution.Task{Token: c.Token, GPU: c.GPU, Root: proc.root()})
	tick, stopTick := s.every(c.Interval)
	defer stopTick()
	var window <-chan time.Time
	stopWindow := func() {}
	defer func() { stopWindow() }()
	sample := func() {
		procs, err := c.Backend.Processes(ctx, c.GPU)
		if err != nil {
			res.SampleErrors++
			if res.SampleErrors == 1 {
				logger.Warn("cannot read GPU processes", "gpu", c.GPU, "error", err)
			}
			return
		}
		attr.NewPass()
		b, _ := attr.Split(c.GPU, procs, tasks).Use(c.Token)
		res.Samples++
		if b > 0 && res.Peak == 0 && c.Window > 0 {
			window, stopWindow = s.after(c.Window)
		}
		if b > res.Peak {
			res.Peak = b
		}
		if c.OnSample != nil {
			c.OnSample(Sample{At: time.Since(res.Start), Bytes: b, Peak: res.Peak})
		}
	}
	var sm *SMMeter
	if c.GPMInterval > 0 {
		sm = OpenSM(ctx, c.Backend, c.GPU, logger)
	}
	smTick, smStop := sm.Ticks(c.GPMInterval)
	defer smStop()
	var ctxErr error
loop:
	for {
		select {
		case <-proc.Done():
			break loop
		case <-smTick:
			sm.Read(ctx)
		case <-tick:
			sample()
		case <-window:
			sample()
			// The select picks at random between a window and an exit that are ready together,
			// and an exit may come during the sample, or be in without Done yet: so whether the
			// job ended by itself is asked here, last, and an exit found wins (Run).
			if proc.Exited() {
				break loop
			}
			res.Stopped = true
			logger.Debug("probe window over, stopping the job", "window", c.Window)
			proc.Stop(c.StopGrace)
			break loop
		case <-ctx.Done():
			ctxErr = ctx.Err()
			proc.Stop(c.StopGrace)
			break loop
		}
	}
	res.Duration = time.Since(res.Start)
	res.SMActivePercent = sm.Close(context.WithoutCancel(ctx))
	res.ExitCode = proc.ExitCode()
	proc.Reap()
	if ctxErr != nil {
		return res, fmt.Errorf("probe interrupted: %w", ctxErr)
	}
	if res.Peak == 0 {
		return res, fmt.Errorf("probe of %q on GPU %s: %w (%d samples)", c.Command[0], c.GPU, ErrNoMemory, res.Samples)
	}
	return res, nil
}
