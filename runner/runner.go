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
	"strings"
	"sync"
	"time"

	"github.com/gpufrac/gpufrac/collateral"
	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/probe"
	"github.com/gpufrac/gpufrac/progress"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/runstatus"
	"github.com/gpufrac/gpufrac/sched"
	"github.com/gpufrac/gpufrac/size"
	"github.com/hashicorp/go-hclog"
)

// Options configure one run of a queue. A day-to-day run sets Backend and OutDir, and perhaps
// a store's Policy; the rest has defaults. Arm, last, is the benchmark's.
type Options struct {
	// Mode is the enforcement mode of the packed and static arms; empty = the policy's mode.
	Mode policy.Mode
	// Profiles is ProfilesWarm (default) or ProfilesCold.
	Profiles record.Profiles
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
	// GPMInterval is how often an attempt metered alone on its GPU reads the GPU's performance
	// monitor (probe.Shares); 0 = probe.DefaultGPMInterval; negative: no attempt is metered (a
	// caller that reads the monitors itself, as the benchmark does, and wants one reader).
	GPMInterval time.Duration
	// Self replaces a command's first word "gpufrac"; empty = this executable.
	Self string
	// ExtraEnv is added to every job's environment (under the job's own env and gpufrac's).
	ExtraEnv map[string]string
	// Fence is the allocation fence: enforcer.FenceAuto (default), FenceOn or FenceOff.
	Fence enforcer.FenceMode
	// FenceLibrary is libgpufrac-fence.so; empty = beside the executable.
	FenceLibrary string
	// Borrow is a node borrowing setting (node.BorrowAuto, the default; BorrowOff, BorrowNow,
	// BorrowWait, BorrowLend): whether a packed job may use memory past its cap that no other
	// job's guarantee covers (borrow.go).
	Borrow string
	// BorrowWait bounds how long a borrower's allocation waits for memory; 0 = node.DefaultBorrowWait.
	BorrowWait time.Duration
	// BorrowHold is how long admissions on a GPU pause for a borrower that waited there;
	// nil = policy.DefaultHold.
	BorrowHold *policy.HoldRule
	// Stage is how many jobs may start staged on a GPU at once: before the memory their caps
	// stand for is free, on a small reservation, their first large allocation waiting for the
	// rest (sched/stage.go). Packed arm, isolated GPUs with the fence, not under lend; 0: none.
	// gpufrac run stages DefaultStage unless told otherwise.
	Stage int
	// StageByDefault says Stage is a default, not asked for: where staging cannot work (another
	// arm, mps mode, no fence, lend) the run stages none without a line saying why.
	StageByDefault bool
	// ProbeKnown offers a probe that borrows, on a GPU where a job already borrows, a guarantee
	// of the median of the caps known then (sched.Config.ProbeKnown; gpufrac run
	// --probe-guarantee known); false: the small guarantee alone.
	ProbeKnown bool
	// Now is the run's clock where time decides or is recorded: attempts' starts and ends, the
	// give-up after stuckAfter with nothing running, a probe's cap change, the progress published
	// for gpufrac status (once a second), an enforcer event that carries no time; nil = time.Now.
	// Tests drive it to prove rules a wall clock could only prove by waiting. Timers and
	// tickers (sampling, probe windows, the watchdog's wait) stay on the wall clock: they pace
	// real processes.
	Now func() time.Time
	// healthPeriod is how often the node looks at the backend's health (node.HealthPeriod when
	// 0); tests lengthen it to show what the look at a failed exit alone sees.
	healthPeriod time.Duration

	// Arm is the set of admission rules: empty (or the queue's arm) is ArmPacked, the rules
	// gpufrac exists for. The other arms (ArmExclusive, ArmStatic, ArmUncapped,
	// ArmUncappedRetry) are the benchmark's baselines, which packing is measured against
	// (bench/); their rules come with them in Admission (bench/arms), and `gpufrac run --arm`
	// offers them so a baseline can be run by hand.
	Arm       record.Arm
	Admission sched.Admission
}

// ErrOptions is wrapped by option errors.
var ErrOptions = errors.New("invalid run options")

func (o *Options) fill(q queue.Queue) error {
	if err := o.fillArm(q); err != nil {
		return err
	}
	if o.Profiles == "" {
		o.Profiles = q.Profiles
	}
	if o.BorrowWait == 0 {
		o.BorrowWait = q.BorrowWait
	}
	if o.Profiles == "" {
		o.Profiles = record.ProfilesWarm
	}
	if err := o.Profiles.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrOptions, err)
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
	if err := o.Fence.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrOptions, err)
	}
	if err := node.CheckBorrow(o.Borrow); err != nil {
		return fmt.Errorf("%w: %w", ErrOptions, err)
	}
	if o.BorrowWait < 0 {
		return fmt.Errorf("%w: borrow wait %s is negative", ErrOptions, o.BorrowWait)
	}
	if o.Stage < 0 || o.Stage > maxStage {
		return fmt.Errorf("%w: stage %d: want 0 (none) to %d jobs a GPU", ErrOptions, o.Stage, maxStage)
	}
	if o.BorrowHold == nil {
		h := policy.DefaultHold
		o.BorrowHold = &h
	}
	if err := o.BorrowHold.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrOptions, err)
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.SampleInterval <= 0 {
		o.SampleInterval = probe.DefaultInterval
	}
	if o.StopGrace <= 0 {
		o.StopGrace = probe.DefaultStopGraceJob
	}
	if o.GPMInterval == 0 {
		o.GPMInterval = probe.DefaultGPMInterval
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
	case record.ArmPacked, record.ArmStatic:
		return o.Policy.Mode
	}
	return policy.ModeIsolated
}

// enforced says whether the arm runs the watchdog.
func (o *Options) enforced() bool { return o.Arm.Enforced() }

// Run executes the queue and returns what happened. Results are written to o.OutDir even when
// the run is interrupted (ctx ends): jobs are then stopped and recorded as canceled.
func Run(ctx context.Context, q queue.Queue, o Options) (*record.Result, error) {
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
		if p := resultIn(o.OutDir, j.Result); p != "" && o.StateDir != "" && within(o.StateDir, p) && !within(o.OutDir, p) {
			// The queue checks results against the results directory; the state directory is
			// the ledger's, and a job's result over ledger.json or run.json would lose it.
			return nil, fmt.Errorf("%w: job %q: result = %q is inside the state directory %s, which holds the ledger; choose a path outside it",
				ErrOptions, j.Name, j.Result, o.StateDir)
		}
		if j.Dir != "" {
			// Else the sched.Launch fails with a fork/exec error that blames the program.
			if fi, err := os.Stat(j.Dir); err != nil || !fi.IsDir() {
				return nil, fmt.Errorf("%w: job %q: working directory dir = %q does not exist or is not a directory", ErrOptions, j.Name, j.Dir)
			}
		}
	}
	if err := foreignOutputs(o.OutDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(o.OutDir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("results directory %q: %w", o.OutDir, err)
	}
	r, err := newRun(ctx, q, o)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if o.StateDir != "" {
		defer runstatus.Remove(o.StateDir)
	}
	res, runErr := r.loop(ctx)
	if err := r.finishOutputs(res); err != nil {
		return res, errors.Join(runErr, err)
	}
	return res, runErr
}

// run is one execution of a queue.
type run struct {
	o    Options
	q    queue.Queue
	log  hclog.Logger
	node *node.Node
	led  *ledger.Ledger // the node's
	// guard is the node's enforcer, nil when the arm runs none.
	guard guard
	unsub func() // of the enforcer's events
	s     *sched.Sched
	gpus  map[string]record.GPUResult
	prog  *progress.Printer
	// published is when the progress was last written for gpufrac status, on the run's clock.
	published time.Time
	// fenceNote says whether the allocation fence is on and why; borrowNote the same of
	// borrowing.
	fenceNote, borrowNote string
	// stage is how many jobs a GPU may be staged (Options.Stage, where staging can work), and
	// stageNote says so, or why not, when it was asked for.
	stage     int
	stageNote string
	// probeNote says what ProbeKnown does in this run, when it was asked for; probeCapNote
	// that ProbeCap does nothing, where it does not.
	probeNote, probeCapNote string
	borrows                 bool
	start                   time.Time
	// shares learns templates' SM-active shares from attempts alone on their GPU.
	shares *probe.Shares

	mu     sync.Mutex
	active map[*active]bool
	// samples counts each GPU's samples taken; sampled is closed at each one (sampleAfter).
	samples  map[string]uint64
	sampled  chan struct{}
	attempts []record.Attempt
	busy     map[string][]int
	wide     collateral.Events
	// lasting are the GPUs an event took out of service for the rest of this process (a
	// critical XID), with why: a run whose every GPU is one ends rather than wait.
	lasting map[string]string

	done  chan *active
	recap chan *active // in-place probes whose window ended
	// unreleased are reservations of finished attempts the ledger could not end yet.
	unreleased []pendingRelease
	stopBusy   context.CancelFunc
	wg         sync.WaitGroup
}

func newRun(ctx context.Context, q queue.Queue, o Options) (*run, error) {
	log := o.Logger.Named("runner")
	r := &run{o: o, q: q, log: log, gpus: map[string]record.GPUResult{}, active: map[*active]bool{},
		busy: map[string][]int{}, lasting: map[string]string{}, samples: map[string]uint64{}, sampled: make(chan struct{}), done: make(chan *active, 64), recap: make(chan *active, 64)}
	no, notes, err := nodeOptions(o)
	if err != nil {
		return nil, err
	}
	no.OnHealth, no.HealthPeriod = r.backendHealth, o.healthPeriod
	n, err := node.Open(ctx, no)
	if err != nil {
		return nil, err
	}
	r.node, r.led = n.Node, n.Ledger()
	r.shares = probe.NewShares(o.Backend, r.led, o.GPMInterval < 0)
	r.fenceNote, r.borrowNote, r.borrows = notes.fence, notes.borrow.Note, notes.borrow.On()
	r.stage, r.stageNote = stagePlan(o, r.node.Fenced(), notes.borrow.Rule)
	r.probeNote = probeKnownNote(o, r.borrows)
	r.probeCapNote = probeCapNote(o, r.borrows)
	if e := n.Enforcer(); e != nil {
		r.guard = e
	}
	r.prog = progress.New(o.Progress, r.since)
	for _, rep := range r.led.Repairs() {
		r.prog.Line("%-8s %s", "ledger", rep)
	}
	for _, res := range n.Released {
		r.prog.Line("%-8s reservation of %s on %s (cap %s): its gpufrac run (%s) is gone%s", "released", res.Task.JobName, res.GPU,
			res.CapBytes, res.Holder, node.LeftBehindNote(n.LeftBehind[res.Token]))
	}
	if prev := earlierOutputs(o.OutDir); prev != "" {
		r.prog.Line("%-8s %s", "results", prev)
	}
	ok := false
	defer func() {
		if !ok {
			r.prog.FlushHeld()
			r.close()
		}
	}()
	uuids, err := r.pick(n.Devices)
	if err != nil {
		return nil, err
	}
	if o.enforced() {
		if err := n.Prepare(ctx, uuids); err != nil {
			return nil, err
		}
		if e := n.Enforcer(); e != nil {
			events, unsub := e.Subscribe()
			r.unsub = unsub
			go func() {
				for ev := range events {
					r.onEvent(ev)
				}
			}()
		}
		n.Start()
	}
	sc := sched.Config{Admission: o.Admission, Policy: o.Policy, Ledger: r.led, Node: r.node, Borrows: r.borrows, GPUs: uuids, MaxTotal: o.MaxConcurrent,
		Logger: log, Window: o.ProbeWindow, ProbeCap: o.ProbeCap, Templates: q.Templates, Peaks: map[string]size.Bytes{}, SMActive: map[string]float64{},
		ProbeInPlace: o.Arm == record.ArmPacked && r.guard != nil && (o.modeOf() == policy.ModeIsolated || r.borrows)}
	sc.Stage = r.stage
	sc.ProbeKnown = o.ProbeKnown && r.borrows
	sc.Now = o.Now
	for name, t := range q.Templates {
		if t.PeakBytes > 0 {
			sc.Peaks[name] = t.PeakBytes
		}
	}
	if o.Profiles == record.ProfilesWarm {
		for _, p := range r.led.Profiles() {
			sc.Peaks[p.Template] = p.PeakBytes
			if p.SMActivePercent != nil {
				sc.SMActive[p.Template] = *p.SMActivePercent
			}
		}
	}
	r.s = sched.New(sc, sched.NewJobs(q))
	ok = true
	return r, nil
}

// pick chooses the run's GPUs (Options.GPUs, else every healthy one), puts them in the run's
// mode and notes what the results say of each.
func (r *run) pick(devs []gpu.Device) ([]string, error) {
	var uuids []string
	for _, d := range devs {
		if d.Healthy && (len(r.o.GPUs) == 0 || slices.Contains(r.o.GPUs, d.UUID)) {
			uuids = append(uuids, d.UUID)
		}
	}
	for _, want := range r.o.GPUs {
		if !slices.ContainsFunc(devs, func(d gpu.Device) bool { return d.UUID == want }) {
			return nil, fmt.Errorf("%w: GPU %q is not one of this machine's (%d GPUs)", ErrOptions, want, len(devs))
		}
	}
	if len(uuids) == 0 {
		return nil, fmt.Errorf("%w: no healthy GPU to run on (%d listed)", ErrOptions, len(devs))
	}
	if err := r.checkHeadroom(devs, uuids); err != nil {
		return nil, err
	}
	mode := r.o.modeOf()
	for _, u := range uuids {
		if err := r.led.SetMode(u, mode); err != nil {
			return nil, fmt.Errorf("ledger mode of %s: %w", u, err)
		}
		st, err := r.led.State(u)
		if err != nil {
			return nil, err
		}
		if len(st.Reservations) > 0 {
			r.log.Warn("GPU already holds reservations from another process; they count against its budget",
				"gpu", u, "reservations", len(st.Reservations))
		}
		r.gpus[u] = record.GPUResult{UUID: u, Index: st.Index, Model: st.Model, TotalBytes: st.TotalBytes,
			BudgetBytes: st.BudgetBytes, Mode: string(mode)}
	}
	return uuids, nil
}

// checkHeadroom refuses a policy whose headroom leaves none of the run's GPUs one memory unit
// of budget. Nothing could ever be admitted, and the run would wait out its grace for other
// processes to end when there are none, then fail every job. Unmanaged use is left out: it
// comes and goes, and a run waiting for it to end is waiting for something real.
func (r *run) checkHeadroom(devs []gpu.Device, uuids []string) error {
	p := r.o.Policy
	var bad []string
	for _, d := range devs {
		if !slices.Contains(uuids, d.UUID) {
			continue
		}
		budget := d.MemoryBytes - min(d.MemoryBytes, p.HeadroomBytes)
		if budget >= p.UnitBytes {
			return nil
		}
		bad = append(bad, fmt.Sprintf("GPU%d (%s %s) a budget of %s (%s total - %s headroom)",
			d.Index, d.Model, d.MemoryBytes, budget, d.MemoryBytes, p.HeadroomBytes))
	}
	return fmt.Errorf("%w: policy %q leaves %s: less than one %s memory unit, so no job could ever be admitted; lower its headroom",
		ErrOptions, p.Name, strings.Join(bad, ", "), p.UnitBytes)
}

func (r *run) close() {
	if r.stopBusy != nil {
		r.stopBusy()
	}
	r.wg.Wait()
	if r.node == nil {
		return
	}
	r.retryReleases()
	for _, p := range r.unreleased {
		r.log.Error("reservation left in the ledger: it goes when this run is known to be gone", "job", p.job)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.node.Close(ctx); err != nil {
		r.log.Warn("node shutdown", "error", err)
	}
	if r.unsub != nil {
		r.unsub()
	}
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

type pendingRelease struct{ token, reason, job string }
