package enforcer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// With the fence a leaker fails inside its own process at its cap: no signal, and the violation
// says the fence refused it. Its neighbour is untouched.
// With the library there (as on a real node, and in the demo when it is built) the simulated
// jobs also run under LD_PRELOAD: the preload must be harmless to them.
func TestFencedLeakerFailsInsideItself(t *testing.T) {
	lib := fencetest.Build(t).Library
	for _, tc := range []struct {
		mode    policy.Mode
		library string
	}{{policy.ModeIsolated, ""}, {policy.ModeMPS, ""}, {policy.ModeIsolated, lib}} {
		name := string(tc.mode)
		if tc.library != "" {
			name += "/preloaded"
		}
		t.Run(name, func(t *testing.T) {
			mode := tc.mode
			dir := t.TempDir()
			// The fence counts allocations, not the context (500MiB here): the watchdog's allowance
			// must cover it, as DefaultAllowance covers a real CUDA context.
			r := newRig(t, mode, func(c *Config) {
				c.Fence, c.Allowance = FenceConfig{Dir: dir, Library: tc.library}, 640*size.MiB
			})
			r.start()
			nb, _ := r.neighbour("7")
			res := r.reserve(2*size.GiB, "leaker")
			r.syncFence()
			if o := r.enf.EnvOptions(r.uuid); (o.FenceLibrary != "") != (tc.library != "") {
				t.Fatalf("env options %+v: the task's LD_PRELOAD should follow the library (%q)", o, tc.library)
			}
			// No MPS pinned limit here: the fence alone must hold it.
			leak := r.runEnv(res, "leaker", []string{EnvMPSMemLimit + "="}, "--peak", "1GiB", "--ramp", "50ms", "--leak-to", "20GiB", "--leak-rate", "8GiB")
			if code := leak.wait(t); code == 0 || leak.killedBy() != 0 {
				t.Fatalf("leaker: exit %d, signal %v; want a failure of its own; output:\n%s", code, leak.killedBy(), leak.out.String())
			}
			if !strings.Contains(leak.out.String(), "gpufrac fence") {
				t.Fatalf("the leaker's own error should name the fence:\n%s", leak.out.String())
			}
			v := r.violation(res.Token)
			if v.Action != ActionOOMInProcess || !strings.Contains(v.Detail, "allocation fence refused") || v.Mode != mode {
				t.Fatalf("violation %+v", v)
			}
			if v.PeakBytes > 2*size.GiB+r.cfg.Allowance {
				t.Fatalf("peak %s: past the cap and the context allowance", v.PeakBytes)
			}
			if s := r.sent(leak.cmd.Process.Pid); len(s) != 0 {
				t.Fatalf("the watchdog signalled a fenced leaker: %v", s)
			}
			nb.checkResult(t, 7)
			if s := r.sent(nb.cmd.Process.Pid); len(s) != 0 {
				t.Fatalf("neighbour was sent %v", s)
			}
		})
	}
}

// The table follows the ledger: a released reservation leaves it on the next pass.
func TestFenceTableFollowsTheLedger(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, policy.ModeIsolated, func(c *Config) { c.Fence = FenceConfig{Dir: dir} })
	a := r.reserve(2*size.GiB, "a")
	b := r.reserve(3*size.GiB, "b")
	r.syncFence()
	if o := r.enf.EnvOptions(r.uuid); o.FenceDir != dir || o.FenceLibrary != "" {
		t.Fatalf("env options %+v: want the fence directory and no library (simulated GPUs)", o)
	}
	if err := r.led.Release(a.Token, "done"); err != nil {
		t.Fatal(err)
	}
	r.enf.Tick(t.Context())
	c, err := fence.Attach(dir, r.uuid, b.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Detach()
	if capBytes, _, ok := c.View(); !ok || capBytes != 3*size.GiB {
		t.Fatalf("b's cap in the fence: %s %v", capBytes, ok)
	}
	if _, err := fence.Attach(dir, r.uuid, a.Token); err == nil {
		t.Fatal("a released reservation still has a task in the fence")
	}
}

// A task that breaks its cap before any token scan is still recorded under its names, read off
// its processes (the fleet's controller needs them to find the job).
func TestViolationBeforeTheFirstScanIsAttributed(t *testing.T) {
	r := newRig(t, policy.ModeIsolated, func(c *Config) { c.ScanInterval = time.Hour })
	r.enf.lastScan = time.Now() // the scan is not due for an hour
	r.start()
	res := r.reserve(2*size.GiB, "early")
	leak := r.run(res, "early", "--peak", "1GiB", "--ramp", "10ms", "--leak-to", "20GiB", "--leak-rate", "16GiB")
	leak.wait(t)
	v := r.violation(res.Token)
	if v.Task.JobName != "early" || v.Task.TaskName != "main" || v.Task.Template != "tmpl-early" {
		t.Fatalf("violation task %+v: want the names from the process environment", v.Task)
	}
}

// A control copy the enforcer cannot read is moved aside and a fresh one made: one bad file must
// not leave a GPU unfenced for good.
func TestUnreadableFenceTableIsReplaced(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, policy.ModeIsolated, func(c *Config) { c.Fence = FenceConfig{Dir: dir} })
	if err := os.WriteFile(fence.ControlPath(dir, r.uuid), []byte("not a table"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := r.reserve(2*size.GiB, "a")
	st, _ := r.led.State(r.uuid)
	if err := r.enf.SyncFence(st); err != nil {
		t.Fatalf("sync over an unreadable table: %v", err)
	}
	aside, _ := filepath.Glob(fence.ControlPath(dir, r.uuid) + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("moved aside: %v, want the bad table kept beside the new one", aside)
	}
	c, err := fence.Attach(dir, r.uuid, res.Token)
	if err != nil {
		t.Fatalf("the new table: %v", err)
	}
	c.Detach()
}

// On simulated GPUs the fence is on with or without its library; where the library is found
// (beside the executable, as `make build` leaves it) tasks get LD_PRELOAD as on a real node.
func TestSimulatedTasksGetThePreloadWhenTheLibraryIsThere(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	beside := filepath.Join(filepath.Dir(exe), fence.LibraryName)
	if _, err := os.Stat(beside); err == nil {
		t.Fatalf("%s exists before the test: cannot tell the two cases apart", beside)
	}
	dir := t.TempDir()
	cfg, line, err := ResolveFence(FenceAuto, "", dir, true)
	if err != nil || cfg.Dir != dir || cfg.Library != "" {
		t.Fatalf("without the library: %+v %q %v; want the tables alone", cfg, line, err)
	}
	lib, err := os.ReadFile(fencetest.Build(t).Library)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(beside, lib, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(beside) })
	cfg, line, err = ResolveFence(FenceAuto, "", dir, true)
	if err != nil || cfg.Dir != dir || cfg.Library != beside {
		t.Fatalf("with the library beside the executable: %+v %q %v; want it preloaded", cfg, line, err)
	}
}

// A watchdog pass reads every GPU's state at its start and writes the fence tables later; a task
// admitted in between must not be dropped from its table by that write. On the H200 (2026-12-03,
// seed 2) it was: the watchdog then passed 50 times a second, a borrower's process found no
// task in the table, ran unfenced and was stopped at its guarantee ("borrowed 0B"). The write
// takes the ledger's state at the write, whatever state the caller read.
func TestStaleStateDoesNotDropANewTask(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, policy.ModeIsolated, func(c *Config) { c.Fence = FenceConfig{Dir: dir} })
	old := r.reserve(2*size.GiB, "old")
	stale, err := r.led.State(r.uuid) // what a pass read before the admission below
	if err != nil {
		t.Fatal(err)
	}
	if err := r.enf.SyncFence(stale); err != nil {
		t.Fatal(err)
	}
	admitted := r.reserve(3*size.GiB, "new")
	cur, err := r.led.State(r.uuid)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.enf.SyncFence(cur); err != nil { // the admission's own write
		t.Fatal(err)
	}
	if err := r.enf.SyncFence(stale); err != nil { // the pass's late write of what it read
		t.Fatal(err)
	}
	for _, res := range []struct {
		token string
		cap   size.Bytes
	}{{old.Token, 2 * size.GiB}, {admitted.Token, 3 * size.GiB}} {
		c, err := fence.Attach(dir, r.uuid, res.token)
		if err != nil {
			t.Fatalf("task of cap %s is not in the fence table after a write of a stale state: %v", res.cap, err)
		}
		capBytes, _, ok := c.View()
		c.Detach()
		if !ok || capBytes != res.cap {
			t.Fatalf("cap in the fence: %s %v, want %s", capBytes, ok, res.cap)
		}
	}
}

// A process SIGKILLed while its allocation waited for borrowable memory does not freeze its GPU:
// what admission reads (FenceUse) shows no wait, though no watchdog pass has reaped its slot.
// On an H200 a queue's last jobs were never admitted again after such a kill.
func TestKilledWaiterDoesNotFreezeTheGPU(t *testing.T) {
	k := fencetest.Build(t)
	dir := t.TempDir()
	r := newRig(t, policy.ModeIsolated, func(c *Config) { c.Fence = FenceConfig{Dir: dir, BorrowWait: time.Minute} })
	borrower, owner, st := borrowerBesideOwner(r)
	o, err := fence.Attach(dir, r.uuid, owner.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Detach()
	if got := o.Charge(size.GiB); got != fence.Charged {
		t.Fatalf("the owner's first GiB: %v", got)
	}
	victim := k.StartTool(t)
	for _, c := range []string{"attach " + fence.Path(dir, r.uuid) + " " + borrower.Token, fmt.Sprintf("charge %d", st.BudgetBytes-owner.CapBytes)} {
		if got := victim.Do(c); !strings.HasPrefix(got, "ok") {
			t.Fatalf("%s: %q", c, got)
		}
	}
	victim.Send("charge 1G") // only the owner's guarantee is left: it waits
	testutil.Eventually(t, waitLong, "the borrower's allocation waiting", func() bool {
		_, waiting := r.enf.FenceUse(r.uuid)
		return waiting
	})
	victim.Kill()
	if _, waiting := r.enf.FenceUse(r.uuid); waiting {
		s, _ := r.enf.fence.view(r.uuid)
		t.Fatalf("a dead process's wait freezes the GPU: %+v", s.Procs)
	}
	if u, ok := snapTask(r, borrower.Token); !ok || u.Used != 0 || u.Procs != 0 {
		t.Fatalf("the dead borrower's task: %+v (%v), want its slot given back", u, ok)
	}
}

// A borrower that writes a huge use of its own into the fence table (every task maps it
// writable) does not buy itself room with the watchdog: what it may have borrowed is bounded
// by its reservation's limit, which the ledger holds, so NVML past cap + (limit - cap) +
// allowance still stops it.
func TestBorrowerThatLiesInTheFenceTableIsStillStopped(t *testing.T) {
	k := fencetest.Build(t)
	dir := t.TempDir()
	r := newRig(t, policy.ModeIsolated, func(c *Config) {
		c.Fence, c.Allowance = FenceConfig{Dir: dir}, 640*size.MiB
	})
	r.start()
	liar, err := r.led.ReserveBytes(r.uuid, 2*size.GiB, ledger.Task{}, ledger.WithLimit(4*size.GiB))
	if err != nil {
		t.Fatal(err)
	}
	r.syncFence()
	tenant := k.StartTool(t)
	if got := tenant.Do("tamper " + fence.AccountPath(dir, liar.Token, r.uuid) + " used 60G " + liar.Token); got != "ok" {
		t.Fatalf("tamper: %q", got)
	}
	// Its process allocates around the fence (no fence directory), as a liar would.
	j := r.runEnv(liar, "liar", []string{fence.EnvDir + "="}, "--peak", "10GiB", "--ramp", "200ms", "--hold", "2m")
	if code := j.wait(t); code == 0 || j.killedBy() != syscall.SIGKILL {
		t.Fatalf("the liar: exit %d, signal %v; want stopped by SIGKILL; output:\n%s", code, j.killedBy(), j.out.String())
	}
	if v := r.violation(liar.Token); v.Action != ActionSIGKILL {
		t.Fatalf("the liar's violation: %+v", v)
	}
}

// A borrowing rule or fence mode is one of its constants; anything else is refused with an
// error that names the bad value and what would do.
func TestBorrowRuleAndFenceModeCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		bad  string // "" = valid
		want []string
	}{
		{name: "off", err: BorrowOff.Check()},
		{name: "lend", err: BorrowLend.Check()},
		{name: "auto is the front ends', not a rule", err: BorrowRule("auto").Check(), bad: `"auto"`, want: []string{"off", "now", "wait", "lend"}},
		{name: "case matters", err: BorrowRule("Wait").Check(), bad: `"Wait"`},
		{name: "empty rule", err: BorrowRule("").Check(), bad: `""`},
		{name: "fence unset is auto", err: FenceMode("").Check()},
		{name: "fence on", err: FenceOn.Check()},
		{name: "fence yes", err: FenceMode("yes").Check(), bad: `"yes"`, want: []string{"auto", "on", "off"}},
	} {
		if tc.bad == "" {
			if tc.err != nil {
				t.Errorf("%s: %v, want valid", tc.name, tc.err)
			}
			continue
		}
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.bad) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, tc.err, tc.bad)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(tc.err.Error(), w) {
				t.Errorf("%s: %v does not list %q", tc.name, tc.err, w)
			}
		}
	}
}

// Lend's grace is the borrower hold's bound: an owner waits for a borrower no longer than the
// same job would have waited to be admitted under wait.
func TestLendGraceIsTheHoldsBound(t *testing.T) {
	if DefaultLendGrace != policy.DefaultHold.Bound {
		t.Fatalf("DefaultLendGrace %s, policy.DefaultHold.Bound %s", DefaultLendGrace, policy.DefaultHold.Bound)
	}
}

// The fence learns what a process's context is taken to hold (the watchdog's allowance) and
// what the GPU holds past its budget (the headroom, less nothing: no unmanaged use here), so its
// borrowers leave the GPU room for the contexts on top of the guarantees.
func TestFenceKnowsContextsAndSpare(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, policy.ModeIsolated, func(c *Config) { c.Fence = FenceConfig{Dir: dir, BorrowWait: time.Minute} })
	borrowerBesideOwner(r)
	st, err := r.led.State(r.uuid)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := r.enf.fence.view(r.uuid)
	if !ok {
		t.Fatal("no fence table after a sync")
	}
	if s.Context != r.cfg.Allowance || s.Spare != st.TotalBytes-st.BudgetBytes || s.Spare == 0 {
		t.Fatalf("fence context %s, spare %s; want the allowance %s and the headroom %s", s.Context, s.Spare, r.cfg.Allowance, st.TotalBytes-st.BudgetBytes)
	}
}

// A staged reservation holds its process's context and first blocks, and the fence counts the
// context on top of the guarantee it is given: the fence's guarantee is the reservation less the
// context, so a borrower's sums count the staged job at its reservation, not a context more.
func TestStagedGuaranteeLeavesTheContextOut(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, policy.ModeIsolated, func(c *Config) { c.Fence = FenceConfig{Dir: dir, BorrowWait: time.Minute} })
	res, err := r.led.ReserveBytes(r.uuid, size.GiB, ledger.Task{}, ledger.WithStage(20*size.GiB))
	if err != nil {
		t.Fatal(err)
	}
	r.syncFence()
	u, ok := snapTask(r, res.Token)
	if !ok {
		t.Fatal("the staged task is not in the fence's table")
	}
	if want := res.CapBytes - r.cfg.Allowance; u.Cap != want || u.Limit != want || u.Stage != 20*size.GiB {
		t.Fatalf("staged task in the fence: cap %s, limit %s, stage %s; want %s, %s, 20GiB", u.Cap, u.Limit, u.Stage, want, want)
	}
}

func TestStagedCap(t *testing.T) {
	cases := []struct{ cap, ctx, want size.Bytes }{
		{size.GiB, 768 * size.MiB, 256 * size.MiB},
		{768 * size.MiB, 768 * size.MiB, 768 * size.MiB}, // nothing left for a first block: whole
		{768*size.MiB + stagedFirst, 768 * size.MiB, stagedFirst},
		{size.GiB, 0, size.GiB},
	}
	for _, c := range cases {
		if got := stagedCap(c.cap, c.ctx); got != c.want {
			t.Errorf("stagedCap(%s, %s) = %s, want %s", c.cap, c.ctx, got, c.want)
		}
	}
}

// The fence counts a task's contexts by the processes the watchdog sees of it on the GPU
// (fence.Task.Seen), which its pass hands the fence's table: a task writes its own count.
func TestFenceCountsTheProcessesTheWatchdogSaw(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, policy.ModeIsolated, func(c *Config) { c.Fence = FenceConfig{Dir: dir, BorrowWait: time.Minute} })
	res := r.reserve(4*size.GiB, "two")
	for range 2 {
		r.run(res, "two", "--peak", "1GiB", "--ramp", "10ms", "--hold", "1m")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.enf.Tick(t.Context())
		if u, ok := snapTask(r, res.Token); ok && u.Seen == 2 {
			break
		}
		if time.Now().After(deadline) {
			u, _ := snapTask(r, res.Token)
			t.Fatalf("the fence's task after the watchdog's passes: %+v, want 2 processes seen", u)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A staged task whose promise is withdrawn (ledger.Withdraw: gpufrac run under MPS, before it
// stops a staged job for a borrower) keeps its guarantee in the fence, so the table takes the
// change while a borrower waits (a whole unit would be a new guarantee, refused then), and the
// allocation it waits with fails inside its process: it exits by itself, unsignalled, and the
// borrower is served once it is gone.
func TestWithdrawnStagedTaskFailsItsWaitInsideItself(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, policy.ModeIsolated, func(c *Config) {
		c.Fence, c.Allowance = FenceConfig{Dir: dir, BorrowWait: time.Minute}, 640*size.MiB // a simulated process's context fits
	})
	r.start()
	st, err := r.led.State(r.uuid)
	if err != nil {
		t.Fatal(err)
	}
	staged, err := r.led.ReserveBytes(r.uuid, size.GiB, ledger.Task{}, ledger.WithStage(20*size.GiB))
	if err != nil {
		t.Fatal(err)
	}
	borrower, err := r.led.ReserveBytes(r.uuid, 2*size.GiB, ledger.Task{}, ledger.WithLimit(st.BudgetBytes))
	if err != nil {
		t.Fatal(err)
	}
	r.syncFence()
	before, _ := snapTask(r, staged.Token)
	s := r.run(staged, "staged", "--peak", "10GiB", "--ramp", "50ms", "--hold", "100ms")
	waitTask(r, staged.Token, "the staged task waiting for its grant", func(tu fence.TaskUse) bool { return tu.StageWaiting })
	// The whole budget (its context unfenced): it waits for what the staged task holds.
	b := r.run(borrower, "borrower", "--peak", st.BudgetBytes.String(), "--ramp", "200ms", "--hold", "100ms", "--seed", "3")
	waitTask(r, borrower.Token, "the borrower waiting", func(tu fence.TaskUse) bool { return tu.Waiting })
	if _, err := r.led.Withdraw(staged.Token); err != nil {
		t.Fatal(err)
	}
	r.syncFence()
	if u, ok := snapTask(r, staged.Token); !ok || u.Cap != before.Cap || u.Limit != before.Cap || u.Stage != 0 {
		t.Fatalf("withdrawn in the fence: %+v; want its staged guarantee %s, nothing to wait for", u, before.Cap)
	}
	if code := s.wait(t); code == 0 || s.killedBy() != 0 {
		t.Fatalf("the withdrawn task: exit %d, signal %v; want a failure inside itself; output:\n%s", code, s.killedBy(), s.out.String())
	}
	if sig := r.sent(s.cmd.Process.Pid); len(sig) != 0 {
		t.Fatalf("the withdrawn task was signalled: %v", sig)
	}
	if err := r.led.Release(staged.Token, "unstaged"); err != nil {
		t.Fatal(err)
	}
	r.syncFence()
	b.checkResult(t, 3)
}

// The fence's directories get the modes their readers need and no more: the tables and the
// tasks' lock directories private to the enforcer's user under gpufrac run and open to tasks of
// other users under the plugin (Shared), and the enforcer's claims on the GPUs private always, so
// no other user can hold a lock there that keeps the next enforcer off a GPU.
func TestFenceDirectoryModes(t *testing.T) {
	if !fence.Available {
		t.Skip("the fence needs cgo")
	}
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared %v", shared), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "fence")
			if _, err := newFences(FenceConfig{Dir: dir, Shared: shared}, hclog.NewNullLogger()); err != nil {
				t.Fatal(err)
			}
			open := os.FileMode(0o700)
			if shared {
				open = 0o755
			}
			for d, want := range map[string]os.FileMode{dir: open, fence.LiveRoot(dir): open,
				fence.ControlDir(dir): 0o755, fence.EnforcerDir(dir): 0o700} {
				if st, err := os.Stat(d); err != nil || st.Mode().Perm() != want {
					t.Errorf("%s: %v %v, want mode %v", d, st, err, want)
				}
			}
		})
	}
}

// The plugin restarts (a Nomad client upgrade or restart) while tasks run: the old enforcer
// shuts down, and a new enforcer and ledger open the same directories and place the
// reservations that still live. A task's process that attached before stays fenced: what it
// allocates afterwards is charged to its task where the new enforcer reads, refused past the
// task's limit, and counted in what borrowers hold (the ledger's, for admission); a process that
// attaches afterwards lands in the same task.
func TestRestartKeepsRunningTasksFenced(t *testing.T) {
	k := fencetest.Build(t)
	dir := t.TempDir()
	r := newRig(t, policy.ModeIsolated, func(c *Config) { c.Fence = FenceConfig{Dir: dir} })
	r.start()
	borrower, owner, st := borrowerBesideOwner(r)
	path := fence.Path(dir, r.uuid)
	process := func(token, charge string) *fencetest.Proc {
		p := k.StartTool(t)
		for _, c := range []string{"attach " + path + " " + token, "charge " + charge} {
			if got := p.Do(c); !strings.HasPrefix(got, "ok") {
				t.Fatalf("%s: %q", c, got)
			}
		}
		return p
	}
	before := process(borrower.Token, "10G")
	process(owner.Token, "1G")

	r.stop()
	if err := r.enf.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	r.led.Close()
	r.openLedger()
	r.newEnforcer()
	r.start()
	waitTask(r, borrower.Token, "the new enforcer reading the running tasks", func(u fence.TaskUse) bool { return u.Used == 10*size.GiB && u.Procs == 1 })

	want := func(p *fencetest.Proc, c, answer string) {
		t.Helper()
		if got := p.Do(c); got != answer {
			t.Fatalf("%s: %q, want %q", c, got, answer)
		}
	}
	want(before, "charge 5G", "ok")
	after := process(borrower.Token, "1G")
	testutil.Eventually(t, waitLong, "the ledger counting what the borrower holds", func() bool {
		s, ok := r.enf.fence.view(r.uuid)
		cur, err := r.led.State(r.uuid)
		return ok && err == nil && s.Borrowed() >= 14*size.GiB && cur.BorrowedBytes == s.Borrowed()
	})
	if u, _ := snapTask(r, borrower.Token); u.Used != 16*size.GiB || u.Procs != 2 {
		t.Fatalf("the borrower's task after the restart: %+v, want 16 GiB in 2 processes", u)
	}
	if o, _ := snapTask(r, owner.Token); o.Used != size.GiB || o.Procs != 1 {
		t.Fatalf("the owner's task after the restart: %+v", o)
	}
	// What is left past the owner's guarantee is less than the budget less the borrower's use.
	past := fmt.Sprint(uint64(st.BudgetBytes - owner.CapBytes - 16*size.GiB + 1))
	want(before, "charge "+past, "refused")
	want(after, "charge "+past, "refused")
}

// Admission counts what a task holds past its guarantee even where the fence cannot read its
// accounting file: from NVML's view of its processes, unclamped by its limit (no task wrote it).
func TestBorrowedSeenCountsUnreadTasksFromNVML(t *testing.T) {
	procs := func(bytes ...size.Bytes) []seenProc {
		var out []seenProc
		for _, b := range bytes {
			out = append(out, seenProc{ProcUsage: ProcUsage{Bytes: b}})
		}
		return out
	}
	read := fence.TaskUse{Token: "read", Cap: 2 * size.GiB, Limit: 10 * size.GiB, Used: 3 * size.GiB}
	for _, tc := range []struct {
		name  string
		task  fence.TaskUse
		procs []seenProc
		want  size.Bytes
	}{
		{"a task read from its file counts what it wrote, not NVML's", fence.TaskUse{Token: "t", Cap: 2 * size.GiB, Limit: 10 * size.GiB, Used: 2 * size.GiB}, procs(5 * size.GiB), 0},
		{"an unopened task past its guarantee", fence.TaskUse{Token: "t", Cap: 2 * size.GiB, Limit: 10 * size.GiB, Unopened: true, Unlocked: true}, procs(2*size.GiB, 1536*size.MiB), 1536 * size.MiB},
		{"an unreadable task past its limit counts all of it", fence.TaskUse{Token: "t", Cap: 2 * size.GiB, Limit: 3 * size.GiB, Unreadable: true, Unlocked: true}, procs(6 * size.GiB), 4 * size.GiB},
		{"an unopened task within its guarantee", fence.TaskUse{Token: "t", Cap: 2 * size.GiB, Limit: 10 * size.GiB, Unopened: true, Unlocked: true}, procs(size.GiB), 0},
		{"an unopened task NVML sees nothing of", fence.TaskUse{Token: "t", Cap: 2 * size.GiB, Unopened: true, Unlocked: true}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := fence.Snapshot{Tasks: []fence.TaskUse{read, tc.task}}
			got := borrowedSeen(snap, map[string][]seenProc{"t": tc.procs, "read": procs(9 * size.GiB)})
			if want := size.GiB + tc.want; got != want {
				t.Fatalf("borrowed %s, want %s (1 GiB of it the task read from its file)", got, want)
			}
		})
	}
}
