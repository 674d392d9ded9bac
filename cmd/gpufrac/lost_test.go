package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/procfs"
	"github.com/gpufrac/gpufrac/record"
)

// bgRun is `gpufrac run` as a child process, as a terminal starts it.
type bgRun struct {
	cmd    *exec.Cmd
	stdout *bufio.Reader
	pipe   *os.File // the read end of its stdout
	done   chan struct{}
}

func (c *cli) startRun(t *testing.T, args ...string) *bgRun {
	t.Helper()
	all := append([]string{"--state-dir", c.state, "--sim-dir", c.simDir, "--gpu-backend", "simulated", "--simulated-gpus", c.simGPUs, "run"}, args...)
	cmd := exec.Command(os.Args[0], all...)
	cmd.Env = append(os.Environ(), envCLI+"=1")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	b := &bgRun{cmd: cmd, stdout: bufio.NewReader(r), pipe: r, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(b.done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-b.done; r.Close() })
	return b
}

// jobOnGPU waits until a process holds memory on the simulated GPU and returns its PID.
func (c *cli) jobOnGPU(t *testing.T) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		sim, err := gpu.NewSimulated(gpu.SimConfig{Dir: c.simDir}) // set up by the run once it starts
		if err != nil {
			continue
		}
		devs, err := sim.Devices(context.Background())
		if err != nil || len(devs) == 0 {
			continue
		}
		if ps, err := sim.Processes(context.Background(), devs[0].UUID); err == nil && len(ps) > 0 {
			return ps[0].PID
		}
	}
	t.Fatal("no job reached the GPU")
	return 0
}

func (b *bgRun) wait(t *testing.T) {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(60 * time.Second):
		t.Fatal("gpufrac run did not end")
	}
}

func writeQueue(t *testing.T, src string) string {
	t.Helper()
	q := filepath.Join(t.TempDir(), "q.hcl")
	if err := os.WriteFile(q, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return q
}

const longQueue = `
job "long" {
  template = "t"
  command  = ["gpufrac", "simjob", "--peak", "2GiB", "--hold", "5m"]
}
template "t" {
  peak = "2GiB"
}
`

func reservations(t *testing.T, dir string) []ledger.Reservation {
	t.Helper()
	snap, err := ledger.ReadSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	return snap.Reservations
}

// An ssh drop (SIGHUP) with stdout already gone (`| head` has exited) stops the run as Ctrl-C
// does: the job is stopped, its reservation released, the results written.
func TestRunSurvivesALostTerminal(t *testing.T) {
	c := newCLI(t)
	out := filepath.Join(t.TempDir(), "out")
	b := c.startRun(t, "--out", out, writeQueue(t, longQueue))
	job := c.jobOnGPU(t)
	if len(reservations(t, c.state)) != 1 {
		t.Fatalf("want the job's reservation in the ledger")
	}
	b.pipe.Close() // the reader of its output is gone: the next write meets EPIPE
	if err := b.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	b.wait(t)
	if ws := b.cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() {
		t.Fatalf("gpufrac run was killed by %v: it should stop its jobs and exit", ws.Signal())
	}
	if err := syscall.Kill(job, 0); err == nil {
		t.Errorf("job pid %d runs on after its runner ended", job)
	}
	if rs := reservations(t, c.state); len(rs) != 0 {
		t.Errorf("reservations left behind: %+v", rs)
	}
	data, err := os.ReadFile(filepath.Join(out, record.ResultsFile))
	if err != nil {
		t.Fatalf("no results after SIGHUP: %v", err)
	}
	var res record.Result
	if err := json.Unmarshal(data, &res); err != nil || len(res.Jobs) != 1 || res.Jobs[0].Outcome != record.OutcomeCanceled {
		t.Fatalf("results %+v, %v: want the job canceled", res.Jobs, err)
	}
}

// A runner killed outright (SIGKILL), or one that crashes (SIGQUIT makes the Go runtime exit at
// once without running deferred cleanup, as an unrecovered panic does), takes its job with it
// (parent-death signal), and the next run releases the reservation it left at once, saying why,
// instead of waiting out the grace.
func TestNextRunReleasesAKilledRunsReservations(t *testing.T) {
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{{"SIGKILL", syscall.SIGKILL}, {"crash (SIGQUIT)", syscall.SIGQUIT}} {
		t.Run(tc.name, func(t *testing.T) { nextRunReleases(t, tc.sig) })
	}
}

func nextRunReleases(t *testing.T, sig syscall.Signal) {
	c := newCLI(t)
	b := c.startRun(t, "--out", filepath.Join(t.TempDir(), "out"), writeQueue(t, longQueue))
	job := c.jobOnGPU(t)
	if err := b.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	b.wait(t)
	if ws, ok := b.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Exited() && ws.ExitStatus() == 0 {
		t.Fatalf("gpufrac run exited 0 after %v: want it ended without its cleanup", sig)
	}
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("job pid %d to end with its runner (%v)", job, sig),
		func() bool { return syscall.Kill(job, 0) != nil })
	if rs := reservations(t, c.state); len(rs) != 1 || rs[0].Holder == nil || rs[0].Holder.PID != b.cmd.Process.Pid {
		t.Fatalf("reservations %+v: want the killed run's, naming it as holder", rs)
	}
	start := time.Now()
	q := writeQueue(t, `
job "next" {
  template = "t"
  command  = ["gpufrac", "simjob", "--peak", "2GiB", "--hold", "100ms"]
}
template "t" {
  peak = "70GiB"
}
`)
	code, stdout, errs := c.run("run", "--out", filepath.Join(t.TempDir(), "out2"), q)
	if code != 0 || !strings.Contains(stdout, "its gpufrac run (pid ") || !strings.Contains(stdout, "is gone") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s\nwant the next run to release the reservation and say why", code, stdout, errs)
	}
	if d := time.Since(start); d > 60*time.Second {
		t.Errorf("the next run took %s: it waited for the orphaned reservation", d)
	}
	// The first line says the GPU is simulated (docs/run.md calls it the first line), and the
	// release comes under the setup lines, not before them.
	lines := strings.Split(stdout, "\n")
	if !strings.HasPrefix(lines[0], "gpufrac run: SIMULATED") {
		t.Errorf("the first line of stdout is %q, want gpufrac run: SIMULATED ...\nstdout:\n%s", lines[0], stdout)
	}
	released := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "is gone") })
	if released < 1 || !strings.HasPrefix(lines[released-1], "gpufrac run: ") {
		t.Errorf("the release (line %d) does not follow the setup lines at once:\n%s", released+1, stdout)
	}
}

// A damaged policy.json in the state directory, the whole file or the policy in it, is refused
// by run as by probe and units, not passed over for the defaults.
func TestDamagedPolicyFileIsRefusedEverywhere(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"truncated", `{"schema_version":1,`, ""},
		{"a bad value in the policy", `{"schema_version": "1", "name": "default", "headroom_bytes": "lots", "cap_margin_percent": "15",
  "cap_margin_bytes": "1500000000", "max_tasks_per_gpu": "6", "unit_bytes": "1073741824", "mode": "isolated",
  "watchdog_interval": "100ms", "unmanaged": "report"}`, `"lots"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			pf := filepath.Join(c.state, PolicyFileName)
			if err := os.WriteFile(pf, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			q := writeQueue(t, `
job "a" {
  command = ["gpufrac", "simjob", "--peak", "1GiB"]
}
`)
			for _, args := range [][]string{
				{"run", "--out", filepath.Join(t.TempDir(), "out"), q},
				{"units", "--peak", "1GiB"},
				{"probe", "--template", "t", "--", "true"},
			} {
				code, _, errs := c.run(args...)
				if code != 1 || !strings.Contains(errs, pf) || !strings.Contains(errs, tc.want) {
					t.Errorf("%v: exit %d, stderr %q: want 1 naming %s and %s", args, code, errs, pf, tc.want)
				}
			}
		})
	}
}

// A job whose GPU process is not its first (a shell script, a launcher's workers) leaves that
// process running when its runner is killed outright: the parent-death signal reaches the first
// process alone. The next run, releasing the reservation, stops it and says so; else it would
// run on with its GPU memory, no watchdog and no reservation.
func TestNextRunStopsWhatAKilledRunsJobLeftRunning(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to wrap the job in")
	}
	c := newCLI(t)
	// "; true" keeps sh from exec'ing the job in its own place: the GPU process is sh's child.
	b := c.startRun(t, "--out", filepath.Join(t.TempDir(), "out"), writeQueue(t, `
job "wrapped" {
  template = "t"
  command  = ["sh", "-c", "`+exe+` simjob --peak 2GiB --hold 5m; true"]
}
template "t" {
  peak = "2GiB"
}
`))
	left := c.jobOnGPU(t)
	t.Cleanup(func() { _ = syscall.Kill(left, syscall.SIGKILL) })
	if err := b.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	b.wait(t)
	code, stdout, errs := c.run("run", "--out", filepath.Join(t.TempDir(), "out2"), writeQueue(t, `
job "next" {
  command = ["gpufrac", "simjob", "--peak", "1GiB", "--hold", "100ms"]
}
`))
	want := fmt.Sprintf("stopped the 1 process(es) its job left running without it (pid %d)", left)
	if code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s\nwant the next run to say %q", code, stdout, errs, want)
	}
	// Reparented to init, it may stay a zombie a while: a zombie holds no memory and runs nothing.
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("pid %d, left running by the killed run's job, to end", left), func() bool {
		_, running, err := procfs.Running(procfs.Linux(""), left)
		return err == nil && !running
	})
}

// A relative --state-dir or --sim-dir names the same place for a job that runs in another
// directory (its dir) as for gpufrac: the allocation fence inside the job finds its tables there
// and a simulated job its GPU. Passed on as given, they named places under the job's dir, and
// the fence left the job to the watchdog alone.
func TestRelativeDirsHoldInAJobsDir(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to run the job")
	}
	newCLI(t)
	base := t.TempDir()
	t.Chdir(base)
	seen := filepath.Join(base, "seen")
	q := writeQueue(t, `
job "elsewhere" {
  dir     = "/"
  command = ["sh", "-c", "echo \"$GPUFRAC_FENCE_DIR\" > `+seen+` && echo \"$GPUFRAC_SIM_DIR\" >> `+seen+`"]
}
`)
	var out, errs strings.Builder
	if code := realMain([]string{"--state-dir", "state", "--sim-dir", "sim", "--gpu-backend", "simulated", "--simulated-gpus", "H100=80GiB",
		"run", "--out", "out", q}, &out, &errs); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errs.String())
	}
	got := strings.Fields(readFile(t, seen))
	want := []string{filepath.Join(base, "state", "fence"), filepath.Join(base, "sim")}
	if !slices.Equal(got, want) {
		t.Errorf("the job in / saw GPUFRAC_FENCE_DIR and GPUFRAC_SIM_DIR %q, want %q", got, want)
	}
}
