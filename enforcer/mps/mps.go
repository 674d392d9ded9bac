// Package mps owns the life cycle of the MPS control daemons, one per GPU in mps mode: starting
// one (or adopting one an earlier enforcer left running), setting the default pinned limit that
// no client can raise its own past, checking that it answers, and stopping it. Every control
// command runs under a timeout, as nvidia-cuda-mps-control can block for good. The enforcer
// uses it through a narrow interface; Options.ControlBinary may name a fake control program
// (enforcer/testdata/fake-mps-control).
package mps

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/size"
	"github.com/gpufrac/gpufrac/taskenv"
)

// Defaults of Options.
const (
	DefaultControl = "nvidia-cuda-mps-control"
	DefaultRoot    = "/run/gpufrac/mps"
	DefaultTimeout = 5 * time.Second
)

// Options configure the MPS control daemons, one per GPU in mps mode.
type Options struct {
	// ControlBinary is nvidia-cuda-mps-control, or a fake that speaks the same commands.
	ControlBinary string
	// Root holds <Root>/<gpu-uuid>/pipe and <Root>/<gpu-uuid>/log.
	Root string
	// Timeout bounds every control command: a control command can block for good.
	Timeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.ControlBinary == "" {
		o.ControlBinary = DefaultControl
	}
	if o.Root == "" {
		o.Root = DefaultRoot
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

// ErrControl wraps every failed or timed-out MPS control command.
var ErrControl = errors.New("MPS control command failed")

// Process is one live process as the daemon search needs it.
type Process struct {
	PID  int
	Argv []string
	// PipeDir is the CUDA_MPS_PIPE_DIRECTORY its environment names.
	PipeDir string
}

// Processes is what the manager reads of the process table.
type Processes interface {
	// Alive fails when pid is gone.
	Alive(pid int) error
	// List is every live process whose table entry can be read.
	List() ([]Process, error)
}

// Env is the environment a control command runs with for one GPU's daemon (the CUDA device and
// the MPS pipe and log directories), spelled by the caller, which owns the names of the
// variables tasks get.
type Env func(uuid, pipeDir, logDir string) []string

// mpsDaemon is what the manager knows of one GPU's control daemon.
type mpsDaemon struct {
	// mu serialises operations on one daemon: the watchdog's health check and PrepareGPU race.
	mu                 sync.Mutex
	uuid, pipe, logDir string
	pid                int // 0 when not found in the process table
	running            bool
	limit              size.Bytes // default pinned limit last set
}

// Manager runs the control daemons of a node's GPUs. All methods are safe for concurrent use.
type Manager struct {
	opts  Options
	procs Processes
	env   Env
	log   hclog.Logger
	mu    sync.Mutex
	d     map[string]*mpsDaemon
}

// New makes a manager; it starts nothing.
func New(o Options, procs Processes, env Env, log hclog.Logger) *Manager {
	return &Manager{opts: o.withDefaults(), procs: procs, env: env, log: log.Named("mps"), d: map[string]*mpsDaemon{}}
}

// Dirs are the pipe and log directories of a GPU's daemon, which its clients need.
func (m *Manager) Dirs(uuid string) (pipe, logDir string) {
	d := m.daemon(uuid)
	return d.pipe, d.logDir
}

func (m *Manager) daemon(uuid string) *mpsDaemon {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.d[uuid]
	if !ok {
		base := filepath.Join(m.opts.Root, uuid)
		d = &mpsDaemon{uuid: uuid, pipe: filepath.Join(base, "pipe"), logDir: filepath.Join(base, "log")}
		m.d[uuid] = d
	}
	return d
}

// Running lists the GPUs whose daemon this manager started or adopted, and has not stopped.
func (m *Manager) Running() []string {
	var out []string
	for _, d := range m.known() {
		out = append(out, d.uuid)
	}
	slices.Sort(out)
	return out
}

func (m *Manager) known() []*mpsDaemon {
	m.mu.Lock()
	all := make([]*mpsDaemon, 0, len(m.d))
	for _, d := range m.d {
		all = append(all, d)
	}
	m.mu.Unlock()
	var out []*mpsDaemon
	for _, d := range all {
		d.mu.Lock()
		if d.running {
			out = append(out, d)
		}
		d.mu.Unlock()
	}
	return out
}

// control runs the control binary with input on stdin (nil: no stdin), under a timeout. The
// command gets its own process group so a timeout kills whatever it started that still holds
// its output open; a daemon it forked keeps running because it has left the group's pipes.
func (m *Manager) control(ctx context.Context, d *mpsDaemon, input string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, m.opts.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, m.opts.ControlBinary, args...)
	cmd.Env = append(withoutTokens(os.Environ()), m.env(d.uuid, d.pipe, d.logDir)...)
	if input != "" {
		cmd.Stdin = strings.NewReader(input + "\n")
	}
	// Output goes to a file, not a pipe: `-d` forks a daemon that may keep the descriptors it
	// inherited, and a pipe would hold Wait until the daemon exits.
	outf, err := os.CreateTemp("", "gpufrac-mps-control-*")
	if err != nil {
		return "", fmt.Errorf("%w: temporary file for its output: %w", ErrControl, err)
	}
	defer os.Remove(outf.Name())
	defer outf.Close()
	cmd.Stdout, cmd.Stderr = outf, outf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	outb, _ := os.ReadFile(outf.Name())
	text := strings.TrimSpace(string(outb))
	what := strings.TrimSpace(input + " " + strings.Join(args, " "))
	if ctx.Err() != nil && !errors.Is(context.Cause(ctx), context.Canceled) {
		return text, fmt.Errorf("%w: %q on GPU %s: no answer within %s", ErrControl, what, d.uuid, m.opts.Timeout)
	}
	if err != nil {
		return text, fmt.Errorf("%w: %q on GPU %s: %w: %s", ErrControl, what, d.uuid, err, text)
	}
	return text, nil
}

// withoutTokens is env without reservation tokens: the daemon and the servers it starts are no
// task's, and the watchdog takes a process that carries a token for that task's, whatever its
// name (a gpufrac that runs inside a task of another would pass that task's on).
func withoutTokens(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return k == taskenv.Reservation || strings.HasPrefix(k, taskenv.ReservationPrefix)
	})
}

// servers asks the daemon for its servers' PIDs; an error means it does not answer.
func (m *Manager) servers(ctx context.Context, d *mpsDaemon) ([]int, error) {
	out, err := m.control(ctx, d, "get_server_list")
	if err != nil {
		return nil, err
	}
	if strings.Contains(out, "Cannot find MPS control daemon") {
		return nil, fmt.Errorf("%w: get_server_list on GPU %s: %s", ErrControl, d.uuid, out)
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Ensure makes the GPU's daemon answer, starting one unless one already answers on its pipe, and
// sets the default pinned limit to budget. adopted says an existing daemon was taken over; pid
// is the daemon's as read under its lock (a caller reading d.pid afterwards would race with a
// concurrent Ensure, as the plugin's Reserve and its background preparation do).
func (m *Manager) Ensure(ctx context.Context, uuid string, budget size.Bytes) (pid int, adopted bool, err error) {
	d := m.daemon(uuid)
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := m.servers(ctx, d); err == nil {
		adopted = !d.running
	} else {
		if err := m.start(ctx, d); err != nil {
			return d.pid, false, err
		}
	}
	d.running = true
	d.pid = m.findPID(d)
	if err := m.setLimit(ctx, d, budget); err != nil {
		return d.pid, adopted, err
	}
	return d.pid, adopted, nil
}

// Adopt takes over a daemon that answers on the GPU's pipe though this enforcer did not start it
// (it outlived an earlier plugin). false when none answers; nothing is started. pid is read
// under the daemon's lock, as in Ensure.
func (m *Manager) Adopt(ctx context.Context, uuid string, budget size.Bytes) (pid int, adopted bool, err error) {
	d := m.daemon(uuid)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running {
		return d.pid, false, nil
	}
	if _, err := os.Stat(d.pipe); err != nil {
		return d.pid, false, nil // no pipe directory: no daemon of ours ever ran here
	}
	if _, err := m.servers(ctx, d); err != nil {
		return d.pid, false, nil
	}
	d.running = true
	d.pid = m.findPID(d)
	return d.pid, true, m.setLimit(ctx, d, budget)
}

func (m *Manager) start(ctx context.Context, d *mpsDaemon) error {
	for _, dir := range []string{d.pipe, d.logDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("MPS directory for GPU %s: %w", d.uuid, err)
		}
	}
	if _, err := m.control(ctx, d, "", "-d"); err != nil {
		return err
	}
	// -d returns once the daemon has forked; it answers a moment later.
	deadline := time.Now().Add(m.opts.Timeout)
	var last error
	for time.Now().Before(deadline) {
		if _, last = m.servers(ctx, d); last == nil {
			m.log.Info("MPS control daemon started", "gpu", d.uuid, "pipe", d.pipe)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("MPS control daemon for GPU %s started but does not answer: %w", d.uuid, last)
}

// UpdateLimit sets a new budget as the ceiling when it changed (unmanaged use moves it).
func (m *Manager) UpdateLimit(ctx context.Context, uuid string, budget size.Bytes) error {
	d := m.daemon(uuid)
	d.mu.Lock()
	defer d.mu.Unlock()
	return m.setLimit(ctx, d, budget)
}

// setLimit makes budget the ceiling no client can raise its own limit past: the default for
// servers yet to start, and the limit of every running server (the default does not reach them).
func (m *Manager) setLimit(ctx context.Context, d *mpsDaemon, budget size.Bytes) error {
	if budget == 0 || budget == d.limit {
		return nil
	}
	mib := strconv.FormatUint(uint64(budget/size.MiB), 10) + "M"
	if _, err := m.control(ctx, d, "set_default_device_pinned_mem_limit 0 "+mib); err != nil {
		return err
	}
	srv, err := m.servers(ctx, d)
	if err != nil {
		return err
	}
	for _, pid := range srv {
		if _, err := m.control(ctx, d, "set_device_pinned_mem_limit "+strconv.Itoa(pid)+" 0 "+mib); err != nil {
			return err
		}
	}
	d.limit = budget
	return nil
}

// Check says whether the GPU's daemon answers and its process (when known) is alive.
func (m *Manager) Check(ctx context.Context, uuid string) error {
	d := m.daemon(uuid)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pid != 0 {
		if err := m.procs.Alive(d.pid); err != nil {
			return fmt.Errorf("MPS control daemon pid %d is gone: %w", d.pid, err)
		}
	}
	_, err := m.servers(ctx, d)
	return err
}

// Stop asks the GPU's daemon to quit.
func (m *Manager) Stop(ctx context.Context, uuid string) error {
	d := m.daemon(uuid)
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := m.control(ctx, d, "quit"); err != nil {
		return err
	}
	d.running, d.pid, d.limit = false, 0, 0
	m.log.Info("MPS control daemon stopped", "gpu", d.uuid)
	return nil
}

// findPID looks for the daemon in the process table: the control binary run with -d whose
// environment names this GPU's pipe directory. 0 when not found (then only the pipe is checked).
func (m *Manager) findPID(d *mpsDaemon) int {
	procs, err := m.procs.List()
	if err != nil {
		return 0
	}
	base := filepath.Base(m.opts.ControlBinary)
	for _, p := range procs {
		if p.PipeDir == d.pipe && isDaemonArgv(p.Argv, base) {
			return p.PID
		}
	}
	return 0
}

func isDaemonArgv(argv []string, base string) bool {
	named, daemon := false, false
	for _, a := range argv {
		if filepath.Base(a) == base {
			named = true
		}
		if strings.HasPrefix(a, "-d") {
			daemon = true
		}
	}
	return named && daemon
}

// PinnedLimit reads a process's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for GPU uuid. ok is false when no
// entry applies or the value cannot be read: then the driver does not bound the process below its
// GPU budget, and the watchdog treats it as unlimited.
func PinnedLimit(v, uuid string) (size.Bytes, bool) {
	limit, ok, err := gpu.ParseMPSLimit(v, uuid)
	return limit, ok && err == nil
}
