package enforcer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpufrac/gpufrac/attribution"
	"github.com/gpufrac/gpufrac/enforcer/mps"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/hub"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/procfs"
	"github.com/gpufrac/gpufrac/size"
)

// Defaults of Config.
const (
	// DefaultAllowance is added to a task's cap once per CUDA process before the watchdog calls
	// it a violation. NVML counts each process's CUDA context and allocator overhead, which neither
	// the cap a framework is told nor the MPS pinned limit covers. Measured on the H200 with
	// PyTorch 2.11: a process holding a 3 GiB tensor shows 3682 MiB in NVML, 610 MiB more, with
	// and without MPS (docs/bench/enforcer.md, "Enforcer on the H200"). A process whose memory comes
	// from a stream-ordered pool (cudaMallocAsync) showed 676 MiB above what its pool reserved
	// (8.66 GiB in NVML at an 8 GiB pool, 12.66 at 12, 2026-12-02), and a 640 MiB allowance had
	// the watchdog kill such honest jobs at their caps; 768 MiB covers both with room to spare.
	DefaultAllowance = 768 * size.MiB
	// DefaultMPSStopGrace is how long a task under MPS has to leave after SIGINT before it is
	// stopped by force (a GPU-wide event, see docs/enforcement.md).
	DefaultMPSStopGrace = 2 * time.Second
	// DefaultScanInterval is how often every live process is scanned for reservation tokens and
	// the MPS daemons are checked.
	DefaultScanInterval = time.Second
)

// Config wires an Enforcer. Backend and Ledger are required.
type Config struct {
	Backend gpu.Backend
	Ledger  *ledger.Ledger
	Logger  hclog.Logger
	// Procs reads the process table; nil = LinuxProcs("/proc").
	Procs ProcSource
	// Signal sends a signal to the host process pid that started at startTicks (0 when its
	// start could not be read); nil = procfs.Signal, which never hits a later process that
	// reuses the PID.
	Signal func(pid int, startTicks uint64, sig syscall.Signal) error
	MPS    MPSOptions
	// Allowance per CUDA process of a task on top of its cap; 0 = DefaultAllowance.
	Allowance size.Bytes
	// StopGrace between SIGINT and a forced stop under MPS; 0 = DefaultMPSStopGrace.
	StopGrace time.Duration
	// ScanInterval of the token scan and MPS health check; 0 = DefaultScanInterval.
	ScanInterval time.Duration
	// Now is the clock; nil = time.Now.
	Now func() time.Time
	// Fence turns the allocation fence on; its zero value leaves it off.
	Fence FenceConfig
}

// MPSOptions configure the MPS control daemons (mps.Options); Config.MPS keeps this name so the
// callers that build a Config need not import mps.
type MPSOptions = mps.Options

// mpsDaemons is what the enforcer asks of the MPS control daemons (mps.Manager).
type mpsDaemons interface {
	Ensure(ctx context.Context, uuid string, budget size.Bytes) (pid int, adopted bool, err error)
	Adopt(ctx context.Context, uuid string, budget size.Bytes) (pid int, adopted bool, err error)
	Check(ctx context.Context, uuid string) error
	UpdateLimit(ctx context.Context, uuid string, budget size.Bytes) error
	Stop(ctx context.Context, uuid string) error
	Running() []string
	Dirs(uuid string) (pipe, logDir string)
}

// ProcUsage is one GPU process in a sample.
type ProcUsage struct {
	PID   int
	Bytes size.Bytes
	// Token is the reservation the process counts against ("" = unmanaged). Secret.
	Token string
	// Via says how it was attributed: "environ", "cgroup" or "parent".
	Via string
	// MPSServer marks the MPS server process, which is neither a task nor unmanaged.
	MPSServer bool
}

// Sample is the watchdog's last reading of one GPU.
type Sample struct {
	GPU            string
	Time           time.Time
	Mode           policy.Mode
	Processes      []ProcUsage
	UnmanagedBytes size.Bytes
}

type taskUsage struct {
	gpu   string
	bytes size.Bytes
}

// Enforcer keeps the tasks of one node inside their caps. All methods are safe for concurrent use.
type Enforcer struct {
	cfg    Config
	log    hclog.Logger
	procs  *attribution.Attributor
	mps    mpsDaemons
	fence  *fences // nil = no allocation fence
	events *hub.Hub[Event]

	mu      sync.Mutex
	samples map[string]Sample
	usage   map[string]taskUsage

	// passMu makes the watchdog's passes one at a time, whoever runs them (Run's loop, Tick):
	// what they carry from pass to pass is theirs alone while they hold it.
	passMu   sync.Mutex
	mem      *memory
	lastScan time.Time
	lastErr  map[string]string
	// healthMu makes the MPS health checks one at a time (Run's second loop, Tick).
	healthMu sync.Mutex

	// sick is shared by the sampling and the MPS health check, which Run runs side by side.
	sickMu sync.Mutex
	sick   map[string]string // GPUs this enforcer marked unhealthy, with the reason

	// followers see every sample (Follow).
	followers followers
}

// New checks cfg and fills in defaults. It starts nothing: call Run.
func New(cfg Config) (*Enforcer, error) {
	if cfg.Backend == nil {
		return nil, errors.New("enforcer: Config.Backend is nil")
	}
	if cfg.Ledger == nil {
		return nil, errors.New("enforcer: Config.Ledger is nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Procs == nil {
		cfg.Procs = LinuxProcs("")
	}
	if cfg.Signal == nil {
		cfg.Signal = procfs.Signal
	}
	if cfg.Allowance == 0 {
		cfg.Allowance = DefaultAllowance
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = DefaultMPSStopGrace
	}
	if cfg.ScanInterval <= 0 {
		cfg.ScanInterval = DefaultScanInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger.Named("enforcer")
	procs := attribution.New(cfg.Procs)
	if cfg.Fence.Context == 0 {
		cfg.Fence.Context = cfg.Allowance
	}
	f, err := newFences(cfg.Fence, log)
	if err != nil {
		return nil, err
	}
	return &Enforcer{
		cfg: cfg, log: log, procs: procs, mps: mps.New(cfg.MPS, mpsProcs{src: cfg.Procs, attr: procs}, mpsEnv, log), fence: f,
		events: hub.New[Event](subscriberBuffer), samples: map[string]Sample{}, usage: map[string]taskUsage{},
		mem: newMemory(), sick: map[string]string{}, lastErr: map[string]string{},
	}, nil
}

func (e *Enforcer) now() time.Time { return e.cfg.Now() }

// Run samples every GPU of the ledger at the policy's WatchdogInterval, stops violators, accounts
// unmanaged use, scans all processes for tokens (ledger.Seen, then ExpireUnseen) and keeps the
// MPS daemons healthy, until ctx ends. It returns ctx's error.
//
// The MPS health check runs beside the sampling, not in it: it runs the control client once per
// daemon, which on a loaded machine takes up to a second, and a watchdog that stops sampling that
// long misses an MPS task's last moments near its cap and a leaker's crossing.
func (e *Enforcer) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			e.checkMPS(ctx)
			select {
			case <-ctx.Done():
				return
			case <-time.After(e.cfg.ScanInterval):
			}
		}
	}()
	defer wg.Wait()
	for {
		e.sample(ctx)
		iv := e.cfg.Ledger.Policy().WatchdogInterval
		if iv <= 0 {
			iv = policy.DefaultWatchdogInterval
		}
		iv = jittered(e.followers.every(iv))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(iv):
		}
	}
}

// jittered is iv moved by up to a quarter either way, at random. A task's waiting flags count
// only as the passes read them (claims.go): one that learnt when passes come, from an interval
// kept exact, could keep its flags down at every reading and up in between.
func jittered(iv time.Duration) time.Duration {
	return iv - iv/4 + rand.N(iv/2+1)
}

// Tick is one pass of Run: every GPU sampled once, and the slow work when it is due. Tests and
// benchmarks call it directly; beside Run it waits for Run's pass in progress and takes its turn.
func (e *Enforcer) Tick(ctx context.Context) {
	if e.sample(ctx) {
		e.checkMPS(ctx)
	}
}

// sample runs the token scan when it is due, then watches every GPU once; it says whether it
// scanned. The scan comes first: a process tied to its task by its cgroup is tied through the
// cgroups of the task's token carriers, which only the scan reads, so a first pass before it
// took such a process for no task's.
func (e *Enforcer) sample(ctx context.Context) bool {
	e.passMu.Lock()
	defer e.passMu.Unlock()
	scanned := false
	if now := e.now(); now.Sub(e.lastScan) >= e.cfg.ScanInterval {
		e.lastScan = now
		e.scanTokens()
		scanned = true
	}
	for _, st := range e.cfg.Ledger.States() {
		e.watch(ctx, st)
	}
	return scanned
}

// PrepareGPU readies a GPU before a task starts on it: under mps mode its control daemon runs
// (started, or adopted when one already answers on the pipe) with the GPU's budget as the ceiling
// of every client's pinned limit. Nothing to do in isolated mode.
func (e *Enforcer) PrepareGPU(ctx context.Context, uuid string) error {
	st, err := e.cfg.Ledger.State(uuid)
	if err != nil {
		return fmt.Errorf("enforcer: prepare GPU: %w", err)
	}
	if st.Mode != policy.ModeMPS {
		return nil
	}
	e.healthMu.Lock()
	defer e.healthMu.Unlock()
	// A daemon this enforcer started is the health pass's to judge: with clients running a dead
	// one must not be replaced under them. Answering, or restarted for want of clients, it is
	// ready with its limit set, so Ensure would only ask it again (and report it "started").
	if slices.Contains(e.mps.Running(), uuid) {
		if err := e.checkDaemon(ctx, uuid); err != nil {
			return fmt.Errorf("enforcer: prepare GPU %s: %w", uuid, err)
		}
		return nil
	}
	pid, adopted, err := e.mps.Ensure(ctx, uuid, st.BudgetBytes)
	if err != nil {
		e.emit(Event{Kind: EventMPS, Stage: StageStartFailed, GPU: uuid, Message: "MPS control daemon could not be readied: " + err.Error()})
		return fmt.Errorf("enforcer: prepare GPU %s: %w", uuid, err)
	}
	stage := StageStarted
	if adopted {
		stage = StageAdopted
	}
	if adopted || pid != 0 {
		e.emit(Event{Kind: EventMPS, Stage: stage, GPU: uuid, PIDs: nonZero(pid), Bytes: st.BudgetBytes,
			Message: "MPS control daemon " + string(stage) + ", default pinned limit set to the GPU budget"})
	}
	return nil
}

// EnvOptions are what a task on this GPU needs from the enforcer: the fence's library and
// tables, and in mps mode the MPS directories. The caller sets DockerRuntime.
func (e *Enforcer) EnvOptions(uuid string) EnvOptions {
	var o EnvOptions
	if e.fence != nil {
		o.FenceDir, o.FenceLibrary = e.fence.cfg.Dir, e.fence.lib
	}
	st, err := e.cfg.Ledger.State(uuid)
	if err != nil || st.Mode != policy.ModeMPS {
		return o
	}
	o.MPSPipeDir, o.MPSLogDir = e.mps.Dirs(uuid)
	return o
}

// TaskUsage is the GPU memory that the reservation's processes held at the last sample (all
// processes summed); false when no process of it was on a GPU.
func (e *Enforcer) TaskUsage(token string) (size.Bytes, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	u, ok := e.usage[token]
	return u.bytes, ok
}

// LastSample is the watchdog's last reading of a GPU.
func (e *Enforcer) LastSample(uuid string) (Sample, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.samples[uuid]
	return s, ok
}

// Shutdown stops the MPS control daemons that have no client left; the others keep running so
// their clients are not harmed (a later Enforcer adopts them).
func (e *Enforcer) Shutdown(ctx context.Context) error {
	if e.fence != nil {
		e.fence.close()
	}
	var errs []error
	for _, uuid := range e.mps.Running() {
		procs, err := e.cfg.Backend.Processes(ctx, uuid)
		if err != nil {
			errs = append(errs, fmt.Errorf("GPU %s: list processes before stopping MPS: %w", uuid, err))
			continue
		}
		if n := e.clients(procs); n > 0 {
			e.log.Info("MPS control daemon left running: clients still run", "gpu", uuid, "clients", n)
			continue
		}
		if err := e.mps.Stop(ctx, uuid); err != nil {
			errs = append(errs, err)
			continue
		}
		e.emit(Event{Kind: EventMPS, Stage: StageStopped, GPU: uuid, Message: "MPS control daemon stopped: no client left"})
	}
	return errors.Join(errs...)
}

// clients counts GPU processes other than MPS servers.
func (e *Enforcer) clients(procs []gpu.Process) int {
	n := 0
	for _, p := range procs {
		if id, err := e.procs.Identity(p.PID); err == nil && id.MPSServer {
			continue
		}
		n++
	}
	return n
}

func nonZero(pid int) []int {
	if pid == 0 {
		return nil
	}
	return []int{pid}
}

// mpsProcs is the process table as the MPS manager reads it.
type mpsProcs struct {
	src  ProcSource
	attr *attribution.Attributor
}

// Alive fails for a daemon that is gone or ended unreaped (a zombie serves no client).
func (p mpsProcs) Alive(pid int) error {
	_, running, err := procfs.Running(p.src, pid)
	if err == nil && !running {
		err = fmt.Errorf("MPS daemon %d: %w", pid, fs.ErrNotExist)
	}
	return err
}

func (p mpsProcs) List() ([]mps.Process, error) {
	pids, err := p.src.PIDs()
	if err != nil {
		return nil, err
	}
	out := make([]mps.Process, 0, len(pids))
	for _, pid := range pids {
		if id, err := p.attr.Identity(pid); err == nil {
			out = append(out, mps.Process{PID: pid, Argv: id.Argv, PipeDir: id.PipeDir})
		}
	}
	return out, nil
}

// mpsEnv names a GPU's daemon to its control commands, in the variables its clients get.
func mpsEnv(uuid, pipeDir, logDir string) []string {
	return []string{EnvCUDADevices + "=" + uuid, EnvMPSPipeDir + "=" + pipeDir, EnvMPSLogDir + "=" + logDir}
}
