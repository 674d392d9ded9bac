package enforcer

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/gpu/simjob"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/procfs"
	"github.com/gpufrac/gpufrac/size"
)

// envTestChild makes the test binary a helper process: "stubborn" ignores SIGINT and sleeps.
const envTestChild = "GPUFRAC_ENFORCER_TEST_CHILD"

func TestMain(m *testing.M) {
	simjob.RunIfChild()
	if os.Getenv(envTestChild) == "stubborn" {
		signal.Ignore(syscall.SIGINT)
		os.Stdout.WriteString("ready\n") // the test sends SIGINT only after this
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	fencetest.Main(m) // runs the tests, then removes the fence library a test built
}

// rig is one simulated GPU, its ledger and an enforcer running over them.
type rig struct {
	t      testing.TB
	sim    *gpu.Simulated
	uuid   string
	uuids  []string // every GPU, by index
	dir    string   // ledger directory
	led    *ledger.Ledger
	enf    *Enforcer
	cfg    Config
	runner testutil.Runner[Event]

	logs    testutil.Buffer
	mu      sync.Mutex // guards signals
	signals map[int][]syscall.Signal
}

func testPolicy(mode policy.Mode) policy.Policy {
	p := policy.Default()
	p.Mode = mode
	p.HeadroomBytes = size.GiB
	p.WatchdogInterval = 10 * time.Millisecond
	return p
}

// newRig opens a ledger over one simulated 80 GiB GPU in mode; the enforcer is built but not run.
func newRig(t testing.TB, mode policy.Mode, tweak func(*Config)) *rig {
	t.Helper()
	return newRigGPUs(t, mode, []string{"H100=80GiB"}, tweak)
}

// newRigGPUs is newRig over several simulated GPUs (r.uuid is the first, r.uuids all of them).
func newRigGPUs(t testing.TB, mode policy.Mode, gpus []string, tweak func(*Config)) *rig {
	t.Helper()
	sim, devs := testutil.NewSim(t, gpus...)
	r := &rig{t: t, sim: sim, uuid: devs[0].UUID, dir: t.TempDir(), signals: map[int][]syscall.Signal{}}
	r.openLedger()
	if err := r.led.SetPolicy(testPolicy(mode)); err != nil {
		t.Fatal(err)
	}
	var infos []ledger.GPUInfo
	for _, d := range devs {
		r.uuids = append(r.uuids, d.UUID)
		infos = append(infos, ledger.GPUInfo{UUID: d.UUID, Index: d.Index, Model: d.Model, TotalBytes: d.MemoryBytes, Healthy: true})
	}
	if err := r.led.SyncGPUs(infos); err != nil {
		t.Fatal(err)
	}
	r.cfg = Config{
		Backend: sim, Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: &r.logs}),
		Allowance: 256 * size.MiB, StopGrace: 300 * time.Millisecond, ScanInterval: 50 * time.Millisecond,
		MPS: MPSOptions{ControlBinary: testutil.FakeMPSControl(t), Root: testutil.MPSRoot(t), Timeout: 2 * time.Second},
	}
	r.cfg.Signal = func(pid int, start uint64, sig syscall.Signal) error {
		r.mu.Lock()
		r.signals[pid] = append(r.signals[pid], sig)
		r.mu.Unlock()
		return procfs.Signal(pid, start, sig)
	}
	if tweak != nil {
		tweak(&r.cfg)
	}
	r.newEnforcer()
	t.Cleanup(func() {
		r.stop()
		r.led.Close()
		if t.Failed() {
			t.Logf("enforcer log:\n%s", r.logs.String())
		}
	})
	return r
}

func (r *rig) openLedger() {
	led, err := ledger.Open(r.dir, ledger.Options{})
	if err != nil {
		r.t.Fatal(err)
	}
	r.led = led
}

func (r *rig) newEnforcer() {
	r.cfg.Ledger = r.led
	enf, err := New(r.cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.enf = enf
}

// start runs the enforcer and records its events.
func (r *rig) start() { r.runner.Start(r.enf.Subscribe, r.enf.Run) }

func (r *rig) stop() { r.runner.Stop() }

// syncFence writes the rig GPU's reservations into its fence table, as a caller that just
// reserved does, and returns the state it wrote.
func (r *rig) syncFence() ledger.GPUState {
	r.t.Helper()
	st, err := r.led.State(r.uuid)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.enf.SyncFence(st); err != nil {
		r.t.Fatal(err)
	}
	return st
}

func (r *rig) reserve(capBytes size.Bytes, job string) ledger.Reservation {
	r.t.Helper()
	return r.reserveOn(r.uuid, capBytes, job)
}

func (r *rig) reserveOn(uuid string, capBytes size.Bytes, job string) ledger.Reservation {
	r.t.Helper()
	res, err := r.led.ReserveBytes(uuid, capBytes, ledger.Task{})
	if err != nil {
		r.t.Fatal(err)
	}
	_ = job
	return res
}

// job is a simulated job started as a real child process.
type job struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	done   chan struct{}
	result string
}

// run starts a simjob holding reservation res (none when res.Token is empty) with a Nomad identity.
func (r *rig) run(res ledger.Reservation, name string, args ...string) *job {
	r.t.Helper()
	return r.runEnv(res, name, nil, args...)
}

// runEnv is run with extra environment entries that override the task's.
func (r *rig) runEnv(res ledger.Reservation, name string, extra []string, args ...string) *job {
	r.t.Helper()
	var held []ledger.Reservation
	if res.Token != "" {
		held = append(held, res)
	}
	return r.runTask(held, name, extra, args...)
}

// runTask starts a simjob on the GPU of the last reservation in held, with the environments of
// all of them merged as Nomad merges a task's device requests: in order, a later one wins on a
// shared key.
func (r *rig) runTask(held []ledger.Reservation, name string, extra []string, args ...string) *job {
	r.t.Helper()
	j := &job{done: make(chan struct{}), result: filepath.Join(r.t.TempDir(), "result.json")}
	on := r.uuid
	if len(held) > 0 {
		on = held[len(held)-1].GPU
	}
	cmd, err := simjob.Command(context.Background(), append([]string{"--dir", r.sim.Dir(), "--gpu", on, "--result", j.result}, args...)...)
	if err != nil {
		r.t.Fatal(err)
	}
	cmd.Env = append(cmd.Env, envNomadJob+"="+name, envNomadTask+"=main", EnvTemplate+"=tmpl-"+name, envNomadNS+"=ns-"+name)
	merged := map[string]string{}
	for _, res := range held {
		st, err := r.led.State(res.GPU)
		if err != nil {
			r.t.Fatal(err)
		}
		for k, v := range TaskEnv(res, st, r.enf.EnvOptions(res.GPU)) {
			merged[k] = v
		}
	}
	for k, v := range merged {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, extra...)
	cmd.Stdout, cmd.Stderr = &j.out, &j.out
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	j.cmd = cmd
	go func() { _ = cmd.Wait(); close(j.done) }()
	r.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-j.done
	})
	return j
}

// wait returns the job's exit code, or fails the test after 10s.
func (j *job) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-j.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("job pid %d did not end; output:\n%s", j.cmd.Process.Pid, j.out.String())
	}
	return j.cmd.ProcessState.ExitCode()
}

func (j *job) killedBy() syscall.Signal {
	if ws, ok := j.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return 0
}

func (r *rig) sent(pid int) []syscall.Signal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]syscall.Signal(nil), r.signals[pid]...)
}

// event waits up to 10s for an event that matches.
func (r *rig) event(what string, match func(Event) bool) Event {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, ev := range r.runner.Events() {
			if match(ev) {
				return ev
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.t.Fatalf("no %s event; got %d events", what, len(r.runner.Events()))
	return Event{}
}

// waitLong bounds the enforcer tests' waits: a loaded CI machine starts processes slowly.
const waitLong = 10 * time.Second
