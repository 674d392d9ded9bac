package runner

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/procfs"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// A job's missing working directory is named before anything runs, instead of surfacing as a
// fork/exec error that blames the program.
func TestRunRefusesAMissingDir(t *testing.T) {
	sim := newSim(t, "H100=80GiB")
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	j := simJob(t, "a", "t", "--peak", "1GiB")
	j.Dir = missing
	_, err := Run(context.Background(), queue.Queue{Jobs: []queue.Job{j}}, testOptions(t, sim, record.ArmPacked))
	if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), `job "a"`) {
		t.Fatalf("Run: %v; want an options error naming job a and %s", err, missing)
	}
}

// A template whose probe sees no GPU memory gets a footprint of nothing, said in the probe's
// detail with the cap it earns (the margin alone, in whole units), so its other jobs are
// admitted under a cap instead of each being probed again, and never under a larger cap than
// a job that used some memory.
func TestProbeThatSeesNoGPUMemory(t *testing.T) {
	sim := newSim(t, "H100=80GiB")
	var jobs []queue.Job
	for _, n := range []string{"a", "b", "c", "d"} {
		jobs = append(jobs, queue.Job{Name: n, Template: "cpu-only", Command: []string{"true"}})
	}
	o := testOptions(t, sim, record.ArmPacked)
	res := runAll(t, queue.Queue{Jobs: jobs}, o)
	probes := 0
	want := o.Policy.UnitBytes * size.Bytes(o.Policy.Units(o.Policy.Cap(0)))
	for _, a := range res.Attempts {
		switch {
		case a.Probe:
			probes++
			if !strings.Contains(a.Detail, "probe saw no GPU memory: footprint 0B, cap = the margin alone, "+want.String()) {
				t.Errorf("probe %s: detail %q should say what footprint it was given", a.Job, a.Detail)
			}
		case a.CapBytes != want:
			t.Errorf("%s ran under a %s cap, want %s (the margin alone)", a.Job, a.CapBytes, want)
		}
	}
	if probes != 1 {
		t.Fatalf("%d probes, want 1: %+v", probes, res.Attempts)
	}
}

// watchWriter signals once a line containing want has been written.
type watchWriter struct {
	mu   sync.Mutex
	b    strings.Builder
	want string
	seen chan struct{}
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if w.seen != nil && strings.Contains(w.b.String(), w.want) {
		close(w.seen)
		w.seen = nil
	}
	return len(p), nil
}

// A job's result inside the state directory (over the ledger's own files) is refused before
// anything runs; one in a results directory that itself lies in the state directory is not.
func TestRunRefusesAResultInTheStateDir(t *testing.T) {
	sim := newSim(t, "H100=80GiB")
	o := testOptions(t, sim, record.ArmPacked)
	o.StateDir = t.TempDir()
	j := simJob(t, "a", "t", "--peak", "1GiB")
	j.Result = filepath.Join(o.StateDir, "ledger.json")
	_, err := Run(context.Background(), queue.Queue{Jobs: []queue.Job{j}}, o)
	if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), `job "a": result = "`+j.Result+`" is inside the state directory`) {
		t.Fatalf("Run: %v; want an options error naming job a's result", err)
	}
	o.OutDir = filepath.Join(o.StateDir, "results")
	j.Result = "results/a.json"
	runAll(t, queue.Queue{Jobs: []queue.Job{j}}, o)
}

// A run that can admit nothing because another live process holds the GPU's budget says what it
// waits for and until when, instead of waiting in silence.
func TestWaitingRunSaysForWhat(t *testing.T) {
	sim := newSim(t, "H100=80GiB")
	o := testOptions(t, sim, record.ArmPacked)
	o.StateDir = t.TempDir()
	devs, err := sim.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Another gpufrac run, alive (a child process stands for it), holds most of the budget, and
	// this one's own reservation that a full disk kept it from releasing the rest: each is
	// named for what it is.
	sleeper := exec.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	st, err := procfs.Linux("").Stat(sleeper.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		holder *ledger.Holder
		job    string
		bytes  size.Bytes
	}{{&ledger.Holder{PID: sleeper.Process.Pid, StartTicks: st.StartTicks}, "big", 70 * size.GiB}, {node.SelfHolder(), "left", 8 * size.GiB}} {
		l, err := ledger.Open(o.StateDir, ledger.Options{Holder: r.holder})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.SyncGPUs([]ledger.GPUInfo{{UUID: devs[0].UUID, Model: devs[0].Model, TotalBytes: devs[0].MemoryBytes, Healthy: true}}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.ReserveBytes(devs[0].UUID, r.bytes, ledger.Task{JobName: r.job}); err != nil {
			t.Fatal(err)
		}
		l.Close()
	}
	w := &watchWriter{want: "nothing can be admitted", seen: make(chan struct{})}
	seen := w.seen
	o.Progress = w
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, queue.Queue{Jobs: []queue.Job{simJob(t, "a", "t", "--peak", "1GiB")}}, o)
		done <- err
	}()
	select {
	case <-seen:
	case <-time.After(30 * time.Second):
		t.Fatal("the run never said what it waits for")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want it canceled", err)
	}
	w.mu.Lock()
	out := w.b.String()
	w.mu.Unlock()
	for _, want := range []string{"GPU0: 78GiB of its 78GiB budget held by 1 reservation(s) of other processes (big/ of gpufrac run pid " + strconv.Itoa(sleeper.Process.Pid) + ")",
		"and 1 reservation(s) of this run's ended jobs that were not released (left/)", "waiting for them to end until "} {
		if !strings.Contains(out, want) {
			t.Errorf("progress lacks %q:\n%s", want, out)
		}
	}
}

// More jobs fail to start in one round than the run's channel of ended attempts holds (a
// mistyped program in a large queue, on GPUs that take 64 jobs each): every one is recorded
// failed and the run ends, instead of its loop blocking on a report only it reads.
func TestManyJobsThatCannotStartEndTheRun(t *testing.T) {
	sim := newSim(t, "H100=80GiB", "H100=80GiB")
	o := testOptions(t, sim, record.ArmPacked)
	o.Policy.MaxTasksPerGPU = 64
	o.Arm, o.Admission = "", testRule{arm: record.ArmUncapped} // every job at once, nothing to probe
	const n = 100
	var jobs []queue.Job
	for i := range n {
		jobs = append(jobs, queue.Job{Name: "j" + strconv.Itoa(i), Template: "t", Command: []string{"/no/such/program"}})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type ran struct {
		res *record.Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := Run(ctx, queue.Queue{Jobs: jobs}, o)
		done <- ran{res, err}
	}()
	var got ran
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		cancel()
		select {
		case <-done:
			t.Fatal("the run ended only once canceled")
		case <-time.After(10 * time.Second):
			t.Fatal("the run hangs, and does not end when canceled either")
		}
	}
	if got.err != nil {
		t.Fatalf("Run: %v", got.err)
	}
	failed := 0
	for _, a := range got.res.Attempts {
		if a.Outcome == record.OutcomeFailed {
			failed++
		}
	}
	if failed != n || got.res.Completed != 0 {
		t.Fatalf("%d attempts failed and %d jobs completed, want %d and 0", failed, got.res.Completed, n)
	}
}

// A headroom that leaves a GPU less than one memory unit of budget can admit nothing, ever: the
// run waited two and a half minutes "for them to end" with nothing running and nothing held,
// then failed every job. It is refused before anything runs, naming the headroom and the GPU.
func TestRunRefusesAHeadroomThatLeavesNoBudget(t *testing.T) {
	for _, tc := range []struct {
		name     string
		headroom size.Bytes
		want     string
	}{
		{"all of it", 80 * size.GiB, "GPU0 (H100 80GiB) a budget of 0B (80GiB total - 80GiB headroom)"},
		{"more than all of it", 100 * size.GiB, "GPU0 (H100 80GiB) a budget of 0B (80GiB total - 100GiB headroom)"},
		{"less than a unit left", 79*size.GiB + 512*size.MiB, "GPU0 (H100 80GiB) a budget of 512MiB (80GiB total - 79.5GiB headroom)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := newSim(t, "H100=80GiB")
			o := testOptions(t, sim, record.ArmPacked)
			o.Policy.Name = "queue"
			o.Policy.HeadroomBytes = tc.headroom
			// The bound stands in for the wait the bug was: a refusal comes at once.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := Run(ctx, queue.Queue{Jobs: []queue.Job{simJob(t, "a", "t", "--peak", "1GiB")}}, o)
			if !errors.Is(err, ErrOptions) {
				t.Fatalf("Run: %v; want an options error", err)
			}
			for _, w := range []string{`policy "queue" leaves `, tc.want, "less than one 1GiB memory unit", "lower its headroom"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// A job ends when its first process does: a helper it left running (`sleep 600 &`) held the
// job's stderr pipe, and the run counted the job as running, holding its guarantee, until the
// helper ended; one in a session of its own (setsid, a daemon) also ran on after the run, with
// its GPU memory and no reservation. Now the attempt ends with its first process, a helper in
// its group is ended with the group and one out of it by its token, which the detail says.
func TestAJobEndsWithItsFirstProcessNotItsHelpers(t *testing.T) {
	for _, tc := range []struct {
		name, script, detail string
	}{
		{"in its group", `sleep 600 & echo $! > "$1"; exit 0`, ""},
		{"in a session of its own", `setsid sh -c 'echo $$ > "$1"; exec sleep 600' sh "$1" & while [ ! -s "$1" ]; do sleep 0.05; done; exit 0`, "stopped the 1 process(es) its job left running without it (pid "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := newSim(t, "H100=80GiB")
			o := testOptions(t, sim, record.ArmPacked)
			pidFile := filepath.Join(t.TempDir(), "helper.pid")
			j := queue.Job{Name: "a", Template: "t", Command: []string{"sh", "-c", tc.script, "sh", pidFile}}
			res := runQueue(t, queue.Queue{Jobs: []queue.Job{j}}, o)
			helper := testutil.LeftPID(t, pidFile)
			a := res.Attempts[0]
			// The helper lives 600 s; the bound tells "held by it" apart from a slow machine.
			if a.Outcome != record.OutcomeOK || a.Duration() > 30*time.Second {
				t.Errorf("attempt %s after %s; want ok, ended with its first process", a.Outcome, a.Duration())
			}
			if !strings.Contains(a.Detail, tc.detail) {
				t.Errorf("detail %q lacks %q", a.Detail, tc.detail)
			}
			testutil.Ended(t, helper, "the helper to be ended with the job")
		})
	}
}

// A results directory that holds a results.json, attempts.csv or report.html some other tool
// wrote (gpufrac run --out . in a project whose results.json is its own) is refused before
// anything runs, the file named and left as it was: the run called any results.json "an
// earlier run's outputs (0 of 0 jobs completed, ended 0001-01-01 00:00:00)" and replaced it.
func TestRunKeepsOutputsThatAreNotARuns(t *testing.T) {
	for _, tc := range []struct{ file, content string }{
		{record.ResultsFile, `{"accuracy": 0.93}`},
		{record.ResultsFile, "not json at all\n"},
		{record.AttemptsFile, "epoch,loss\n1,0.5\n"},
		{record.ReportFile, "<html><title>my experiment</title></html>\n"},
	} {
		t.Run(tc.file+" "+strings.Fields(tc.content)[0], func(t *testing.T) {
			sim := newSim(t, "H100=80GiB")
			o := testOptions(t, sim, record.ArmPacked)
			p := filepath.Join(o.OutDir, tc.file)
			if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Run(context.Background(), queue.Queue{Jobs: []queue.Job{simJob(t, "a", "t", "--peak", "1GiB")}}, o)
			if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "not a gpufrac run's") {
				t.Errorf("Run: %v; want an options error naming %s as not a gpufrac run's", err, p)
			}
			if b, _ := os.ReadFile(p); string(b) != tc.content {
				t.Errorf("%s now holds %q..., want it kept: %q", tc.file, b[:min(len(b), 60)], tc.content)
			}
		})
	}
	// An earlier run's outputs are this run's to replace, as docs/run.md says.
	sim := newSim(t, "H100=80GiB")
	o := testOptions(t, sim, record.ArmPacked)
	q := queue.Queue{Jobs: []queue.Job{simJob(t, "a", "t", "--peak", "1GiB")}}
	runAll(t, q, o)
	runAll(t, q, o)
}
