package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/attribution"
	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/procfs"
	"github.com/gpufrac/gpufrac/runstatus"
	"github.com/gpufrac/gpufrac/size"
)

// A task of two device requests carries the last one's GPUFRAC_RESERVATION and a per-GPU key for
// each: status charges its memory on each GPU to that GPU's reservation, by the watchdog's rule
// (a child whose environment was scrubbed counts for its parent's task).
func TestUsageChargesEachGPUsReservation(t *testing.T) {
	procs := procfs.NewTable(
		procfs.Proc{PID: 10, PPID: 1, Env: []string{enforcer.EnvReservation + "=tokB", enforcer.ReservationKey("GPU-a-1") + "=tokA",
			enforcer.ReservationKey("GPU-b-2") + "=tokB"}},
		procfs.Proc{PID: 11, PPID: 10, Env: []string{"X=1"}},
		procfs.Proc{PID: 12, PPID: 1, Env: []string{"X=1"}},
	)
	attr := attribution.New(procs)
	listed := []gpu.Process{{PID: 10, UsedBytes: size.GiB}, {PID: 11, UsedBytes: 2 * size.GiB}, {PID: 12, UsedBytes: 4 * size.GiB}}
	for _, tc := range []struct {
		gpu, tok string
	}{{"GPU-a-1", "tokA"}, {"GPU-b-2", "tokB"}} {
		gs := ledger.GPUState{GPUInfo: ledger.GPUInfo{UUID: tc.gpu}, Reservations: []ledger.Reservation{{Token: tc.tok, GPU: tc.gpu}}}
		got := usageOf(attr, gs, listed)
		if len(got) != 1 || got[tc.tok] != 3*size.GiB {
			t.Errorf("usage on %s = %v, want 3GiB for %s alone", tc.gpu, got, tc.tok)
		}
	}
}

// listed is a backend's process listing, per GPU.
type listed map[string][]gpu.Process

func (l listed) Processes(_ context.Context, uuid string) ([]gpu.Process, error) {
	ps, ok := l[uuid]
	if !ok {
		return nil, errors.New("no such GPU")
	}
	return ps, nil
}

// Status ties a GPU process to its task as the enforcer's watchdog does, the cgroup rule
// included: a process with no token whose cgroup is at or below one where a carrier of its
// task's token lives is the task's, and that carrier is read only by a token scan when it holds
// no GPU memory itself (a launcher whose scrubbed workers do). Status ran no scan and showed
// such a worker's memory as nobody's while the watchdog charged it to the task. A look-alike
// cgroup with no carrier at or above it stays unmanaged, as it does in the watchdog.
func TestStatusUsageTiesByCgroupAsTheEnforcerDoes(t *testing.T) {
	const (
		uuid  = "GPU-a-1"
		alloc = "0b5c2a1e-7d3f-4c2b-9a8e-1f2e3d4c5b6a"
		scope = "0::/nomad.slice/share.slice/" + alloc + ".train.scope"
	)
	gs := ledger.GPUState{GPUInfo: ledger.GPUInfo{UUID: uuid},
		Reservations: []ledger.Reservation{{Token: "tokT", GPU: uuid, Task: ledger.Task{AllocID: alloc, TaskName: "train"}}}}
	// the launcher carries the token and holds no GPU memory: no listing names it
	launcher := procfs.Proc{PID: 10, PPID: 1, Cgroup: scope + "\n",
		Env: []string{enforcer.EnvReservation + "=tokT", attribution.EnvNomadAlloc + "=" + alloc}}
	for _, tc := range []struct {
		name   string
		cgroup string
		want   map[string]size.Bytes
	}{
		{"no token, in its task's cgroup", scope, map[string]size.Bytes{"tokT": 3 * size.GiB}},
		{"no token, in a cgroup its task made below its own", scope + "/workers", map[string]size.Bytes{"tokT": 3 * size.GiB}},
		{"a sibling cgroup whose name begins with the task's", scope + "x", map[string]size.Bytes{}},
		{"the task's cgroup name under another's", "0::/nomad.slice/docker-0f3a9c.scope/" + alloc + ".train.scope",
			map[string]size.Bytes{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// reparented to init, its environment scrubbed: only its cgroup says whose it is
			worker := procfs.Proc{PID: 20, PPID: 1, Cgroup: tc.cgroup + "\n", Env: []string{"X=1"}}
			gpus := listed{uuid: {{PID: 20, UsedBytes: 3 * size.GiB}}}
			var stderr strings.Builder
			got := measureUsage(t.Context(), gpus, procfs.NewTable(launcher, worker), []ledger.GPUState{gs}, &stderr)
			if !maps.Equal(got[uuid], tc.want) || stderr.Len() > 0 {
				t.Fatalf("usage %v (stderr %q), want %v", got[uuid], stderr.String(), tc.want)
			}
		})
	}
}

// status shows a running queue from the progress file the run writes: per GPU the guarantees,
// what is borrowed past them and what is free, each attempt running there with its guarantee,
// borrowed, use and limit, and the jobs the ladder stopped. A borrower's use past its guarantee
// reads as borrowed; only use past a limit reads as past it.
func TestStatusShowsTheRunsLadderAndBorrowing(t *testing.T) {
	alive, gone := os.Getpid(), deadPID(t)
	base := runstatus.Status{Queue: "q.hcl", Arm: "packed", OutDir: "out", Start: time.Now(), UpdatedAt: time.Now(), Jobs: 8,
		Waits: []runstatus.Wait{}, Stopped: []runstatus.Stopped{}}
	leaker := runstatus.Attempt{Job: "leaker-1", GPUIndex: 0, Attempt: 2, MaxAttempts: 3, Room: "46GiB",
		GuaranteeBytes: 46 * size.GiB, LimitBytes: 78 * size.GiB, UsedBytes: 49 * size.GiB, BorrowedBytes: 3 * size.GiB}
	eval := runstatus.Attempt{Job: "eval-2", GPUIndex: 0, Attempt: 1, MaxAttempts: 3, Room: "20GiB",
		GuaranteeBytes: 20 * size.GiB, LimitBytes: 78 * size.GiB, UsedBytes: 16 * size.GiB}
	capped := runstatus.Attempt{Job: "train-1", GPUIndex: 1, Attempt: 1, MaxAttempts: 3, Room: "9GiB",
		GuaranteeBytes: 9 * size.GiB, LimitBytes: 9 * size.GiB, UsedBytes: 6 * size.GiB}
	over := capped
	over.Job, over.UsedBytes = "train-2", 10*size.GiB
	tests := []struct {
		name      string
		pid       int
		gpus      []runstatus.GPU
		attempts  []runstatus.Attempt
		stopped   []runstatus.Stopped
		want, not []string // patterns of whole lines (runs of spaces match any), and words no line may have
	}{
		{
			name: "a borrower beside a job within its guarantee", pid: alive,
			gpus:     []runstatus.GPU{{Index: 0, Running: 2, UsedBytes: 65 * size.GiB, ReservedBytes: 66 * size.GiB, BudgetBytes: 78 * size.GiB, BorrowedBytes: 3 * size.GiB}},
			attempts: []runstatus.Attempt{eval, leaker},
			want: []string{
				"GPU0: 2 running, using 65GiB, guarantees 66GiB of 78GiB, borrowed 3GiB, free 9GiB",
				"JOB ATTEMPT GUARANTEE BORROWED USING LIMIT",
				"eval-2 1 of 3 20GiB 0B 16GiB 78GiB",
				"leaker-1 2 of 3 46GiB 3GiB 49GiB 78GiB",
			},
			not: []string{"past", "caps", "stopped by the ladder"},
		},
		{
			name: "borrowing off: no borrowed figure, use past the limit said", pid: alive,
			gpus:     []runstatus.GPU{{Index: 1, Running: 2, UsedBytes: 16 * size.GiB, ReservedBytes: 18 * size.GiB, BudgetBytes: 78 * size.GiB}},
			attempts: []runstatus.Attempt{capped, over},
			want: []string{
				"GPU1: 2 running, using 16GiB, guarantees 18GiB of 78GiB, borrowed 0B, free 60GiB",
				"train-1 1 of 3 9GiB - 6GiB 9GiB",
				"train-2 1 of 3 9GiB - 10GiB (past its limit) 9GiB",
			},
		},
		{
			name: "the jobs the ladder stopped, with why", pid: alive,
			gpus:    []runstatus.GPU{{Index: 0, BudgetBytes: 78 * size.GiB}},
			stopped: []runstatus.Stopped{{Job: "grower-1", Reason: "attempt 3 of 3 alone with the GPU broke its cap too"}, {Job: "leaker-1"}},
			want: []string{
				"GPU0: 0 running, using 0B, guarantees 0B of 78GiB, borrowed 0B, free 78GiB",
				"stopped by the ladder (2):",
				"grower-1: attempt 3 of 3 alone with the GPU broke its cap too",
				"leaker-1: -",
			},
			not: []string{"JOB"}, // no attempt running: no table
		},
		{
			name: "a run that is gone", pid: gone,
			gpus:     []runstatus.GPU{{Index: 0, Running: 1, BudgetBytes: 78 * size.GiB}},
			attempts: []runstatus.Attempt{leaker},
			want:     []string{"run of q.hcl: pid " + strconv.Itoa(gone) + " left its progress 0s ago and is gone (it ended without cleaning up)"},
			not:      []string{"leaker-1", "GPU0"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st := base
			st.PID, st.GPUs, st.Attempts = tc.pid, tc.gpus, tc.attempts
			if tc.stopped != nil {
				st.Stopped = tc.stopped
			}
			data, err := json.Marshal(st)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, runstatus.File), data, 0o644); err != nil {
				t.Fatal(err)
			}
			rs, ok, err := runstatus.Read(dir)
			if err != nil || !ok {
				t.Fatalf("ReadRunStatus: ok %v, %v", ok, err)
			}
			var b strings.Builder
			writeRun(&b, rs, runGone(rs))
			lines := strings.Split(b.String(), "\n")
			for _, want := range tc.want {
				re := regexp.MustCompile(`^\s*` + strings.Join(strings.Fields(regexp.QuoteMeta(want)), `\s+`) + `\s*$`)
				if !slices.ContainsFunc(lines, re.MatchString) {
					t.Errorf("no line\n\t%s\nin\n%s", want, b.String())
				}
			}
			for _, not := range tc.not {
				if strings.Contains(b.String(), not) {
					t.Errorf("%q in\n%s", not, b.String())
				}
			}
		})
	}
}

// deadPID is the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// A reservation's usage past its guarantee is borrowed while within its limit; past the limit,
// or past a cap that lends nothing, it is said to be.
func TestReservationUsage(t *testing.T) {
	u := func(b size.Bytes) *size.Bytes { return &b }
	tests := []struct {
		name string
		r    statusReservation
		want string
	}{
		{"not measured", statusReservation{CapBytes: 5 * size.GiB}, "-"},
		{"within its guarantee", statusReservation{CapBytes: 5 * size.GiB, LimitBytes: 78 * size.GiB, UsageBytes: u(4 * size.GiB)}, "4GiB"},
		{"borrowing", statusReservation{CapBytes: 2 * size.GiB, LimitBytes: 78 * size.GiB, UsageBytes: u(16 * size.GiB)}, "16GiB (14GiB borrowed)"},
		{"past its limit", statusReservation{CapBytes: 2 * size.GiB, LimitBytes: 10 * size.GiB, UsageBytes: u(11 * size.GiB)}, "11GiB (past its 10GiB limit)"},
		{"past a cap that lends nothing", statusReservation{CapBytes: 5 * size.GiB, UsageBytes: u(6 * size.GiB)}, "6GiB (past its cap)"},
	}
	for _, tc := range tests {
		if got := reservationUsage(tc.r); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A damaged violations.json costs only the violations: status still answers (exit 0) and warns
// what was lost, and run keeps the footprints (the job starts from its template's, no probe),
// says what was lost and where the damaged file is kept, and completes.
func TestDamagedViolationsFileCostsOnlyTheViolations(t *testing.T) {
	c := newCLI(t)
	l, err := ledger.Open(c.state, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.RecordProfile(ledger.Profile{Template: "t", PeakBytes: size.GiB, Source: ledger.ProfileProbe, MeasuredAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Hour)
	if err := l.RecordViolation(ledger.Violation{Token: "tok", GPU: "GPU-x", Action: "sigkill", CapBytes: size.GiB, PeakBytes: 2 * size.GiB,
		CrossedAt: at, ContainedAt: at.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	vpath := filepath.Join(c.state, ledger.ViolationsFile)
	if err := os.WriteFile(vpath, []byte("\x00\x00not json"), 0o600); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := c.run("status", "--no-usage")
	if code != 0 || !strings.Contains(stderr, "warning:") || !strings.Contains(stderr, vpath) || !strings.Contains(stderr, "kept the 0 violation(s)") ||
		strings.Contains(stderr, "move the ledger") {
		t.Fatalf("status: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 0 and a warning naming the file and what was lost, not to move the ledger aside", code, stdout, stderr)
	}

	q := writeQueue(t, `
template "t" {}
job "a" {
  template = "t"
  command  = ["gpufrac", "simjob", "--peak", "1GiB", "--hold", "100ms"]
}
`)
	code, stdout, stderr = c.run("run", "--out", filepath.Join(t.TempDir(), "out"), q)
	if code != 0 || !strings.Contains(stdout, "kept the 0 violation(s)") || !strings.Contains(stdout, vpath+ledger.DamagedSuffix) {
		t.Fatalf("run: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 0, what was lost and where the damaged file is kept", code, stdout, stderr)
	}
	if strings.Contains(stdout, "probe ") || strings.Contains(stdout, "move the ledger") {
		t.Errorf("run probed again or told the user to move the ledger aside:\n%s", stdout)
	}
	if !strings.Contains(stdout, "[   0.0s] ledger ") {
		t.Errorf("the ledger's repair line is not stamped at the run's start:\n%s", stdout)
	}
	snap, err := ledger.ReadSnapshot(c.state)
	if err != nil || len(snap.Profiles) != 1 || snap.Profiles[0].Template != "t" {
		t.Fatalf("after the run: %v, profiles %+v; want the template's footprint kept", err, snap.Profiles)
	}
}

func TestTaskLabel(t *testing.T) {
	tests := []struct {
		task ledger.Task
		want string
	}{
		{ledger.Task{JobName: "leaker-1", TaskName: "leaker-1"}, "leaker-1"},
		{ledger.Task{JobName: "train", TaskName: "worker"}, "train/worker"},
		{ledger.Task{JobName: "train", TaskName: "train", AllocID: "1a2b3c4d5e"}, "train (alloc 1a2b3c4d)"},
		{ledger.Task{}, "unknown task"},
	}
	for _, tt := range tests {
		if got := taskLabel(tt.task); got != tt.want {
			t.Errorf("taskLabel(%+v) = %q, want %q", tt.task, got, tt.want)
		}
	}
}

func TestExpiry(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name          string
		created, seen time.Time
		seenWant      string
		expiresPrefix string
	}{
		{"never seen", now.Add(-30 * time.Second), time.Time{}, "never", "in 1m30s"},
		{"seen lately", now.Add(-time.Hour), now.Add(-10 * time.Second), " ago", "in 1m50s"},
		{"unseen past the grace", now.Add(-time.Hour), now.Add(-3 * time.Minute), " ago", "overdue"},
	}
	for _, tt := range tests {
		seen, exp := expiry(tt.created, tt.seen, now, 0)
		if !strings.Contains(seen, tt.seenWant) || !strings.HasPrefix(exp, tt.expiresPrefix) {
			t.Errorf("%s: seen %q expires %q, want %q and %q...", tt.name, seen, exp, tt.seenWant, tt.expiresPrefix)
		}
	}
}

func TestLockHolder(t *testing.T) {
	dir := t.TempDir()
	if got := lockHolder(dir); !strings.Contains(got, "none has locked") {
		t.Errorf("no lock file: %q", got)
	}
	lock := filepath.Join(dir, ledger.LockFile)
	if err := os.WriteFile(lock, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := lockHolder(dir); !strings.Contains(got, "pid "+strconv.Itoa(os.Getpid())+" (") {
		t.Errorf("lock file of a live process: %q", got)
	}
	// PIDs are at most 2^22 on Linux: this one cannot be running.
	if err := os.WriteFile(lock, []byte("99999999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := lockHolder(dir); !strings.Contains(got, "has exited") {
		t.Errorf("lock file of a gone process: %q", got)
	}
}

// frames counts the frames --watch draws and ends the watch after two.
type frames struct {
	mu     sync.Mutex
	buf    strings.Builder
	cancel context.CancelFunc
}

func (f *frames) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buf.Write(p)
	if strings.Count(f.buf.String(), "gpufrac status    ") >= 2 {
		f.cancel()
	}
	return len(p), nil
}

func TestStatusWatchRedraws(t *testing.T) {
	c := newCLI(t)
	if code, _, errs := c.run("probe", "--template", "w", "--no-store", "--", "gpufrac", "simjob", "--peak", "1GiB", "--ramp", "20ms", "--hold", "50ms"); code != 0 {
		t.Fatalf("probe: %s", errs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := &frames{cancel: cancel}
	g := &globals{stateDir: c.state, backend: "simulated", simDir: c.simDir, defaultLevel: "warn"}
	var errb strings.Builder
	if err := cmdStatus(ctx, g, []string{"--watch", "--interval", "100ms", "--no-usage"}, out, &errb); err != nil {
		t.Fatalf("status --watch: %v (%s)", err, errb.String())
	}
	got := out.buf.String()
	if n := strings.Count(got, "every 100ms: gpufrac status"); n < 2 {
		t.Errorf("%d frames drawn before the watch ended, want 2:\n%s", n, got)
	}
	if !strings.Contains(got, "writer: ") || !strings.Contains(got, "footprints") {
		t.Errorf("a frame lacks the ledger's writer or its footprints:\n%s", got)
	}
	if err := cmdStatus(context.Background(), g, []string{"--watch", "--json"}, out, &errb); err == nil {
		t.Error("--watch --json was accepted")
	}
}

// A run killed outright leaves its progress behind. status says it is gone in words and in
// --json (where a script would otherwise read a run with jobs running), and so for a zombie
// whose parent has not reaped it yet: a zombie runs nothing and holds no lock.
func TestStatusOfARunThatIsGone(t *testing.T) {
	zombie := exec.Command("sleep", "60")
	if err := zombie.Start(); err != nil {
		t.Skipf("no sleep to start: %v", err)
	}
	t.Cleanup(func() { _ = zombie.Process.Kill(); _ = zombie.Wait() })
	if err := zombie.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Not reaped (no Wait) until the cleanup: a zombie once the kernel has ended it.
	testutil.Eventually(t, 10*time.Second, "the killed sleep to be a zombie", func() bool {
		st, err := procfs.Linux("").Stat(zombie.Process.Pid)
		return err == nil && st.Dead()
	})
	for _, tc := range []struct {
		name string
		pid  int
		gone bool
	}{
		{"running", os.Getpid(), false},
		{"exited", deadPID(t), true},
		{"a zombie", zombie.Process.Pid, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCLI(t)
			l, err := ledger.Open(c.state, ledger.Options{})
			if err != nil {
				t.Fatal(err)
			}
			l.Close()
			data, err := json.Marshal(runstatus.Status{PID: tc.pid, Queue: "q.hcl", Jobs: 2, Running: 1, UpdatedAt: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			for name, content := range map[string][]byte{runstatus.File: data, ledger.LockFile: []byte(strconv.Itoa(tc.pid) + "\n")} {
				if err := os.WriteFile(filepath.Join(c.state, name), content, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, _ := runJSON[statusOutput](t, c, "status", "--json", "--no-usage")
			if got.Run == nil || got.RunGone != tc.gone {
				t.Errorf("status --json: run %+v, run_gone %v; want the run's progress, gone %v", got.Run, got.RunGone, tc.gone)
			}
			code, out, errs := c.run("status", "--no-usage")
			if code != 0 {
				t.Fatalf("status: exit %d: %s", code, errs)
			}
			if said := strings.Contains(out, "is gone (it ended without cleaning up)"); said != tc.gone {
				t.Errorf("status says the run is gone: %v, want %v:\n%s", said, tc.gone, out)
			}
			if said := strings.Contains(out, "which has exited"); said != tc.gone {
				t.Errorf("status says the lock's holder has exited: %v, want %v:\n%s", said, tc.gone, out)
			}
		})
	}
}

// A violation's row gives the peak as the enforcer saw it at its samples, labelled so: the
// attempt's own record (attempts.csv) has the runner's finer sample, often higher, and the two
// once carried the same label.
func TestStatusViolationPeakIsTheEnforcers(t *testing.T) {
	c := newCLI(t)
	l, err := ledger.Open(c.state, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute)
	if err := l.RecordViolation(ledger.Violation{Token: "tok", GPU: "GPU-x", Task: ledger.Task{JobName: "grower", TaskName: "grower"}, Action: "sigkill",
		CapBytes: size.GiB, PeakBytes: 2 * size.GiB, CrossedAt: at, ContainedAt: at.Add(1500 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := c.run("status", "--no-usage")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	header := regexp.MustCompile(`(?m)^  WHEN +GPU +TASK +MODE +CAP +PEAK SEEN +ACTION +CONTAINED IN$`)
	row := regexp.MustCompile(`(?m)^  \S+ \S+ +GPU-x +grower +(\S+ +)?1GiB +2GiB +sigkill +1\.50s$`)
	if !strings.Contains(stdout, "violations (1 kept):") || !header.MatchString(stdout) || !row.MatchString(stdout) {
		t.Fatalf("status:\n%s\nwant the violation under a PEAK SEEN column", stdout)
	}
}

// A frame that cannot be drawn once the watch is running is shown as that frame, and the watch
// goes on to the next; only a first frame that fails ends it. It once ended at the first
// failed read, leaving an operator at a prompt while the ledger's writer replaced a file.
func TestWatchShowsAFailedFrameAndGoesOn(t *testing.T) {
	bad := errors.New("state.json: renamed aside")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	var out strings.Builder
	err := watchStatus(ctx, time.Millisecond, &out, func(w io.Writer) error {
		n++
		switch n {
		case 2:
			return bad
		case 3:
			cancel()
		}
		fmt.Fprintf(w, "frame %d\n", n)
		return nil
	})
	if err != nil || n != 3 || !strings.Contains(out.String(), "frame 1") || !strings.Contains(out.String(), "cannot read the status now: "+bad.Error()) ||
		!strings.Contains(out.String(), "frame 3") {
		t.Fatalf("watch: err %v after %d frames:\n%s\nwant the failed frame shown between frames 1 and 3", err, n, out.String())
	}
	if err := watchStatus(context.Background(), time.Millisecond, io.Discard, func(io.Writer) error { return bad }); !errors.Is(err, bad) {
		t.Fatalf("a first frame that fails: %v, want the error", err)
	}
}

// A reservation's expiry is counted with the grace of the ledger's writer: the plugin's
// reservation_grace may be anything from 10s to 24h, and status counted 2 minutes whatever it
// was, calling a reservation overdue that the plugin keeps for 8 minutes more.
func TestStatusExpiresByTheWritersGrace(t *testing.T) {
	tests := []struct {
		grace time.Duration
		want  string
	}{
		{10 * time.Minute, `in (9m5\ds|10m0s) unless seen`},
		{30 * time.Second, `in (2\ds|30s) unless seen`},
	}
	for _, tc := range tests {
		t.Run(tc.grace.String(), func(t *testing.T) {
			c := newCLI(t)
			l, err := ledger.Open(c.state, ledger.Options{Grace: tc.grace})
			if err != nil {
				t.Fatal(err)
			}
			uuid := "GPU-aaaaaaaa-1111-2222-3333-000000000001"
			if err := l.SyncGPUs([]ledger.GPUInfo{{UUID: uuid, Model: "H100", TotalBytes: 80 * size.GiB, Healthy: true}}); err != nil {
				t.Fatal(err)
			}
			if _, err := l.ReserveIDs([]string{ledger.InstanceID(uuid, 0)}, ledger.Task{JobName: "j", TaskName: "t"}); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := c.run("status", "--no-usage")
			if code != 0 || !regexp.MustCompile(tc.want).MatchString(stdout) {
				t.Fatalf("status: exit %d\n%s%s\nwant the reservation to expire %s", code, stdout, stderr, tc.want)
			}
		})
	}
}

// Status reads: the token scan it runs to measure usage is the enforcer's, but what the enforcer
// does with a scan (marking reservations seen, expiring the unseen, keeping the fence's tables)
// is the ledger's writer's, and a status that did it beside the plugin would race its writes.
func TestStatusWritesNothing(t *testing.T) {
	c := newCLI(t)
	sim, err := gpu.NewSimulated(gpu.SimConfig{Dir: c.simDir, GPUs: []string{c.simGPUs}})
	if err != nil {
		t.Fatal(err)
	}
	devs, err := sim.Devices(t.Context())
	if err != nil || len(devs) != 1 {
		t.Fatalf("devices %v: %v", devs, err)
	}
	uuid := devs[0].UUID
	l, err := ledger.Open(c.state, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SyncGPUs([]ledger.GPUInfo{{UUID: uuid, Model: "H100", TotalBytes: 80 * size.GiB, Healthy: true}}); err != nil {
		t.Fatal(err)
	}
	res, err := l.ReserveIDs([]string{ledger.InstanceID(uuid, 0)}, ledger.Task{JobName: "j", TaskName: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// a process carrying the reservation's token is on the GPU, so usage is measured
	holder := exec.Command("sleep", "60")
	holder.Env = append(os.Environ(), enforcer.EnvReservation+"="+res.Token)
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		holder.Process.Kill()
		holder.Wait()
	})
	if err := sim.SetUsage(uuid, holder.Process.Pid, size.GiB); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(c.state, "fence"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.state, "fence", "table"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := treeOf(t, c.state)
	for _, args := range [][]string{{"status"}, {"status", "--json"}} {
		code, stdout, stderr := c.run(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		if len(args) == 1 && !regexp.MustCompile(`(?m)^  \S+ +j/t +- +1GiB +1GiB +1 +1GiB +nomad `).MatchString(stdout) {
			t.Fatalf("status:\n%s\nwant the reservation's 1GiB of usage measured", stdout)
		}
	}
	if after := treeOf(t, c.state); !maps.Equal(before, after) {
		t.Fatalf("the state directory changed under status:\nbefore %v\nafter  %v", before, after)
	}
}

// treeOf is every entry under dir with its mode, modification time and content.
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		v := fmt.Sprintf("%v %d", info.Mode(), info.ModTime().UnixNano())
		if d.Type().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			v += " " + string(b)
		}
		out[path] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
