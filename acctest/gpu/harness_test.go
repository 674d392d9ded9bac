package gpuacc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

const mpsRoot = "/tmp/gfmps"

func needGPU(tb testing.TB) {
	tb.Helper()
	if os.Getenv("GPUFRAC_GPU_TESTS") != "1" {
		tb.Skip("set GPUFRAC_GPU_TESTS=1 on a machine with an NVIDIA GPU")
	}
}

// outDir is GPUFRAC_GPU_OUT, made if it is missing (a fresh GPU machine has none: on an H100
// on 2026-12-06 a missing one failed the test before it ran), or the system's temporary folder.
func outDir(tb testing.TB) string {
	tb.Helper()
	d := os.Getenv("GPUFRAC_GPU_OUT")
	if d == "" {
		return os.TempDir()
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		tb.Fatalf("GPUFRAC_GPU_OUT=%s: %v", d, err)
	}
	return d
}

// The harness's output folder needs no GPU: a GPUFRAC_GPU_OUT that does not exist yet is made,
// so a fresh machine's first call records its figures.
func TestOutDirIsMade(t *testing.T) {
	d := filepath.Join(t.TempDir(), "not", "yet")
	t.Setenv("GPUFRAC_GPU_OUT", d)
	record(t, map[string]any{"figure": 1})
	b, err := os.ReadFile(filepath.Join(d, "results.jsonl"))
	if err != nil || !strings.Contains(string(b), `"figure":1`) {
		t.Fatalf("results.jsonl in a GPUFRAC_GPU_OUT made on demand: %q, %v", b, err)
	}
}

// record appends one JSON line of figures to results.jsonl.
func record(tb testing.TB, v map[string]any) {
	tb.Helper()
	v["test"] = tb.Name()
	v["time"] = time.Now().UTC().Format(time.RFC3339)
	b, _ := json.Marshal(v)
	tb.Log(string(b))
	f, err := os.OpenFile(filepath.Join(outDir(tb), "results.jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	f.Write(append(b, '\n'))
}

type harness struct {
	tb     testing.TB
	be     gpu.Backend
	uuid   string
	led    *ledger.Ledger
	enf    *enforcer.Enforcer
	runner testutil.Runner[enforcer.Event]
}

func newHarness(tb testing.TB, mode policy.Mode, interval time.Duration) *harness {
	tb.Helper()
	return newHarnessFence(tb, mode, interval, false)
}

// newHarnessFence is newHarness with the allocation fence on when fenced: its library is
// $GPUFRAC_FENCE_LIBRARY, or beside the test binary.
func newHarnessFence(tb testing.TB, mode policy.Mode, interval time.Duration, fenced bool) *harness {
	tb.Helper()
	return newHarnessFenceWith(tb, mode, interval, fenced, nil)
}

// newHarnessFenceWith is newHarnessFence with the fence's configuration adjusted (borrowing).
func newHarnessFenceWith(tb testing.TB, mode policy.Mode, interval time.Duration, fenced bool, adjust func(*enforcer.FenceConfig)) *harness {
	tb.Helper()
	needGPU(tb)
	var fc enforcer.FenceConfig
	if fenced {
		lib, err := fence.FindLibrary(os.Getenv("GPUFRAC_FENCE_LIBRARY"))
		if err != nil {
			tb.Fatal(err)
		}
		fc = enforcer.FenceConfig{Dir: filepath.Join(tb.TempDir(), "fence"), Library: lib}
		if adjust != nil {
			adjust(&fc)
		}
	}
	logf, err := os.OpenFile(filepath.Join(outDir(tb), "enforcer.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { logf.Close() })
	log := hclog.New(&hclog.LoggerOptions{Name: tb.Name(), Level: hclog.Info, Output: logf})
	be, err := gpu.NewNVML(log)
	if err != nil {
		tb.Fatal(err)
	}
	devs, err := be.Devices(context.Background())
	if err != nil || len(devs) == 0 {
		tb.Fatalf("devices: %v %v", devs, err)
	}
	d := devs[0]
	led, err := ledger.Open(tb.TempDir(), ledger.Options{Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	p := policy.Default()
	p.Mode = mode
	p.WatchdogInterval = interval
	if err := led.SetPolicy(p); err != nil {
		tb.Fatal(err)
	}
	if err := led.SyncGPUs([]ledger.GPUInfo{{UUID: d.UUID, Index: d.Index, Model: d.Model, TotalBytes: d.MemoryBytes, PCIBusID: d.PCIBusID, Healthy: d.Healthy}}); err != nil {
		tb.Fatal(err)
	}
	enf, err := enforcer.New(enforcer.Config{Backend: be, Ledger: led, Logger: log,
		MPS: enforcer.MPSOptions{Root: mpsRoot, Timeout: 10 * time.Second}, Fence: fc})
	if err != nil {
		tb.Fatal(err)
	}
	h := &harness{tb: tb, be: be, uuid: d.UUID, led: led, enf: enf}
	tb.Cleanup(func() {
		h.stop()
		led.Close()
		be.Close()
	})
	return h
}

func (h *harness) start() { h.runner.Start(h.enf.Subscribe, h.enf.Run) }

func (h *harness) stop() { h.runner.Stop() }

func (h *harness) reserve(capBytes size.Bytes, name string) ledger.Reservation {
	h.tb.Helper()
	r, err := h.led.ReserveBytes(h.uuid, capBytes, ledger.Task{JobName: name, TaskName: "main"})
	if err != nil {
		h.tb.Fatal(err)
	}
	return r
}

// job is one workload.py process (and, with --procs, its children: they share its group).
type job struct {
	name   string
	cmd    *exec.Cmd
	out    bytes.Buffer
	result string
	done   chan struct{}
}

// run starts workload.py with args, holding reservation r (none when r.Token is empty).
func (h *harness) run(r ledger.Reservation, name string, args ...string) *job {
	h.tb.Helper()
	return h.runScript(r, name, "workload.py", nil, args...)
}

// runScript starts a testdata script with extra environment variables.
func (h *harness) runScript(r ledger.Reservation, name, script string, extra []string, args ...string) *job {
	h.tb.Helper()
	return h.runVia(r, name, nil, script, extra, args...)
}

// runVia is runScript with the Python interpreter started by a launcher (argv before it).
func (h *harness) runVia(r ledger.Reservation, name string, launcher []string, script string, extra []string, args ...string) *job {
	h.tb.Helper()
	j := &job{name: name, result: filepath.Join(h.tb.TempDir(), name+".json"), done: make(chan struct{})}
	path := filepath.Join("testdata", script)
	if wd := os.Getenv("GPUFRAC_GPU_TESTDIR"); wd != "" {
		path = filepath.Join(wd, script)
	}
	argv := append(append(append([]string{}, launcher...), "python3", "-u", path), append(args, "--out", j.result)...)
	return h.launch(r, j, argv, extra)
}

// launch starts argv as job j, holding reservation r (none when r.Token is empty): in r's task
// environment, the fence's LD_PRELOAD among it, on the harness's GPU.
func (h *harness) launch(r ledger.Reservation, j *job, argv, extra []string) *job {
	h.tb.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "NOMAD_JOB_NAME="+j.name, "NOMAD_TASK_NAME=main", "GPUFRAC_TEMPLATE="+j.name,
		"CUDA_VISIBLE_DEVICES="+h.uuid)
	cmd.Env = append(cmd.Env, extra...)
	if r.Token != "" {
		st, err := h.led.State(h.uuid)
		if err != nil {
			h.tb.Fatal(err)
		}
		if err := h.enf.SyncFence(st); err != nil {
			h.tb.Fatal(err)
		}
		for k, v := range enforcer.TaskEnv(r, st, h.enf.EnvOptions(h.uuid)) {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Stdout, cmd.Stderr = &j.out, &j.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		h.tb.Fatal(err)
	}
	j.cmd = cmd
	go func() { _ = cmd.Wait(); close(j.done) }()
	h.tb.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-j.done
	})
	return j
}

func (j *job) ready(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(j.result + ".ready"); err == nil {
			return
		}
		select {
		case <-j.done:
			tb.Fatalf("%s ended before it was ready: %s", j.name, j.out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	tb.Fatalf("%s not ready after 60s", j.name)
}

// wait returns the exit code (-1 and the signal when killed), or fails after limit.
func (j *job) wait(tb testing.TB, limit time.Duration) (int, syscall.Signal) {
	tb.Helper()
	select {
	case <-j.done:
	case <-time.After(limit):
		tb.Fatalf("%s did not end within %s: %s", j.name, limit, j.out.String())
	}
	ws := j.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return -1, ws.Signal()
	}
	return ws.ExitStatus(), 0
}

// neighbourOK says whether a matmul neighbour finished with its solo result.
func (j *job) neighbourOK(tb testing.TB, seed string) (bool, string) {
	tb.Helper()
	code, sig := j.wait(tb, 90*time.Second)
	if code != 0 {
		return false, fmt.Sprintf("exit %d %v: %s", code, sig, tail(j.out.String()))
	}
	var res struct{ SHA256 string }
	b, err := os.ReadFile(j.result)
	if err == nil {
		err = json.Unmarshal(b, &res)
	}
	if err != nil {
		return false, "no result: " + err.Error()
	}
	var solo map[string]string
	sb, err := os.ReadFile(filepath.Join(filepath.Dir(j.cmd.Args[2]), "solo.json"))
	if err == nil {
		err = json.Unmarshal(sb, &solo)
	}
	if err != nil {
		tb.Fatal(err)
	}
	if res.SHA256 != solo[seed] {
		return false, "result " + res.SHA256 + " differs from solo " + solo[seed]
	}
	return true, "identical to solo"
}

func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 400 {
		s = s[len(s)-400:]
	}
	return s
}

func (h *harness) violation(token string, limit time.Duration) ledger.Violation {
	h.tb.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		for _, v := range h.led.Violations() {
			if v.Token == token {
				return v
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.tb.Fatalf("no violation recorded for the task within %s", limit)
	return ledger.Violation{}
}

func (h *harness) eventsOf(kind enforcer.EventKind) []enforcer.Event {
	var out []enforcer.Event
	for _, e := range h.runner.Events() {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// neighbours are the two 6 GiB matmul tasks that share the GPU with a test's subject; each must
// finish with its solo result.
type neighbours struct{ a, b *job }

func (h *harness) startNeighbours() neighbours {
	h.tb.Helper()
	return neighbours{
		a: h.run(h.reserve(6*size.GiB, "nbA"), "nbA", neighbourArgs("1")...),
		b: h.run(h.reserve(6*size.GiB, "nbB"), "nbB", neighbourArgs("2")...),
	}
}

func (n neighbours) ready(tb testing.TB) {
	tb.Helper()
	n.a.ready(tb)
	n.b.ready(tb)
}

// finished waits for both and says whether each ended with its solo result, and why not.
func (n neighbours) finished(tb testing.TB) (okA, okB bool, whyA, whyB string) {
	tb.Helper()
	okA, whyA = n.a.neighbourOK(tb, "1")
	okB, whyB = n.b.neighbourOK(tb, "2")
	return okA, okB, whyA, whyB
}

func neighbourArgs(seed string) []string {
	return []string{"matmul", "--seed", seed, "--size", "8192", "--iters", "150", "--hold-mb", "2048"}
}
