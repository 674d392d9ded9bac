package probe

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/attribution"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/gpu/simjob"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/procfs"
	"github.com/gpufrac/gpufrac/size"
)

func TestMain(m *testing.M) {
	simjob.RunIfChild()
	joinGroupIfAsked()
	os.Exit(m.Run())
}

func setup(t *testing.T) (*gpu.Simulated, string, []string) {
	t.Helper()
	sim, devs := testutil.NewSim(t, "H100=80GiB")
	uuid := devs[0].UUID
	env := Environ(map[string]string{simjob.EnvChild: "1", gpu.EnvSimDir: sim.Dir(), "CUDA_VISIBLE_DEVICES": uuid})
	return sim, uuid, env
}

func self(t *testing.T) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func TestProbeMeasuresTheWholeProcessTree(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		args        []string
		window      time.Duration
		wantPeak    size.Bytes
		wantStopped bool
		wantExit    int
	}{
		{"one process, whole run", []string{"--peak", "3GiB", "--ramp", "100ms", "--hold", "300ms"}, 0, 3 * size.GiB, false, 0},
		{"three processes", []string{"--peak", "2GiB", "--ramp", "50ms", "--hold", "400ms", "--procs", "3"}, 0, 6 * size.GiB, false, 0},
		// The window ends before the leak: the probe reports what the job looked like so far.
		{"window", []string{"--peak", "2GiB", "--ramp", "50ms", "--hold", "5s", "--leak-to", "20GiB"}, 600 * time.Millisecond, 2 * size.GiB, true, 130},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sim, uuid, env := setup(t)
			var samples int
			res, err := Run(context.Background(), Config{
				Backend: sim, GPU: uuid, Command: append([]string{self(t)}, tc.args...), Env: env,
				Window: tc.window, Interval: 10 * time.Millisecond, StopGrace: 3 * time.Second,
				OnSample: func(Sample) { samples++ },
			})
			if err != nil {
				t.Fatal(err)
			}
			// Sampling can miss the last few milliseconds of a ramp, never add memory.
			if res.Peak > tc.wantPeak || res.Peak < tc.wantPeak-tc.wantPeak/20 {
				t.Errorf("peak %s, want about %s", res.Peak, tc.wantPeak)
			}
			if res.Stopped != tc.wantStopped || res.ExitCode != tc.wantExit {
				t.Errorf("stopped %v exit %d, want %v and %d", res.Stopped, res.ExitCode, tc.wantStopped, tc.wantExit)
			}
			if res.Samples < 10 || samples != res.Samples {
				t.Errorf("%d samples (%d seen by OnSample): too few for a 50 Hz probe", res.Samples, samples)
			}
		})
	}
}

func TestProbeIgnoresOtherProcesses(t *testing.T) {
	t.Parallel()
	sim, uuid, env := setup(t)
	// A neighbour outside the job's tree holds 10GiB on the same GPU for the whole probe.
	other := exec.Command(self(t), "--peak", "10GiB", "--hold", "3s")
	other.Env = env
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	res, err := Run(context.Background(), Config{Backend: sim, GPU: uuid, Env: env, Interval: 10 * time.Millisecond,
		Command: []string{self(t), "--peak", "1GiB", "--ramp", "50ms", "--hold", "300ms"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Peak > size.GiB {
		t.Fatalf("peak %s includes the neighbour's memory", res.Peak)
	}
}

func TestProbeErrors(t *testing.T) {
	t.Parallel()
	sim, uuid, env := setup(t)
	tests := []struct {
		name string
		cfg  Config
		want error
	}{
		{"no memory", Config{Backend: sim, GPU: uuid, Env: env, Command: []string{"true"}}, ErrNoMemory},
		{"canceled", Config{Backend: sim, GPU: uuid, Env: env, Command: []string{self(t), "--peak", "1GiB", "--hold", "10s"}}, context.DeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			tc.cfg.StopGrace = 2 * time.Second
			_, err := Run(ctx, tc.cfg)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := Run(context.Background(), Config{Backend: sim, GPU: uuid, Command: []string{"/no/such/program"}}); err == nil {
		t.Fatal("a missing program gave no error")
	}
}

// A job started by Start is attributed whole on the real /proc: its root, the child it forks
// into its process group, a child that left the group and session (setsid), and a process
// elsewhere that carries its token; not a stranger, nor the process that started it.
func TestJobProcessesAreAttributed(t *testing.T) {
	t.Parallel()
	p, err := Start(Spec{Command: []string{"sh", "-c", "sleep 5 & setsid sleep 5 & wait"}, Env: os.Environ()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	stranger := exec.Command("sleep", "5")
	stranger.Env = append(os.Environ(), "GPUFRAC_RESERVATION=tok123")
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stranger.Process.Kill(); _ = stranger.Wait() }()
	plain := exec.Command("sleep", "5")
	if err := plain.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plain.Process.Kill(); _ = plain.Wait() }()
	var grouped, setsid int
	deadline := time.Now().Add(3 * time.Second)
	for (grouped == 0 || setsid == 0) && time.Now().Before(deadline) {
		grouped, setsid = children(p.PID)
		time.Sleep(10 * time.Millisecond)
	}
	if grouped == 0 || setsid == 0 {
		t.Fatalf("sh's children never appeared: in its group %d, in a session of its own %d", grouped, setsid)
	}
	const uuid = "GPU-x"
	a := attribution.New(procfs.Linux(""))
	job := attribution.NewTasks(attribution.Task{Token: "tok123", GPU: uuid, Root: p.PID})
	for _, tc := range []struct {
		name string
		pid  int
		want string
	}{
		{"root", p.PID, attribution.ViaRoot},
		{"child in its group", grouped, attribution.ViaGroup},
		{"setsid child", setsid, attribution.ViaParent},
		{"stranger with its token", stranger.Process.Pid, attribution.ViaEnviron},
		{"stranger", plain.Process.Pid, ""},
		{"the test", os.Getpid(), ""},
	} {
		if got := a.Attribute(tc.pid, uuid, job); got.Via != tc.want {
			t.Errorf("%s (pid %d): %+v, want via %q", tc.name, tc.pid, got, tc.want)
		}
	}
	noToken := attribution.NewTasks(attribution.Task{GPU: uuid, Root: p.PID})
	if got := a.Attribute(stranger.Process.Pid, uuid, noToken); got.Managed() {
		t.Errorf("without a token a stranger must not be the job's: %+v", got)
	}
}

// children finds two children of parent: one in its process group, one that leads a session.
func children(parent int) (grouped, setsid int) {
	procs := procfs.Linux("")
	pids, _ := procs.PIDs()
	for _, pid := range pids {
		st, err := procs.Stat(pid)
		switch {
		case err != nil || st.PPID != parent:
		case st.PGRP == parent:
			grouped = pid
		case st.Session == pid:
			setsid = pid
		}
	}
	return grouped, setsid
}

// TestProbeMeasuresSMActive: a probe reads the GPU's performance monitor over the job's run
// (pinned here, so the figure is exact); it measures nothing when not asked, and on a GPU without
// a monitor the share stays unknown rather than 0.
func TestProbeMeasuresSMActive(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		model string
		every time.Duration
		want  *float64
	}{
		{"H100, pinned at 42.5%", "H100=80GiB", 100 * time.Millisecond, ptr(42.5)},
		{"not asked", "H100=80GiB", 0, nil},
		{"A100 has no GPM", "A100=80GiB", 100 * time.Millisecond, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sim, devs := testutil.NewSim(t, tc.model)
			uuid := devs[0].UUID
			if gpu.SimHasGPM(devs[0].Model) {
				if err := sim.SetGPM(uuid, &gpu.SimLoad{SMUtil: 42.5, SMOccupancy: 20}); err != nil {
					t.Fatal(err)
				}
			}
			env := Environ(map[string]string{simjob.EnvChild: "1", gpu.EnvSimDir: sim.Dir(), "CUDA_VISIBLE_DEVICES": uuid})
			res, err := Run(context.Background(), Config{
				Backend: sim, GPU: uuid, Command: []string{self(t), "--peak", "1GiB", "--ramp", "50ms", "--hold", "500ms"}, Env: env,
				Interval: 10 * time.Millisecond, GPMInterval: tc.every, StopGrace: 3 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			got := res.SMActivePercent
			if (got == nil) != (tc.want == nil) || (got != nil && math.Abs(*got-*tc.want) > 1e-6) {
				t.Fatalf("SM active %v, want %v", fmtShare(got), fmtShare(tc.want))
			}
		})
	}
}

func ptr(v float64) *float64 { return &v }

func fmtShare(p *float64) string {
	if p == nil {
		return "unknown"
	}
	return strconv.FormatFloat(*p, 'g', -1, 64) + "%"
}

// fakeJob is a job whose end its test decides. Run calls it from one goroutine only.
type fakeJob struct {
	t     *testing.T
	done  chan struct{}
	ended bool // its exit is in, reaped or not
	code  int
	stops int
}

func newFakeJob(t *testing.T) *fakeJob { return &fakeJob{t: t, done: make(chan struct{})} }

// end makes the job exit with code, its status waiting to be reaped.
func (j *fakeJob) end(code int) { j.ended, j.code = true, code }

// reap is Start's goroutine catching up with an exit.
func (j *fakeJob) reap() {
	select {
	case <-j.done:
	default:
		close(j.done)
	}
}

func (j *fakeJob) Done() <-chan struct{} { return j.done }
func (j *fakeJob) Exited() bool          { return j.ended }
func (j *fakeJob) Reap()                 {}
func (j *fakeJob) root() int             { return os.Getpid() }

// Stop is a SIGINT: the end, with its 130, of a job still running; nothing to one that ended.
func (j *fakeJob) Stop(time.Duration) {
	j.stops++
	if !j.ended {
		j.end(130)
	}
	j.reap()
}

func (j *fakeJob) ExitCode() int {
	if !j.ended {
		j.t.Error("ExitCode of a job still running would wait for ever")
		return -1
	}
	j.reap()
	return j.code
}

// countedGPU lists the job's root holding 1GiB, and runs on[n] before its n-th answer.
type countedGPU struct {
	gpu.Backend
	pid int
	n   int
	on  map[int]func()
}

func (g *countedGPU) Processes(context.Context, string) ([]gpu.Process, error) {
	g.n++
	if f := g.on[g.n]; f != nil {
		f()
	}
	return []gpu.Process{{PID: g.pid, UsedBytes: size.GiB}}, nil
}

// A job that exits at the very moment its window ends exited: its own status counts, and it is
// not taken for one the window stopped (which gpufrac probe would store as a footprint). Only a
// job still running when the window's stop is sent is the window's. The test sends the sampling
// tick and the window's end itself, and the job ends inside the window's own sample, after the
// window was chosen and before the stop, so the order is the same at every run.
func TestAnExitAsTheWindowEndsIsTheJobs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		atWindow func(*fakeJob) // what the job does while the window's last sample is taken
		stopped  bool
		exit     int
		stops    int
	}{
		{"still running: the window stops it", func(*fakeJob) {}, true, 130, 1},
		{"fails as the window ends, reaped at once", func(j *fakeJob) { j.end(1); j.reap() }, false, 1, 0},
		{"fails as the window ends, not reaped yet", func(j *fakeJob) { j.end(1) }, false, 1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := newFakeJob(t)
			// The first sample finds the job's first memory and opens the window; the second is
			// the window's own.
			be := &countedGPU{pid: j.root(), on: map[int]func(){2: func() { tc.atWindow(j) }}}
			ticks, window := make(chan time.Time), make(chan time.Time)
			s := seams{
				start: func(Spec) (job, error) { return j, nil },
				every: func(time.Duration) (<-chan time.Time, func()) { return ticks, func() {} },
				after: func(time.Duration) (<-chan time.Time, func()) { return window, func() {} },
			}
			type outcome struct {
				res Result
				err error
			}
			out := make(chan outcome, 1)
			go func() {
				res, err := run(context.Background(), Config{Backend: be, GPU: "GPU-x", Command: []string{"train"},
					Window: time.Minute}, s)
				out <- outcome{res, err}
			}()
			// Bounds that only turn a hang into a failure: nothing here waits for time to pass.
			for _, step := range []struct {
				what string
				ch   chan time.Time
			}{{"the sampling tick", ticks}, {"the window's end", window}} {
				select {
				case step.ch <- time.Now():
				case <-time.After(time.Minute):
					t.Fatalf("Run never took %s", step.what)
				}
			}
			var o outcome
			select {
			case o = <-out:
			case <-time.After(time.Minute):
				t.Fatal("Run did not return")
			}
			if o.err != nil || o.res.Peak != size.GiB || o.res.Samples != 2 {
				t.Fatalf("result %+v, %v; want a 1GiB peak over 2 samples", o.res, o.err)
			}
			if o.res.Stopped != tc.stopped || o.res.ExitCode != tc.exit || j.stops != tc.stops {
				t.Errorf("stopped %v, exit %d, %d stops; want %v, %d and %d", o.res.Stopped, o.res.ExitCode, j.stops,
					tc.stopped, tc.exit, tc.stops)
			}
		})
	}
}

// exited sees a job's exit before Start's goroutine has reaped it, and the look leaves the
// status to that goroutine's Wait. Here nothing reaps the child until the test does, so the
// exit is found unreaped every time.
func TestExitedSeesAnExitNotYetReaped(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{Cmd: cmd, PID: cmd.Process.Pid, done: make(chan struct{})} // no goroutine reaps it
	if p.Exited() {
		t.Fatal("a running job counted as exited")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the child to become a zombie", func() bool {
		st, err := procfs.Linux("").Stat(p.PID)
		return err == nil && st.Dead()
	})
	if !p.Exited() {
		t.Error("an exited job that was not reaped yet counted as running")
	}
	if err := cmd.Wait(); err == nil || err.Error() != "signal: killed" {
		t.Errorf("Wait after the look: %v, want the child's own status (signal: killed)", err)
	}
	close(p.done)
	if !p.Exited() {
		t.Error("a reaped job counted as running")
	}
}
