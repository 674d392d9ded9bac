package runner

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/gpu/simjob"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/probe"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/sched"
	"github.com/gpufrac/gpufrac/size"
)

// faultWait bounds each step of the fault tests: the enforcer checks MPS daemons once a second,
// and a loaded machine starts processes slowly.
const faultWait = 30 * time.Second

// mpsDaemon starts the fake MPS control daemon of GPU uuid under root before the run, as one an
// earlier enforcer left behind: the run's enforcer adopts it and watches it. It returns the
// daemon's pipe directory and a function that reads the daemon's PID.
func mpsDaemon(t *testing.T, control, root, uuid string) (pipe string, pid func() int) {
	t.Helper()
	pipe, logDir := filepath.Join(root, uuid, "pipe"), filepath.Join(root, uuid, "log")
	for _, d := range []string{pipe, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(control, "-d")
	cmd.Env = append(os.Environ(), enforcer.EnvMPSPipeDir+"="+pipe, enforcer.EnvMPSLogDir+"="+logDir, "CUDA_VISIBLE_DEVICES="+uuid)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("starting the fake MPS daemon: %v: %s", err, out)
	}
	pid = func() int {
		b, err := os.ReadFile(filepath.Join(pipe, "daemon.pid"))
		if err != nil {
			return 0
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	testutil.Eventually(t, faultWait, "the fake MPS daemon to write its pid", func() bool { return pid() != 0 })
	return pipe, pid
}

// behindA queues a (a job that runs until its test releases it) and then b, a short simulated
// job that waits behind it while a fault lasts; each template peaks at 2 GiB.
func behindA(t *testing.T, a queue.Job) queue.Queue {
	return queue.Queue{
		Jobs: []queue.Job{a, simJob(t, "b", "b", "--peak", "1GiB", "--ramp", "50ms", "--hold", "100ms")},
		Templates: map[string]queue.TemplateSpec{
			"a": {Name: "a", PeakBytes: 2 * size.GiB},
			"b": {Name: "b", PeakBytes: 2 * size.GiB},
		},
	}
}

// backgroundRun is a Run going on while a fault test drives its jobs and GPUs.
type backgroundRun struct {
	done chan struct{}
	res  *record.Result
	err  error
}

// runInBackground starts Run(q, o), bounded by 2*faultWait; when the test ends the run is
// canceled and waited for.
func runInBackground(t *testing.T, q queue.Queue, o Options) *backgroundRun {
	ctx, cancel := context.WithTimeout(context.Background(), 2*faultWait)
	b := &backgroundRun{done: make(chan struct{})}
	go func() {
		defer close(b.done)
		b.res, b.err = Run(ctx, q, o)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-b.done:
		case <-time.After(faultWait):
			t.Error("the run did not end once canceled")
		}
	})
	return b
}

// wait is the run's result once it ends, within 2*faultWait; the test fails, with the run's
// progress, when it does not end (when says at what it should have) or ends in an error.
func (b *backgroundRun) wait(t *testing.T, when string, progress *testutil.Buffer) *record.Result {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(2 * faultWait):
		t.Fatalf("the run did not end %s; progress:\n%s", when, progress.String())
	}
	if os.Getenv("GPUFRAC_SHOW_LOGS") != "" {
		t.Log(progress.String())
	}
	if b.err != nil {
		t.Fatalf("Run: %v", b.err)
	}
	return b.res
}

// waitFor polls cond until it holds or within has passed; it says whether it held.
func waitFor(within time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(within); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// A GPU fault in the middle of a run (NVML cannot list the GPU's processes; the GPU falls off
// the bus; its MPS control daemon dies while a task runs under it and cannot be restarted at
// first): the run reports it, admits nothing on that GPU while it lasts (the job queued behind
// the running one waits, and says why), and once the fault ends the GPU takes that job and the
// run completes. The running job is not harmed.
func TestRunThroughAGPUFault(t *testing.T) {
	control, err := filepath.Abs(filepath.Join("..", "enforcer", "testdata", "fake-mps-control"))
	if err != nil {
		t.Fatal(err)
	}
	type rig struct {
		sim        *gpu.Simulated
		uuid, pipe string
		daemon     func() int
	}
	tests := []struct {
		name string
		mode policy.Mode
		// inject starts the fault while job a runs; unhealthy is the reason the GPU then shows.
		inject    func(t *testing.T, r *rig)
		unhealthy string
		// held is the reason the waiting job is given once a has ended; clear ends the fault.
		held  string
		clear func(t *testing.T, r *rig)
	}{
		{
			name: "NVML error", mode: policy.ModeIsolated,
			inject: func(t *testing.T, r *rig) {
				if err := r.sim.SetProcessesFault(r.uuid, "NVML_ERROR_UNKNOWN"); err != nil {
					t.Fatal(err)
				}
			},
			unhealthy: "GPU processes cannot be read", held: "GPU processes cannot be read",
			clear: func(t *testing.T, r *rig) {
				if err := r.sim.SetProcessesFault(r.uuid, ""); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "GPU vanished", mode: policy.ModeIsolated,
			inject: func(t *testing.T, r *rig) {
				if err := r.sim.SetRemoved(r.uuid, true, "XID 79: GPU has fallen off the bus"); err != nil {
					t.Fatal(err)
				}
			},
			unhealthy: "GPU processes cannot be read", held: "GPU processes cannot be read",
			clear: func(t *testing.T, r *rig) {
				if err := r.sim.SetRemoved(r.uuid, false, ""); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			// The daemon dies under a client: the GPU is drained until the client leaves. A
			// restart that is refused keeps it drained; once a start succeeds it is healthy.
			name: "MPS daemon died", mode: policy.ModeMPS,
			inject: func(t *testing.T, r *rig) {
				if err := os.WriteFile(filepath.Join(r.pipe, "fail-start"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := syscall.Kill(r.daemon(), syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			},
			// The waiting line names the reason of the moment: died, or cannot be started.
			unhealthy: "MPS control daemon died", held: "MPS control daemon",
			clear: func(t *testing.T, r *rig) {
				if err := os.Remove(filepath.Join(r.pipe, "fail-start")); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sim, devs := testutil.NewSim(t, "H100=80GiB")
			r := &rig{sim: sim, uuid: devs[0].UUID}
			o := testOptions(t, sim, record.ArmPacked)
			o.Mode = tc.mode
			o.MaxConcurrent = 1 // b waits for a's slot, then for the GPU
			var progress testutil.Buffer
			o.Progress = &progress
			if tc.mode == policy.ModeMPS {
				root := testutil.MPSRoot(t)
				o.MPS = MPSOptions{ControlBinary: control, Root: root}
				r.pipe, r.daemon = mpsDaemon(t, control, root, r.uuid)
			}

			marks := t.TempDir()
			pidFile, release := filepath.Join(marks, "a.pid"), filepath.Join(marks, "release")
			// a runs until the test releases it; the test puts its memory on the GPU.
			a := queue.Job{Name: "a", Template: "a", Command: []string{"sh", "-c",
				`echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; while [ ! -f "$2" ]; do sleep 0.02; done`, "sh", pidFile, release}}
			q := behindA(t, a)
			run := runInBackground(t, q, o)
			shows := func(what string) func() bool {
				return func() bool { return strings.Contains(progress.String(), what) }
			}

			var pid int
			testutil.Eventually(t, faultWait, "job a to start", func() bool {
				b, err := os.ReadFile(pidFile)
				if err != nil {
					return false
				}
				pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
				return err == nil
			})
			if err := sim.SetUsage(r.uuid, pid, size.GiB); err != nil {
				t.Fatal(err)
			}
			if tc.mode == policy.ModeMPS {
				testutil.Eventually(t, faultWait, "the run's enforcer to adopt the MPS daemon", shows("mps      GPU0  MPS control daemon left by an earlier enforcer adopted"))
			}

			tc.inject(t, r)
			if !waitFor(faultWait, shows("GPU0  unhealthy: "+tc.unhealthy)) {
				t.Fatalf("the run did not report the GPU unhealthy (%s); progress:\n%s", tc.unhealthy, progress.String())
			}
			if err := os.WriteFile(release, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			// a has ended and b could run but for the fault: the run says what it waits for.
			if !waitFor(faultWait, shows("GPU0 is unhealthy ("+tc.held)) {
				t.Fatalf("the run did not say b waits for the faulted GPU (%s); progress:\n%s", tc.held, progress.String())
			}
			cleared := time.Now()
			tc.clear(t, r)

			res := run.wait(t, "once the fault was cleared", &progress)
			if res.Completed != 2 {
				t.Fatalf("completed %d of 2: %+v\nprogress:\n%s", res.Completed, res.Attempts, progress.String())
			}
			for _, job := range []string{"a", "b"} {
				if got := outcomes(attemptsOf(res, job)); !slices.Equal(got, []record.Outcome{record.OutcomeOK}) {
					t.Errorf("%s attempts %v, want one, ok", job, got)
				}
			}
			if b := attemptsOf(res, "b")[0]; !b.Start.After(cleared) {
				t.Errorf("b started %s before the fault was cleared: admitted on a GPU whose caps could not be enforced", cleared.Sub(b.Start))
			}
			if !shows("GPU0  healthy: ")() {
				t.Errorf("the run did not report the GPU healthy again; progress:\n%s", progress.String())
			}
			reported := false
			for _, ev := range res.GPUEvents {
				if ev.End.IsZero() {
					t.Errorf("GPU event %+v never ended", ev)
				}
				reported = reported || strings.Contains(ev.Reason, tc.unhealthy)
			}
			if !reported {
				t.Errorf("GPU events %+v: none says %q", res.GPUEvents, tc.unhealthy)
			}
		})
	}
}

// A neighbour faulted by a GPU-wide event under MPS is re-run and completes, though it allows
// itself one attempt; the GPU takes no new job while it is marked unhealthy; a job that fails
// on its own stays failed.
func TestCollateralFailureIsRerun(t *testing.T) {
	t.Parallel()
	sim := newSim(t, "H100=80GiB")
	hold := func(d string, extra ...string) []string {
		return append([]string{"--peak", "2GiB", "--ramp", "50ms", "--hold", d, "--result", "$GPUFRAC_RESULT"}, extra...)
	}
	marks := t.TempDir()
	steadyOn, victimOn := filepath.Join(marks, "steady"), filepath.Join(marks, "victim")
	q := queue.Queue{
		Jobs: []queue.Job{
			// steady is an MPS client that survives the stop; it keeps the GPU marked (drained)
			// until it ends, so the re-runs below must wait for it. steady and victim hold for
			// long enough that the pair, which starts only once both are on the GPU, is stopped
			// while they run, however slowly a loaded machine starts it.
			simJob(t, "steady", "steady", hold("4s", "--mark", steadyOn)...),
			// victim faults (cudaErrorIllegalAddress) when another client is stopped.
			simJob(t, "victim", "victim", hold("3s", "--mps-fault", "--mark", victimOn)...),
			// pair: two processes, each under its MPS limit, together over the cap: the watchdog
			// stops it with SIGINT, a GPU-wide event under MPS. It starts once steady and victim
			// are on the GPU, however slowly they start.
			simJob(t, "pair", "pair", "--procs", "2", "--peak", "3GiB", "--ramp", "300ms", "--hold", "300ms", "--after", steadyOn+","+victimOn),
		},
		Templates: map[string]queue.TemplateSpec{
			"steady": {Name: "steady", PeakBytes: 2 * size.GiB},
			"victim": {Name: "victim", PeakBytes: 2 * size.GiB},
			"pair":   {Name: "pair", PeakBytes: 2 * size.GiB},
		},
	}
	q.Jobs[0].Result = "results/steady.json"
	q.Jobs[1].Result = "results/victim.json"
	// A neighbour's doing uses up none of the victim's attempts: with one allowed it still
	// runs again (it ended exhausted before).
	q.Jobs[1].MaxAttempts = 1
	o := testOptions(t, sim, record.ArmPacked)
	o.Mode = policy.ModeMPS
	// Without the fence the pair's sum is only seen by the watchdog, whose stop is GPU-wide.
	o.Fence = enforcer.FenceOff
	res := runAll(t, q, o)
	if got := outcomes(attemptsOf(res, "pair")); !slices.Equal(got, []record.Outcome{record.OutcomeCapViolation, record.OutcomeOK}) {
		t.Fatalf("pair attempts %v, want [cap-violation ok]", got)
	}
	v := attemptsOf(res, "victim")
	if got := outcomes(v); !slices.Equal(got, []record.Outcome{record.OutcomeCollateral, record.OutcomeOK}) {
		t.Fatalf("victim attempts %v, want [collateral ok]; %+v", got, v)
	}
	if v[0].ExitCode != simjob.ExitFail || !strings.Contains(v[0].Detail, "GPU-wide event") ||
		!strings.Contains(v[0].Detail, "stopped under MPS") || !strings.Contains(v[0].Detail, "cudaErrorIllegalAddress") {
		t.Errorf("collateral attempt: exit %d, detail %q: want exit 1, the event and the job's own error", v[0].ExitCode, v[0].Detail)
	}
	if _, err := os.Stat(v[1].Result); err != nil {
		t.Errorf("the victim's re-run wrote no result: %v", err)
	}
	if s := attemptsOf(res, "steady"); len(s) != 1 || s[0].Outcome != record.OutcomeOK {
		t.Errorf("steady (no --mps-fault) should live through the stop: %+v", s)
	}
	if res.Collateral != 1 {
		t.Errorf("Result.Collateral = %d, want 1", res.Collateral)
	}
	if len(res.GPUEvents) == 0 {
		t.Fatal("no GPU-wide event recorded")
	}
	for _, e := range res.GPUEvents {
		if e.End.IsZero() {
			t.Fatalf("GPU still unhealthy at the end: %+v", e)
		}
		for _, a := range res.Attempts {
			if a.Start.After(e.Start) && a.Start.Before(e.End) {
				t.Errorf("%s attempt %d started at %s, while the GPU was unhealthy (%s to %s)",
					a.Job, a.Number, a.Start.Format("15:04:05.000"), e.Start.Format("15:04:05.000"), e.End.Format("15:04:05.000"))
			}
		}
	}
	// The GPU stayed marked until steady, the last client, left (its memory goes 4.05 s after it
	// starts; under -race the process itself exits a second later), and the re-run came after.
	last := res.GPUEvents[len(res.GPUEvents)-1]
	if st := attemptsOf(res, "steady")[0]; last.End.Before(st.Start.Add(4*time.Second)) || v[1].Start.Before(last.End) {
		t.Errorf("GPU healthy %s after steady started, victim re-run %s after: the mark must hold until steady's memory is gone (4.05s), the re-run wait for it",
			last.End.Sub(st.Start), v[1].Start.Sub(st.Start))
	}
}

func TestOwnFailureIsNotCollateral(t *testing.T) {
	t.Parallel()
	sim := newSim(t, "H100=80GiB")
	q := queue.Queue{
		Jobs: []queue.Job{
			simJob(t, "crash", "crash", "--peak", "2GiB", "--ramp", "50ms", "--hold", "5s", "--fail-after", "300ms", "--mps-fault"),
			simJob(t, "ok", "ok", "--peak", "2GiB", "--ramp", "50ms", "--hold", "500ms"),
		},
		Templates: map[string]queue.TemplateSpec{
			"crash": {Name: "crash", PeakBytes: 2 * size.GiB},
			"ok":    {Name: "ok", PeakBytes: 2 * size.GiB},
		},
	}
	o := testOptions(t, sim, record.ArmPacked)
	o.Mode = policy.ModeMPS
	res := runQueue(t, q, o)
	if got := outcomes(attemptsOf(res, "crash")); !slices.Equal(got, []record.Outcome{record.OutcomeFailed}) {
		t.Fatalf("crash attempts %v, want [failed] and no re-run", got)
	}
	if res.Collateral != 0 || len(res.GPUEvents) != 0 || res.Completed != 1 {
		t.Fatalf("collateral %d, events %v, completed %d: want 0, none, 1", res.Collateral, res.GPUEvents, res.Completed)
	}
}

// An honest job that runs out of memory while a neighbour is over its cap (memory the fence
// never saw fills the GPU until the watchdog's kill) is collateral, re-run as it was, however
// near its own cap it was: not a violator, its template's footprint not raised, its ladder not
// climbed. On the simulated GPU (borrowing on) a job holding 14.5GiB of a 25GiB guarantee was
// refused 5.5GiB by the full GPU beside a job holding 60GiB outside the fence, and was recorded
// "out of memory inside the job near its cap", re-run with a 26GiB guarantee; with
// max_attempts = 1 it would have ended exhausted. An out-of-memory exit near its cap that no
// neighbour explains stays its own (a framework that limits itself to its cap).
func TestOutOfMemoryBesideAViolatorIsCollateral(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// the window of a job over its cap, relative to n1's exit, and whose it is
		from, to time.Duration
		token    string
		want     record.Outcome
		wantNext bool
	}{
		{name: "a neighbour over its cap", from: -100 * time.Millisecond, to: 20 * time.Millisecond, token: "lk",
			want: record.OutcomeCollateral},
		{name: "a neighbour over its cap seen just after", from: 100 * time.Millisecond, to: 120 * time.Millisecond, token: "lk",
			want: record.OutcomeCollateral},
		{name: "no neighbour over its cap", want: record.OutcomeCapViolation, wantNext: true},
		{name: "a neighbour over its cap long before", from: -10 * time.Second, to: -9 * time.Second, token: "lk",
			want: record.OutcomeCapViolation, wantNext: true},
		{name: "its own window", from: -100 * time.Millisecond, to: 20 * time.Millisecond, token: "n1",
			want: record.OutcomeCapViolation, wantNext: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sim := newSim(t, "H100=80GiB")
			q := queue.Queue{
				Jobs:      []queue.Job{simJob(t, "n1", "good", "--peak", "20GiB")},
				Templates: map[string]queue.TemplateSpec{"good": {Name: "good", PeakBytes: 20 * size.GiB}},
			}
			o := testOptions(t, sim, record.ArmPacked)
			if err := o.fill(q); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(o.OutDir, "logs"), 0o755); err != nil {
				t.Fatal(err)
			}
			r, err := newRun(context.Background(), q, o)
			if err != nil {
				t.Fatal(err)
			}
			defer r.close()
			uuid := r.s.GPUs()[0]
			capBefore, _ := r.s.CapOf("good")

			exited := o.Now()
			if tc.token != "" {
				for _, ev := range []struct {
					stage enforcer.Stage
					at    time.Duration
				}{{enforcer.StageCrossed, tc.from}, {enforcer.StageContained, tc.to}} {
					r.onEvent(enforcer.Event{Kind: enforcer.EventViolation, Stage: ev.stage, GPU: uuid, Token: tc.token,
						Task: ledger.Task{JobName: tc.token}, Bytes: 62 * size.GiB, Time: exited.Add(ev.at)})
				}
			}
			j := r.s.Jobs()[0]
			j.Attempts, j.Running = 1, true
			res := ledger.Reservation{GPU: uuid, CapBytes: capBefore}
			a := &active{l: sched.Launch{Job: j, GPU: uuid, Res: res, Capped: true}, token: "n1", tail: probe.NewTail(8192),
				proc: &probe.Proc{}, contained: make(chan struct{}), exit: simjob.ExitFail, exitedAt: exited, peak: 14*size.GiB + size.GiB/2}
			a.a = record.Attempt{Job: j.Name, Template: j.Template, Number: 1, GPU: uuid, Capped: true, CapBytes: capBefore,
				Start: exited.Add(-2 * time.Second)}
			if _, err := a.tail.Write([]byte("CUDA out of memory: tried to allocate 5.51GiB (GPU has a total capacity of 80GiB of which 3.02GiB is free)\n")); err != nil {
				t.Fatal(err)
			}
			r.finish(a)

			at := r.attempts[len(r.attempts)-1]
			if at.Outcome != tc.want || (at.Next != "") != tc.wantNext {
				t.Fatalf("n1's attempt: %s (%s), next %q; want %s, a next step %v", at.Outcome, at.Detail, at.Next, tc.want, tc.wantNext)
			}
			if tc.want != record.OutcomeCollateral {
				return
			}
			if j.Done || j.Whole || j.Room != 0 {
				t.Errorf("n1 done %v, whole %v, room %s: want it queued again as it was", j.Done, j.Whole, j.Room)
			}
			if c, _ := r.s.CapOf("good"); c != capBefore {
				t.Errorf("template good's cap went from %s to %s: the neighbour's doing is not its footprint", capBefore, c)
			}
			if ps := r.led.Profiles(); len(ps) != 0 {
				t.Errorf("profiles %+v recorded for a harmed job", ps)
			}
		})
	}
}

// A job ended by a signal says which, where its exit status alone (137) reads the same as a
// wrapper that exits 137 itself, and the last line it wrote to stderr, if any, follows.
func TestFailureSaysTheSignalThatEndedIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script, want string
	}{
		{"killed", `kill -KILL $$`, "killed by signal 9 (killed)"},
		{"killed after a line", `echo "loading shards" >&2; kill -TERM $$`, "killed by signal 15 (terminated): loading shards"},
		{"exits 137 itself", `echo "wrapper gave up" >&2; exit 137`, "wrapper gave up"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := queue.Queue{
				Jobs:      []queue.Job{{Name: "a", Template: "a", Command: []string{"sh", "-c", tc.script}}},
				Templates: map[string]queue.TemplateSpec{"a": {Name: "a", PeakBytes: 2 * size.GiB}},
			}
			res := runQueue(t, q, testOptions(t, newSim(t, "H100=80GiB"), record.ArmPacked))
			atts := attemptsOf(res, "a")
			if len(atts) != 1 {
				t.Fatalf("%d attempts, want 1: %+v", len(atts), atts)
			}
			if at := atts[0]; at.Outcome != record.OutcomeFailed || at.Detail != tc.want {
				t.Errorf("attempt: %s, exit %d, detail %q; want failed with %q", at.Outcome, at.ExitCode, at.Detail, tc.want)
			}
		})
	}
}
