package simjob

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/size"
	"github.com/gpufrac/gpufrac/taskenv"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitFail  = 1
	ExitUsage = 2
	ExitINT   = 130
	ExitTERM  = 143
)

// tick is the reporting period: about 50 reports a second.
const tick = 20 * time.Millisecond

// heartbeat rewrites an unchanged report now and then, so an entry removed by someone else
// (a test's ClearProcess) comes back.
const heartbeat = time.Second

type sizeFlag struct{ b *size.Bytes }

func (f sizeFlag) String() string {
	if f.b == nil {
		return ""
	}
	return f.b.String()
}

func (f sizeFlag) Set(s string) error {
	v, err := size.Parse(s)
	if err != nil {
		return err
	}
	*f.b = v
	return nil
}

type config struct {
	dir, gpu, result      string
	ctxBytes, peak        size.Bytes
	leakTo, leakRate      size.Bytes
	ramp, hold, failAfter time.Duration
	// first and settle are a PyTorch job's first seconds on the GPU: its first small allocation
	// (torch.zeros(1) on the device takes a 2 MiB block) arms its task in the fence, then it
	// imports and loads on the CPU for settle, holding only that and its context, before it
	// grows. A neighbour that borrows meanwhile meets an armed guarantee, as on the H200.
	first  size.Bytes
	settle time.Duration
	// outsideFence and poolSlack are memory NVML counts for the job that the fence never
	// charged (unfenced.go).
	outsideFence, poolSlack size.Bytes
	seed                    int64
	procs                   int
	// asks is how often an allocation the fence refused is asked for before the job fails.
	asks            int
	child, mpsFault bool
	// mark is created once the job holds its context; the job waits for every file in after
	// before it takes its own.
	mark  string
	after []string
}

func parse(args []string, stderr io.Writer) (*config, error) {
	c := &config{ctxBytes: 500 * size.MiB, leakRate: size.GiB}
	fs := flag.NewFlagSet("simjob", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.dir, "dir", os.Getenv(gpu.EnvSimDir), "simulated GPU state directory (default $"+gpu.EnvSimDir+")")
	fs.StringVar(&c.gpu, "gpu", os.Getenv(taskenv.CUDADevices), "UUID of the one simulated GPU to use (default $CUDA_VISIBLE_DEVICES)")
	fs.Var(sizeFlag{&c.ctxBytes}, "context", "memory of the simulated CUDA context, taken at start (default 500MiB)")
	fs.Var(sizeFlag{&c.peak}, "peak", "the process's peak memory including the context, as NVML would report it")
	fs.Var(sizeFlag{&c.first}, "first", "a first fenced allocation taken with the context, held through --settle (default none)")
	fs.DurationVar(&c.settle, "settle", 0, "time to hold the context and --first, computing nothing, before the ramp")
	fs.DurationVar(&c.ramp, "ramp", 0, "time to grow linearly from the context and --first to --peak")
	fs.DurationVar(&c.hold, "hold", 0, "time to stay at --peak")
	fs.Var(sizeFlag{&c.leakTo}, "leak-to", "after --hold keep growing toward this size (a leaking job), then finish")
	fs.Var(sizeFlag{&c.leakRate}, "leak-rate", "growth per second while leaking (default 1GiB)")
	fs.StringVar(&c.result, "result", "", "write a deterministic JSON result computed from --seed to this file")
	fs.Int64Var(&c.seed, "seed", 1, "seed of the result")
	fs.IntVar(&c.procs, "procs", 1, "processes in the job: N-1 extra child processes hold memory too")
	fs.IntVar(&c.asks, "asks", 1, "how often an allocation the fence refused is asked for before the job fails (PyTorch's and CuPy's caching allocators ask twice: they free their cache and try again)")
	fs.DurationVar(&c.failAfter, "fail-after", 0, "crash (exit 1) after this long")
	fs.BoolVar(&c.mpsFault, "mps-fault", false, "as an MPS client (pinned limit set), fail with cudaErrorIllegalAddress when another client of the GPU is stopped by a signal")
	fs.StringVar(&c.mark, "mark", "", "create this file once the job holds its context")
	fs.Func("after", "before taking its context, wait until these files exist (comma-separated; --mark of other jobs)", func(v string) error {
		c.after = append(c.after, strings.Split(v, ",")...)
		return nil
	})
	fs.Var(sizeFlag{&c.outsideFence}, "outside-fence", "from its first fenced allocation on, also hold this much the allocation fence never sees (as a child process that dropped its reservation token)")
	fs.Var(sizeFlag{&c.poolSlack}, "pool-slack", "while it holds memory past its context, hold up to this much more than the fence charged (as a cudaMallocAsync pool keeping freed blocks)")
	fs.BoolVar(&c.child, "child", false, "internal: this is an extra process of a --procs job")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case c.dir == "":
		return nil, fmt.Errorf("no --dir and $%s is not set: where is the simulated GPU?", gpu.EnvSimDir)
	case c.gpu == "":
		return nil, errors.New("no --gpu and $CUDA_VISIBLE_DEVICES is not set")
	case strings.Contains(c.gpu, ","):
		return nil, fmt.Errorf("--gpu %q: a simulated job uses exactly one GPU UUID", c.gpu)
	case c.procs < 1 || c.procs > 64:
		return nil, fmt.Errorf("--procs %d: want 1 to 64", c.procs)
	case c.asks < 1 || c.asks > 8:
		return nil, fmt.Errorf("--asks %d: want 1 to 8", c.asks)
	case c.ramp < 0 || c.hold < 0 || c.failAfter < 0 || c.settle < 0:
		return nil, errors.New("--ramp, --hold, --settle and --fail-after must not be negative")
	}
	if c.peak < c.ctxBytes {
		c.peak = c.ctxBytes
	}
	if c.first > c.peak-c.ctxBytes {
		return nil, fmt.Errorf("--first %s: the context (%s) and it pass the peak %s", c.first, c.ctxBytes, c.peak)
	}
	if c.leakTo != 0 && c.leakTo <= c.peak {
		return nil, fmt.Errorf("--leak-to %s must be above the peak %s", c.leakTo, c.peak)
	}
	if c.leakTo != 0 && c.leakRate == 0 {
		return nil, errors.New("--leak-rate must be above 0 with --leak-to")
	}
	return c, nil
}

// target is the memory the job wants elapsed after its start, and whether it has finished.
func (c *config) target(elapsed time.Duration) (size.Bytes, bool) {
	if elapsed < c.ramp {
		base := c.ctxBytes + c.first
		grow := float64(c.peak-base) * float64(elapsed) / float64(c.ramp)
		return base + size.Bytes(grow), false
	}
	leakStart := c.ramp + c.hold
	if elapsed < leakStart {
		return c.peak, false
	}
	if c.leakTo == 0 {
		return c.peak, true
	}
	grown := c.peak + size.Bytes(float64(c.leakRate)*(elapsed-leakStart).Seconds())
	if grown >= c.leakTo {
		return c.leakTo, true
	}
	return grown, false
}

// Main runs a simulated job with command-line args and returns its exit code. args must be the
// tail of os.Args (e.g. os.Args[2:] for `gpufrac simjob ...`): --procs re-runs the same
// executable with the same leading arguments to start the extra processes.
func Main(args []string, stdout, stderr io.Writer) int {
	// A help asked for goes to stdout, as gpufrac's own commands' does.
	out := stderr
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" || a == "--h" }) {
		out = stdout
	}
	c, err := parse(args, out)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "simjob: %v\n", err)
		return ExitUsage
	}
	j, code := newJob(c, stdout, stderr)
	if j == nil {
		return code
	}
	j.args = args
	return j.run()
}

type job struct {
	c              *config
	sim            *gpu.Simulated
	total          size.Bytes
	limit          size.Bytes
	limited        bool
	pid            int
	used           size.Bytes // as the fence sees it
	shown          size.Bytes // as NVML sees it: used and what the fence never charged
	ctx            size.Bytes // of used, the context
	ctxSet         bool       // the context is allocated: growth from now on is fenced
	stdout, stderr io.Writer
	args           []string // as given to Main, to re-run this job as a child
	children       []*exec.Cmd
	pending        int // children not yet collected from childDone
	childDone      chan childExit
	// fence is this process's slot in the allocation fence's table, when the task has one:
	// a simulated job charges its growth there as the preload library does for a CUDA job.
	fence      Fence
	fenceTried bool // attachFence ran: it attaches once, at the first allocation
	// work is the job's progress, slowed where the simulated GPU has SM contention set.
	work *gpu.SimWorkClock
}

type childExit struct {
	pid int
	err error
}

func newJob(c *config, stdout, stderr io.Writer) (*job, int) {
	fail := func(format string, a ...any) (*job, int) {
		fmt.Fprintf(stderr, "simjob: "+format+"\n", a...)
		return nil, ExitUsage
	}
	if _, err := os.Stat(c.dir); err != nil {
		return fail("simulated GPU directory %q: %v", c.dir, err)
	}
	sim, err := gpu.NewSimulated(gpu.SimConfig{Dir: c.dir})
	if err != nil {
		return fail("%v", err)
	}
	devs, err := sim.Devices(context.Background())
	if err != nil {
		return fail("%v", err)
	}
	j := &job{c: c, sim: sim, pid: os.Getpid(), stdout: stdout, stderr: stderr, childDone: make(chan childExit, c.procs)}
	var known []string
	for _, d := range devs {
		known = append(known, d.UUID)
		if d.UUID == c.gpu {
			j.total = d.MemoryBytes
		}
	}
	if j.total == 0 {
		return fail("GPU %q is not a simulated GPU in %s (it has: %s)", c.gpu, c.dir, strings.Join(known, ", "))
	}
	j.limit, j.limited, err = gpu.ParseMPSLimit(os.Getenv(EnvMPSLimit), c.gpu)
	if err != nil {
		return fail("%v", err)
	}
	j.work = sim.WorkClock(c.gpu, j.pid)
	return j, ExitOK
}

func (j *job) run() int {
	c := j.c
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	// Deferred calls run last first: the GPU's memory goes before the fence's slot, as a CUDA
	// process's memory goes at its exit before its slot is reaped. The other way round, a
	// watchdog pass between the two would see a borrower's memory with nothing lent for it.
	defer func() {
		if j.fence != nil {
			j.fence.Detach()
		}
	}()
	defer j.sim.ClearProcess(c.gpu, j.pid)

	if !c.child {
		capInfo := "none"
		if v := os.Getenv(EnvCapBytes); v != "" {
			if n, err := strconv.ParseUint(v, 10, 64); err == nil {
				v = size.Bytes(n).String()
			}
			capInfo = v + " (informational: a simulated job never limits itself)"
		}
		mps := "none"
		if j.limited {
			mps = j.limit.String()
		}
		fmt.Fprintf(j.stdout, "simjob: pid %d on simulated GPU %s: context %s, peak %s, procs %d, cap %s, MPS limit %s\n",
			j.pid, c.gpu, c.ctxBytes, c.peak, c.procs, capInfo, mps)
	}
	if code, waited := j.waitAfter(sigs); !waited {
		return code
	}
	start := time.Now()
	// The context is the driver's own memory: no fenced call takes it.
	if code := j.allocate(c.ctxBytes, true); code != ExitOK {
		return code
	}
	j.ctx, j.ctxSet = c.ctxBytes, true
	if c.mark != "" && !c.child {
		if err := os.WriteFile(c.mark, nil, 0o644); err != nil {
			fmt.Fprintf(j.stderr, "simjob: --mark: %v\n", err)
			return ExitFail
		}
	}
	if code := j.spawnChildren(); code != ExitOK {
		j.stopChildren(syscall.SIGTERM)
		return code
	}
	if code, ok := j.waitChildren(sigs); !ok {
		return code
	}
	var crash <-chan time.Time
	if c.failAfter > 0 {
		t := time.NewTimer(c.failAfter)
		defer t.Stop()
		crash = t.C
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	lastWrite := time.Now()
	// The job's phases advance with the work it got to do, not with the wall clock: a process
	// the machine starves for a while resumes where it was, as a real job's work does, rather
	// than skip its hold (and a watchdog or a probe on a loaded machine would miss its peak).
	var worked time.Duration
	lastTick := time.Now()
	// The settle is CPU work: it runs on the wall clock, with no kernel running.
	settleEnd := lastTick.Add(c.settle)
	for {
		select {
		case s := <-sigs:
			return j.interrupted(s)
		case <-crash:
			fmt.Fprintf(j.stderr, "simjob: pid %d: simulated crash after %s\n", j.pid, c.failAfter)
			j.stopChildren(syscall.SIGKILL)
			return ExitFail
		case ce := <-j.childDone:
			j.pending--
			if ce.err != nil {
				return j.childFailed(ce, sigs)
			}
			// A clean child exit before this process finishes is fine: they share a profile.
		case <-ticker.C:
			if f, hit := j.faulted(start); hit {
				fmt.Fprintf(j.stderr, "%s: the MPS server faulted after client pid %d of this GPU was stopped by %s\n",
					IllegalAddress, f.pid, f.sig)
				j.stopChildren(syscall.SIGKILL)
				return ExitFail
			}
			now := time.Now()
			want, done, busy := c.ctxBytes+c.first, false, false
			if !now.Before(settleEnd) {
				worked += j.work.Advance(min(now.Sub(lastTick), 2*tick))
				want, done = c.target(worked)
				busy = !done
			}
			lastTick = now
			if want != j.used || time.Since(lastWrite) >= heartbeat {
				if code := j.allocate(want, busy); code != ExitOK {
					j.stopChildren(syscall.SIGTERM)
					return code
				}
				lastWrite = time.Now()
			}
			if done {
				return j.finish(sigs)
			}
		}
	}
}

// waitChildren holds the main process until every child holds its context, so the processes of
// one job ramp together (as the ranks of a distributed job meet before they train) however
// slowly a loaded machine starts them. A child that ends first fails the job; a signal ends it.
func (j *job) waitChildren(sigs <-chan os.Signal) (int, bool) {
	if len(j.children) == 0 {
		return ExitOK, true
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	ended := map[int]bool{} // children that finished cleanly: a short one can end between two looks
	for {
		procs, err := j.sim.Processes(context.Background(), j.c.gpu)
		if err != nil {
			fmt.Fprintf(j.stderr, "simjob: %v\n", err)
			j.stopChildren(syscall.SIGTERM)
			return ExitFail, false
		}
		on := 0
		for _, cmd := range j.children {
			pid := cmd.Process.Pid
			if ended[pid] || slices.ContainsFunc(procs, func(p gpu.Process) bool { return p.PID == pid && p.UsedBytes > 0 }) {
				on++
			}
		}
		if on == len(j.children) {
			return ExitOK, true
		}
		select {
		case s := <-sigs:
			return j.interrupted(s), false
		case ce := <-j.childDone:
			j.pending--
			if ce.err != nil {
				return j.childFailed(ce, sigs), false
			}
			ended[ce.pid] = true
		case <-ticker.C:
		}
	}
}

// waitAfter holds the job back until every --after file exists; a signal meanwhile ends it
// (code, false). Tests use it where an outcome needs jobs on the GPU in an order that the speed
// of a loaded machine would otherwise decide; a re-run finds the files there and starts at once.
func (j *job) waitAfter(sigs <-chan os.Signal) (int, bool) {
	if j.c.child {
		return ExitOK, true
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for _, f := range j.c.after {
		for {
			if _, err := os.Stat(f); err == nil {
				break
			}
			select {
			case s := <-sigs:
				// Not yet a client of the GPU: its stop faults nobody.
				if s == syscall.SIGINT {
					return ExitINT, false
				}
				return ExitTERM, false
			case <-ticker.C:
			}
		}
	}
	return ExitOK, true
}

// allocate moves the job's usage to want, failing like CUDA when growth passes a limit. The
// fence is asked first, as the preload library asks it before the driver's call (it may wait
// there for memory), then the GPU: memory that is not there fails the allocation, and the
// fence gets its charge back.
func (j *job) allocate(want size.Bytes, busy bool) int {
	shown := want + j.unfenced(want)
	if want > j.used {
		if code := j.charge(want); code != ExitOK {
			return code
		}
	}
	if shown > j.shown {
		if code := j.takeFromGPU(shown); code != ExitOK {
			j.refund(want)
			return code
		}
	}
	if err := j.sim.SetProcess(j.c.gpu, j.pid, shown, busy); err != nil {
		fmt.Fprintf(j.stderr, "simjob: reporting usage: %v\n", err)
		return ExitFail
	}
	if want < j.used {
		j.charge(want)
	}
	j.used, j.shown = want, shown
	return ExitOK
}

// takeFromGPU is the driver's side of growing to want: the MPS pinned limit, then the GPU's
// free memory (inUse counts this process's current report already).
func (j *job) takeFromGPU(want size.Bytes) int {
	if j.limited && want > j.limit {
		fmt.Fprintf(j.stderr, "CUDA out of memory: tried to allocate %s; process %d would hold %s (MPS pinned limit %s)\n",
			want-j.shown, j.pid, want, j.limit)
		return ExitFail
	}
	inUse, err := j.sim.MemoryUsed(context.Background(), j.c.gpu)
	if err != nil {
		fmt.Fprintf(j.stderr, "simjob: %v\n", err)
		return ExitFail
	}
	if free := j.total - min(j.total, inUse); want-j.shown > free {
		fmt.Fprintf(j.stderr, "CUDA out of memory: tried to allocate %s (GPU has a total capacity of %s of which %s is free)\n",
			want-j.shown, j.total, free)
		return ExitFail
	}
	return ExitOK
}

func (j *job) spawnChildren() int {
	if j.c.procs <= 1 || j.c.child {
		return ExitOK
	}
	exe, prefix, err := selfArgs(j.args)
	if err != nil {
		fmt.Fprintf(j.stderr, "simjob: %v\n", err)
		return ExitUsage
	}
	for range j.c.procs - 1 {
		args := append(slices.Clone(prefix), j.childArgs()...)
		cmd := exec.Command(exe, args...)
		cmd.Stdout, cmd.Stderr = j.stdout, j.stderr
		cmd.SysProcAttr = childAttr()
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(j.stderr, "simjob: starting a child process: %v\n", err)
			return ExitFail
		}
		j.children = append(j.children, cmd)
		j.pending++
		go func() { j.childDone <- childExit{pid: cmd.Process.Pid, err: cmd.Wait()} }()
	}
	return ExitOK
}

func (j *job) childArgs() []string {
	c := j.c
	return []string{
		"--dir", c.dir, "--gpu", c.gpu, "--context", fmt.Sprint(uint64(c.ctxBytes)),
		"--peak", fmt.Sprint(uint64(c.peak)), "--ramp", c.ramp.String(), "--hold", c.hold.String(),
		"--leak-to", fmt.Sprint(uint64(c.leakTo)), "--leak-rate", fmt.Sprint(uint64(c.leakRate)),
		"--procs", "1", "--child",
	}
}

// stopChildren signals the extra processes and waits for them.
func (j *job) stopChildren(s os.Signal) {
	for _, cmd := range j.children {
		_ = cmd.Process.Signal(s) // fails harmlessly for children already gone
	}
	for ; j.pending > 0; j.pending-- {
		<-j.childDone
	}
}

// interrupted ends the job after SIGINT or SIGTERM, stopping its extra processes too.
// stopSettle bounds how long a job whose child was stopped waits for its own stop signal.
const stopSettle = time.Second

// childFailed ends the job after a child failed. A child that ended by a stop signal was stopped
// with its task: whoever stops a task signals every process of it (the watchdog does), so this
// process's own signal is on its way, and the job ends as stopped rather than as failed, whichever
// of the two the scheduler ran first.
func (j *job) childFailed(ce childExit, sigs <-chan os.Signal) int {
	var ee *exec.ExitError
	if errors.As(ce.err, &ee) && (ee.ExitCode() == ExitINT || ee.ExitCode() == ExitTERM) {
		select {
		case s := <-sigs:
			return j.interrupted(s)
		case <-time.After(stopSettle):
		}
	}
	fmt.Fprintf(j.stderr, "simjob: pid %d: child process %d failed: %v\n", j.pid, ce.pid, ce.err)
	j.stopChildren(syscall.SIGTERM)
	return ExitFail
}

func (j *job) interrupted(s os.Signal) int {
	if j.limited {
		// A stopped MPS client may fault the server's other clients (see mpsfault.go).
		if err := noteStopped(j.c.dir, j.c.gpu, j.pid, s); err != nil {
			fmt.Fprintf(j.stderr, "simjob: noting the stop for the simulated MPS server: %v\n", err)
		}
	}
	j.stopChildren(s)
	if s == syscall.SIGINT {
		return ExitINT
	}
	return ExitTERM
}

func (j *job) finish(sigs <-chan os.Signal) int {
	for j.pending > 0 {
		var ce childExit
		select {
		case s := <-sigs:
			return j.interrupted(s)
		case ce = <-j.childDone:
		}
		j.pending--
		if ce.err != nil {
			fmt.Fprintf(j.stderr, "simjob: pid %d: child process %d failed: %v\n", j.pid, ce.pid, ce.err)
			j.stopChildren(syscall.SIGTERM)
			return ExitFail
		}
	}
	if j.c.result != "" {
		if err := writeResult(j.c.result, j.c.seed); err != nil {
			fmt.Fprintf(j.stderr, "simjob: writing the result: %v\n", err)
			return ExitFail
		}
	}
	if !j.c.child {
		fmt.Fprintf(j.stdout, "simjob: pid %d done: peak %s\n", j.pid, j.shown)
	}
	return ExitOK
}
