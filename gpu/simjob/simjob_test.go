package simjob_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/gpu/simjob"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/size"
)

func TestMain(m *testing.M) {
	simjob.RunIfChild()
	os.Exit(m.Run())
}

// newSim is the GPU every test here runs on: one simulated H100, and its UUID.
func newSim(t *testing.T) (*gpu.Simulated, string) {
	t.Helper()
	s, devs := testutil.NewSim(t, "H100=80GiB")
	return s, devs[0].UUID
}

type run struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
}

func start(t *testing.T, env []string, args ...string) *run {
	t.Helper()
	cmd, err := simjob.Command(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	r := &run{cmd: cmd}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = &r.stdout, &r.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return r
}

func (r *run) wait(t *testing.T) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		r.cmd.Process.Kill()
		<-done
		t.Fatalf("job did not finish; stderr: %s", r.stderr.String())
	}
	return r.cmd.ProcessState.ExitCode()
}

// waitLong bounds the waits here: a loaded CI machine starts processes slowly.
const waitLong = 10 * time.Second

// ticked waits until each run's process rewrites its entry on the GPU (its heartbeat, at most
// a second apart): a tick of it after the call has passed its fault check, which every tick
// makes before it reports, so it did not fault in that tick. An entry is replaced by rename, so
// a new write is a new inode; the new file is created while the old one still exists, so it
// cannot reuse its number.
func ticked(t *testing.T, s *gpu.Simulated, uuid string, runs ...*run) {
	t.Helper()
	inode := func(r *run) uint64 {
		path := filepath.Join(s.Dir(), uuid, "procs", strconv.Itoa(r.cmd.Process.Pid))
		st, err := os.Stat(path)
		if err != nil {
			t.Fatalf("pid %d has no entry on the GPU (%v); stderr: %s", r.cmd.Process.Pid, err, r.stderr.String())
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}
	before := make([]uint64, len(runs))
	for i, r := range runs {
		before[i] = inode(r)
	}
	testutil.Eventually(t, waitLong, "every client reports again", func() bool {
		for i, r := range runs {
			if inode(r) == before[i] {
				return false
			}
		}
		return true
	})
}

func procs(t *testing.T, s *gpu.Simulated, uuid string) []gpu.Process {
	t.Helper()
	p, err := s.Processes(context.Background(), uuid)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRampHoldResult(t *testing.T) {
	s, uuid := newSim(t)
	result := filepath.Join(t.TempDir(), "result.json")
	r := start(t, nil, "--dir", s.Dir(), "--gpu", uuid, "--context", "500MiB", "--peak", "4GiB",
		"--ramp", "1s", "--hold", "300ms", "--result", result, "--seed", "42")
	pid := r.cmd.Process.Pid
	// During the ramp the job is seen below its peak; at the hold, exactly at it and busy.
	var seenBelow bool
	testutil.Eventually(t, waitLong, "the job to reach its peak", func() bool {
		for _, p := range procs(t, s, uuid) {
			if p.PID == pid && p.UsedBytes < 4*size.GiB && p.UsedBytes >= 500*size.MiB {
				seenBelow = true
			}
			if p.PID == pid && p.UsedBytes == 4*size.GiB {
				return true
			}
		}
		return false
	})
	if !seenBelow {
		t.Errorf("the job jumped to its peak: no reading between the context and the peak during a 1s ramp")
	}
	if u, _ := s.Utilization(context.Background(), uuid); u != 100 {
		t.Errorf("Utilization while holding = %d, want 100", u)
	}
	if used, _ := s.MemoryUsed(context.Background(), uuid); used != 4*size.GiB+gpu.SimDriverReserve {
		t.Errorf("MemoryUsed = %s, want 4GiB + reserve", used)
	}
	if code := r.wait(t); code != simjob.ExitOK {
		t.Fatalf("exit %d, stderr: %s", code, r.stderr.String())
	}
	if p := procs(t, s, uuid); len(p) != 0 {
		t.Fatalf("after exit: %+v", p)
	}
	data, err := os.ReadFile(result)
	if err != nil {
		t.Fatal(err)
	}
	var got simjob.Result
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := simjob.ResultFor(42)
	if got.Seed != 42 || len(got.Values) != 8 || got.Sum != want.Sum || got.Values[3] != want.Values[3] {
		t.Fatalf("result %+v, want %+v", got, want)
	}
	if other := simjob.ResultFor(43); other.Sum == want.Sum {
		t.Fatalf("seeds 42 and 43 give the same result")
	}
	if !strings.Contains(r.stdout.String(), "done: peak 4GiB") {
		t.Errorf("stdout: %q", r.stdout.String())
	}
}

// With --first and --settle the job holds its context and a first small allocation, computing
// nothing, for the settle, then ramps from there to its peak: a PyTorch job's import and
// load after its CUDA context.
func TestSettleHoldsTheFirstAllocation(t *testing.T) {
	s, uuid := newSim(t)
	r := start(t, nil, "--dir", s.Dir(), "--gpu", uuid, "--context", "500MiB", "--first", "2MiB",
		"--settle", "3s", "--peak", "4GiB", "--ramp", "200ms", "--hold", "200ms")
	pid := r.cmd.Process.Pid
	settled := func() bool {
		for _, p := range procs(t, s, uuid) {
			if p.PID == pid && p.UsedBytes == 502*size.MiB {
				return true
			}
		}
		return false
	}
	testutil.Eventually(t, waitLong, "the job to hold its context and first allocation", settled)
	if u, _ := s.Utilization(context.Background(), uuid); u != 0 {
		t.Errorf("Utilization while settling = %d, want 0: nothing computes yet", u)
	}
	testutil.Eventually(t, waitLong, "the job to reach its peak after the settle", func() bool {
		for _, p := range procs(t, s, uuid) {
			if p.PID == pid && p.UsedBytes == 4*size.GiB {
				return true
			}
		}
		return false
	})
	if code := r.wait(t); code != simjob.ExitOK {
		t.Fatalf("exit %d, stderr: %s", code, r.stderr.String())
	}
}

func TestKill(t *testing.T) {
	s, uuid := newSim(t)
	tests := []struct {
		sig      syscall.Signal
		wantCode int // -1: killed by the signal
	}{
		{syscall.SIGKILL, -1},
		{syscall.SIGTERM, simjob.ExitTERM},
		{syscall.SIGINT, simjob.ExitINT},
	}
	for _, tc := range tests {
		t.Run(tc.sig.String(), func(t *testing.T) {
			r := start(t, nil, "--dir", s.Dir(), "--gpu", uuid, "--peak", "2GiB", "--hold", "1m")
			pid := r.cmd.Process.Pid
			testutil.Eventually(t, waitLong, "the job to appear", func() bool {
				p := procs(t, s, uuid)
				return len(p) == 1 && p[0].PID == pid
			})
			if err := r.cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			// Not reaped yet: after SIGKILL only the backend's dead-process check frees the memory.
			testutil.Eventually(t, waitLong, "the job to leave the GPU", func() bool { return len(procs(t, s, uuid)) == 0 })
			if code := r.wait(t); code != tc.wantCode {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.wantCode, r.stderr.String())
			}
		})
	}
}

func TestOutOfMemory(t *testing.T) {
	s, uuid := newSim(t)
	tests := []struct {
		name    string
		env     []string
		peak    string
		wantErr string
	}{
		{"mps limit by uuid", []string{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=" + uuid + "=2048M"}, "3GiB", "MPS pinned limit 2GiB"},
		{"mps limit by index", []string{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G"}, "3GiB", "MPS pinned limit 1GiB"},
		{"gpu full", nil, "81GiB", "total capacity of 80GiB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := start(t, tc.env, "--dir", s.Dir(), "--gpu", uuid, "--peak", tc.peak, "--ramp", "200ms", "--hold", "10s")
			if code := r.wait(t); code != simjob.ExitFail {
				t.Fatalf("exit %d, want 1; stderr: %s", code, r.stderr.String())
			}
			if msg := r.stderr.String(); !strings.Contains(msg, "CUDA out of memory") || !strings.Contains(msg, tc.wantErr) {
				t.Fatalf("stderr %q lacks the OOM message with %q", msg, tc.wantErr)
			}
			if p := procs(t, s, uuid); len(p) != 0 {
				t.Fatalf("entries left after OOM: %+v", p)
			}
		})
	}
}

// TestCapIsInformational: a job over GPUFRAC_CAP_BYTES keeps going (the watchdog's job).
func TestCapIsInformational(t *testing.T) {
	s, uuid := newSim(t)
	r := start(t, []string{"GPUFRAC_CAP_BYTES=1073741824"}, "--dir", s.Dir(), "--gpu", uuid, "--peak", "2GiB", "--hold", "100ms")
	if code := r.wait(t); code != simjob.ExitOK {
		t.Fatalf("exit %d; stderr: %s", code, r.stderr.String())
	}
	// A size a person reads, not a byte count.
	if !strings.Contains(r.stdout.String(), "cap 1GiB (informational") {
		t.Fatalf("stdout %q does not report the cap as a size", r.stdout.String())
	}
}

func TestLeakAndFail(t *testing.T) {
	s, uuid := newSim(t)
	r := start(t, nil, "--dir", s.Dir(), "--gpu", uuid, "--peak", "1GiB", "--leak-to", "3GiB", "--leak-rate", "20GiB")
	if code := r.wait(t); code != simjob.ExitOK {
		t.Fatalf("leaker exit %d; stderr: %s", code, r.stderr.String())
	}
	if !strings.Contains(r.stdout.String(), "done: peak 3GiB") {
		t.Fatalf("leaker stdout %q: want a 3GiB peak", r.stdout.String())
	}
	r = start(t, nil, "--dir", s.Dir(), "--gpu", uuid, "--peak", "1GiB", "--hold", "1m", "--fail-after", "100ms")
	if code := r.wait(t); code != simjob.ExitFail || !strings.Contains(r.stderr.String(), "simulated crash") {
		t.Fatalf("crash exit %d; stderr: %s", code, r.stderr.String())
	}
}

func TestProcs(t *testing.T) {
	s, uuid := newSim(t)
	r := start(t, nil, "--dir", s.Dir(), "--gpu", uuid, "--peak", "1GiB", "--hold", "1m", "--procs", "2")
	testutil.Eventually(t, waitLong, "two processes", func() bool {
		p := procs(t, s, uuid)
		return len(p) == 2 && p[0].UsedBytes == size.GiB && p[1].UsedBytes == size.GiB
	})
	pids := procs(t, s, uuid)
	if pids[0].PID != r.cmd.Process.Pid && pids[1].PID != r.cmd.Process.Pid {
		t.Fatalf("the job's own PID %d is not among %+v", r.cmd.Process.Pid, pids)
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	if code := r.wait(t); code != simjob.ExitTERM {
		t.Fatalf("exit %d; stderr: %s", code, r.stderr.String())
	}
	if p := procs(t, s, uuid); len(p) != 0 {
		t.Fatalf("entries left after SIGTERM: %+v", p)
	}
}

// A task stopped by a signal to every process ends as stopped, whichever process the signal
// reached first: here the child, which exits first, so the parent learns of it before its own
// signal arrives.
func TestProcsStoppedChildFirst(t *testing.T) {
	s, uuid := newSim(t)
	r := start(t, nil, "--dir", s.Dir(), "--gpu", uuid, "--peak", "1GiB", "--hold", "1m", "--procs", "2")
	testutil.Eventually(t, waitLong, "two processes", func() bool { return len(procs(t, s, uuid)) == 2 })
	child := 0
	for _, p := range procs(t, s, uuid) {
		if p.PID != r.cmd.Process.Pid {
			child = p.PID
		}
	}
	if err := syscall.Kill(child, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLong, "the child to leave the GPU", func() bool { return len(procs(t, s, uuid)) == 1 })
	r.cmd.Process.Signal(syscall.SIGINT)
	if code := r.wait(t); code != simjob.ExitINT {
		t.Fatalf("exit %d, want %d (stopped); stderr: %s", code, simjob.ExitINT, r.stderr.String())
	}
}

// TestProcsKilled: SIGKILL of the job's main process takes its extra processes with it, and the
// backend frees all their memory.
func TestProcsKilled(t *testing.T) {
	s, uuid := newSim(t)
	r := start(t, nil, "--dir", s.Dir(), "--gpu", uuid, "--peak", "1GiB", "--hold", "1m", "--procs", "3")
	testutil.Eventually(t, waitLong, "three processes", func() bool { return len(procs(t, s, uuid)) == 3 })
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLong, "all three to leave the GPU", func() bool { return len(procs(t, s, uuid)) == 0 })
	r.wait(t)
}

func TestUsageErrors(t *testing.T) {
	s, uuid := newSim(t)
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"unknown gpu", []string{"--dir", s.Dir(), "--gpu", "GPU-nope"}, `"GPU-nope" is not a simulated GPU`},
		{"two gpus", []string{"--dir", s.Dir(), "--gpu", uuid + "," + uuid}, "exactly one GPU"},
		{"no dir", []string{"--dir", "", "--gpu", uuid}, "no --dir"},
		{"missing dir", []string{"--dir", filepath.Join(s.Dir(), "nope"), "--gpu", uuid}, "nope"},
		{"bad size", []string{"--dir", s.Dir(), "--gpu", uuid, "--peak", "lots"}, `"lots"`},
		{"leak below peak", []string{"--dir", s.Dir(), "--gpu", uuid, "--peak", "2GiB", "--leak-to", "1GiB"}, "--leak-to 1GiB"},
		{"bad procs", []string{"--dir", s.Dir(), "--gpu", uuid, "--procs", "0"}, "--procs 0"},
		{"first past peak", []string{"--dir", s.Dir(), "--gpu", uuid, "--peak", "1GiB", "--first", "600MiB"}, "--first 600MiB"},
		{"negative settle", []string{"--dir", s.Dir(), "--gpu", uuid, "--settle", "-1s"}, "--settle"},
		{"extra arg", []string{"--dir", s.Dir(), "--gpu", uuid, "oops"}, `"oops"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := simjob.Main(tc.args, &stdout, &stderr); code != simjob.ExitUsage {
				t.Fatalf("exit %d, want %d; stderr %q", code, simjob.ExitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.wantErr) {
				t.Fatalf("stderr %q lacks %q", stderr.String(), tc.wantErr)
			}
		})
	}
	t.Run("bad mps limit", func(t *testing.T) {
		r := start(t, []string{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4X"}, "--dir", s.Dir(), "--gpu", uuid)
		if code := r.wait(t); code != simjob.ExitUsage || !strings.Contains(r.stderr.String(), `"0=4X"`) {
			t.Fatalf("exit %d, stderr %q", code, r.stderr.String())
		}
	})
}

func TestMPSFaultOnAStoppedNeighbour(t *testing.T) {
	s, uuid := newSim(t)
	mps := []string{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=" + uuid + "=4096M"}
	args := func(extra ...string) []string {
		return append([]string{"--dir", s.Dir(), "--gpu", uuid, "--peak", "1GiB", "--hold", "1m"}, extra...)
	}
	victim := start(t, mps, args("--mps-fault")...)
	survivor := start(t, mps, args()...)
	noMPS := start(t, nil, args("--mps-fault")...) // the flag needs an MPS client
	stopped := start(t, mps, args()...)
	testutil.Eventually(t, waitLong, "four clients", func() bool { return len(procs(t, s, uuid)) == 4 })
	// With no note, a tick of each client has passed its fault check: nobody faults.
	ticked(t, s, uuid, victim, survivor, noMPS, stopped)
	if err := stopped.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := stopped.wait(t); code != simjob.ExitINT {
		t.Fatalf("stopped client exit %d, want %d", code, simjob.ExitINT)
	}
	if code := victim.wait(t); code != simjob.ExitFail || !strings.Contains(victim.stderr.String(), simjob.IllegalAddress) {
		t.Fatalf("victim exit %d, stderr %q: want exit 1 with %q", code, victim.stderr.String(), simjob.IllegalAddress)
	}
	// The note is there (the victim read it): a tick of each other client after it passed its
	// fault check, so only the --mps-fault MPS client faults.
	ticked(t, s, uuid, survivor, noMPS)
	// A client started after the stop is not hit by it.
	late := start(t, mps, "--dir", s.Dir(), "--gpu", uuid, "--peak", "1GiB", "--hold", "200ms", "--mps-fault")
	if code := late.wait(t); code != simjob.ExitOK {
		t.Fatalf("a client started after the stop exited %d: %s", code, late.stderr.String())
	}
}

// A job the machine starves (here: stopped outright) resumes its hold where it was rather than
// skip it, as a real job's work does; on a loaded machine a watchdog or a probe sees its peak.
func TestStarvedJobKeepsItsHold(t *testing.T) {
	s, uuid := newSim(t)
	const hold = 1500 * time.Millisecond
	began := time.Now()
	r := start(t, nil, "--dir", s.Dir(), "--gpu", uuid, "--peak", "1GiB", "--hold", hold.String())
	testutil.Eventually(t, waitLong, "the job at its peak", func() bool {
		p := procs(t, s, uuid)
		return len(p) == 1 && p[0].UsedBytes == size.GiB
	})
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The job cannot have worked longer than it has existed: that much of its hold is still due.
	reached := time.Since(began)
	due := hold - reached - 2*20*time.Millisecond
	time.Sleep(hold) // the starvation: as long as the whole hold
	if err := r.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	if code := r.wait(t); code != simjob.ExitOK {
		t.Fatalf("exit %d; stderr: %s", code, r.stderr.String())
	}
	if due < 200*time.Millisecond {
		t.Skipf("the job took %s to reach its peak: too slow a machine to tell a skipped hold", reached)
	}
	if held := time.Since(resumed); held < due {
		t.Fatalf("the job ended %s after it resumed, with %s of its hold still due: it skipped work it never did", held, due)
	}
}

// A help asked for goes to stdout (it pages with less), a bad flag to stderr.
func TestHelpOnStdout(t *testing.T) {
	var out, errb bytes.Buffer
	if code := simjob.Main([]string{"--help"}, &out, &errb); code != simjob.ExitOK || !strings.Contains(out.String(), "-peak") || errb.Len() != 0 {
		t.Errorf("simjob --help: exit %d, stdout %q, stderr %q: want 0 and the flags on stdout only", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := simjob.Main([]string{"--peek", "1GiB"}, &out, &errb); code != simjob.ExitUsage || !strings.Contains(errb.String(), "-peek") || out.Len() != 0 {
		t.Errorf("simjob --peek: exit %d, stdout %q, stderr %q: want %d and the error on stderr only", code, out.String(), errb.String(), simjob.ExitUsage)
	}
}
