package enforcer

import (
	"fmt"
	"strings"
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

// The bound is the longest one honest allocation keeps its flag up: its grace, then the longer
// of the fence's two waits, and the margin for the passes that see it.
func TestClaimBound(t *testing.T) {
	for _, tc := range []struct {
		cfg  FenceConfig
		want time.Duration
	}{
		{FenceConfig{}, fence.OwedWait + claimMargin},
		{FenceConfig{BorrowWait: time.Minute}, fence.OwedWait + claimMargin},
		{FenceConfig{BorrowWait: 10 * time.Minute}, 10*time.Minute + claimMargin},
		{FenceConfig{BorrowWait: DefaultBorrowWait, LendGrace: DefaultLendGrace}, DefaultLendGrace + DefaultBorrowWait + claimMargin},
	} {
		if got := claimBound(tc.cfg); got != tc.want {
			t.Errorf("bound of %+v: %s, want %s", tc.cfg, got, tc.want)
		}
	}
}

// A task's waiting flag counts for as long as an honest wait could keep it up, then not until
// it is down; the time it counts is earned back only as fast as the flag stays down, so a task
// that drops its flag for a pass now and then buys no fresh bound each time. Each step moves
// the clock, then a pass sees the flag; want is whether the flag is heeded after it.
func TestWaitsCountForAsLongAsAnHonestWaitCould(t *testing.T) {
	cfg := FenceConfig{BorrowWait: time.Minute}
	bound := claimBound(cfg)
	type step struct {
		after  time.Duration
		up     bool
		heeded bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
		warns int
	}{
		{name: "an honest wait within the bound counts all along",
			steps: []step{{0, true, true}, {bound / 2, true, true}, {bound/2 - time.Second, true, true}, {time.Second, false, true}}},
		{name: "a flag up for the bound stops counting, and is heeded again once down",
			steps: []step{{0, true, true}, {bound - time.Second, true, true}, {time.Second, true, false}, {time.Hour, true, false},
				{time.Second, false, true}}, warns: 1},
		{name: "a flag dropped for a pass before the bound buys back only that pass",
			steps: []step{{0, true, true}, {bound - time.Second, true, true}, {time.Second, false, true}, {time.Second, true, true},
				{time.Second, true, false}, {time.Second, false, true}, {time.Second, true, true}, {time.Second, true, false}}, warns: 1},
		{name: "a flag down as long as the bound counts whole again",
			steps: []step{{0, true, true}, {bound, true, false}, {time.Second, false, true}, {bound, false, true},
				{time.Second, true, true}, {bound - 2*time.Second, true, true}, {2 * time.Second, true, false}}, warns: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs testutil.Buffer
			f := &fences{cfg: cfg, log: hclog.New(&hclog.LoggerOptions{Output: &logs}), claims: map[string]map[string]*claim{}}
			res := []ledger.Reservation{{Token: "A", Task: ledger.Task{JobName: "liar", TaskName: "main"}}, {Token: "B"}}
			now, heeded := at0, true
			for i, s := range tc.steps {
				now = now.Add(s.after)
				snap := fence.Snapshot{Tasks: []fence.TaskUse{{Token: "A", Waiting: s.up}, {Token: "B"}}}
				changed := f.heed("G", snap, res, nil, false, now)
				f.mu.Lock()
				got, b := !f.claimOf("G", "A").unheeded, f.claimOf("G", "B").unheeded
				f.mu.Unlock()
				if got != s.heeded || b {
					t.Fatalf("step %d (+%s, flag up %v): A heeded %v, want %v; B unheeded %v", i, s.after, s.up, got, s.heeded, b)
				}
				if changed != (got != heeded) {
					t.Fatalf("step %d: changed %v, but heeded went from %v to %v", i, changed, heeded, got)
				}
				heeded = got
			}
			if n := strings.Count(logs.String(), "[WARN]"); n != tc.warns || n > 0 && !strings.Contains(logs.String(), "liar") {
				t.Fatalf("log:\n%s\nwant %d warnings, naming the task", logs.String(), tc.warns)
			}
			// The task ends: what was carried for it goes.
			f.heed("G", fence.Snapshot{Tasks: []fence.TaskUse{{Token: "B"}}}, res, nil, false, now)
			if _, ok := f.claims["G"]["A"]; ok {
				t.Fatal("an ended task's flag is still carried")
			}
		})
	}
}

// A borrower's allocation that waits keeps new guarantees off its GPU: the ledger admits nothing
// there and the fence places nothing. The wait here is real, and in its own time short, but the
// enforcer's clock is moved past the longest an honest wait lasts: from then on the task's wait
// holds nothing up (the ledger, FenceUse, FenceWaiters, the fence's placing of guarantees), a
// warning names it once, and its flag counts again once it is down. Before, it held admission on
// the GPU for as long as the flag stayed up.
func TestWaitPastItsBoundStopsHoldingAdmission(t *testing.T) {
	k := fencetest.Build(t)
	dir := t.TempDir()
	clock := testutil.NewClock(time.Now())
	cfg := FenceConfig{Dir: dir, BorrowWait: time.Minute}
	r := newRig(t, policy.ModeIsolated, func(c *Config) { c.Fence, c.Now = cfg, clock.Now })
	borrower, owner, st := borrowerBesideOwner(r)
	o := attach(r, dir, owner.Token)
	if got := o.Charge(size.GiB); got != fence.Charged { // it runs, and may free: the borrower may wait
		t.Fatalf("the owner's first GiB: %v", got)
	}
	// The borrower leaves 4 GiB of the budget free and asks for 8.
	waiter := k.StartTool(t)
	for _, c := range []string{"attach " + fence.Path(dir, r.uuid) + " " + borrower.Token,
		fmt.Sprintf("charge %d", st.BudgetBytes-owner.CapBytes-4*size.GiB)} {
		if got := waiter.Do(c); !strings.HasPrefix(got, "ok") {
			t.Fatalf("%s: %q", c, got)
		}
	}
	waiter.Send("charge 8G")
	testutil.Eventually(t, waitLong, "the borrower's allocation waiting", func() bool {
		_, waiting := r.enf.FenceUse(r.uuid)
		return waiting
	})
	pass := func() ledger.GPUState {
		t.Helper()
		r.enf.Tick(t.Context())
		st, err := r.led.State(r.uuid)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := pass(); !st.BorrowWaiting {
		t.Fatalf("the ledger while the borrower waits: %+v, want it waiting", st)
	}
	clock.Advance(claimBound(cfg) - time.Second)
	if st := pass(); !st.BorrowWaiting {
		t.Fatal("the ledger within the bound: want the wait still holding admission")
	}
	if _, err := r.led.ReserveBytes(r.uuid, size.GiB, ledger.Task{}); err == nil {
		t.Fatal("a reservation beside a wait within its bound: want it refused")
	}
	clock.Advance(time.Second)
	if st := pass(); st.BorrowWaiting {
		t.Fatal("the ledger past the bound: want the wait no longer holding admission")
	}
	if _, waiting := r.enf.FenceUse(r.uuid); waiting {
		t.Fatal("FenceUse past the bound: want no wait")
	}
	if waiting, _ := r.enf.FenceWaiters(r.uuid); len(waiting) != 0 {
		t.Fatalf("FenceWaiters past the bound: %v, want none", waiting)
	}
	if u, ok := snapTask(r, borrower.Token); !ok || !u.Waiting || !u.Unheeded {
		t.Fatalf("the borrower in the fence: %+v, want still waiting and unheeded", u)
	}
	// A newcomer is admitted, and the fence places its guarantee beside the wait.
	if _, err := r.led.ReserveBytes(r.uuid, size.GiB, ledger.Task{}); err != nil {
		t.Fatalf("a reservation past the bound: %v", err)
	}
	r.syncFence()
	if n := strings.Count(r.logs.String(), "longer than any honest wait lasts"); n != 1 {
		t.Fatalf("%d warnings, want one; log:\n%s", n, r.logs.String())
	}
	// Its flag down (the process gone), its waits count again.
	waiter.Kill()
	testutil.Eventually(t, waitLong, "the borrower's flag heeded again", func() bool {
		pass()
		u, ok := snapTask(r, borrower.Token)
		return ok && !u.Waiting && !u.Unheeded
	})
}

// A task may write its own file's sums too, and an owed count made up there refuses every
// borrowing allocation on the GPU (the fence's borrowers read the sums, not the process slots).
// The enforcer reads the sums as a wait as well: past the bound it stops heeding them, and a
// borrower is served. Before, the borrower was refused for as long as the count stayed up.
func TestOwedCountPastItsBoundRefusesNoBorrower(t *testing.T) {
	k := fencetest.Build(t)
	dir := t.TempDir()
	clock := testutil.NewClock(time.Now())
	cfg := FenceConfig{Dir: dir}
	r := newRig(t, policy.ModeIsolated, func(c *Config) { c.Fence, c.Now = cfg, clock.Now })
	borrower, liar, _ := borrowerBeside(r, 4*size.GiB, "liar")
	tamper(r, k.StartTool(t), dir, liar.Token, "nowed", "1")
	b := attach(r, dir, borrower.Token)
	r.enf.Tick(t.Context())
	if got := b.Charge(3 * size.GiB); got != fence.Refused {
		t.Fatalf("a borrow beside the made-up owed count: %v, want Refused", got)
	}
	clock.Advance(claimBound(cfg))
	r.enf.Tick(t.Context())
	if u, ok := snapTask(r, liar.Token); !ok || !u.Owed || !u.Unheeded {
		t.Fatalf("the liar in the fence past the bound: %+v, want owed and unheeded", u)
	}
	if got := b.Charge(3 * size.GiB); got != fence.Charged {
		t.Fatalf("a borrow beside the made-up owed count past its bound: %v, want Charged", got)
	}
}

// The passes come at irregular moments, within a quarter of the interval either way: a task
// that timed its flags to the passes of an exact interval could keep them down at every reading.
func TestPassesAreJittered(t *testing.T) {
	const iv = 100 * time.Millisecond
	seen := map[time.Duration]bool{}
	for range 200 {
		d := jittered(iv)
		if d < iv*3/4 || d > iv*5/4 {
			t.Fatalf("jittered(%s) = %s, want within a quarter of it", iv, d)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Fatalf("200 passes came at %d distinct intervals, want them spread", len(seen))
	}
}

// A pass that finds none of a borrower's processes on the GPU proves nothing of a borrow made
// after it read NVML, and before an owner's wait began any task could borrow: a process of B's
// that made its context after the last pass's NVML read, and borrowed before an owner's wait
// began in the same pass, is on no list yet, though it holds what it borrowed. Only passes that
// saw an owner's wait count towards the mark: the second of them read NVML after the first saw
// the wait, so after every borrow that could come before it. Before, passes that found none of
// B's processes before any owner waited counted too, and B was marked at the first pass that saw
// the wait, its new process's borrow hidden from the owner, who was served into memory that
// process held.
func TestUnseenCountsOnlyPassesThatSawTheWait(t *testing.T) {
	f := &fences{cfg: FenceConfig{}, log: hclog.NewNullLogger(), claims: map[string]map[string]*claim{}}
	res := []ledger.Reservation{{Token: "O"}, {Token: "B"}}
	borrower := fence.TaskUse{Token: "B", Cap: 2 * size.GiB, Limit: 70 * size.GiB, Used: 10 * size.GiB}
	now := at0
	for i, tc := range []struct {
		owed, there, unseen bool
	}{
		{false, false, false}, // B between processes: nothing of it on the GPU
		{false, false, false},
		{false, false, false},
		{true, false, false}, // its new process borrowed after this pass's NVML read, then O waited
		{true, true, false},  // the next pass finds it
		{true, false, false},
		{true, false, true}, // two passes of the wait in a row found none
		{false, false, false},
	} {
		now = now.Add(100 * time.Millisecond)
		snap := fence.Snapshot{Tasks: []fence.TaskUse{{Token: "O", Cap: 8 * size.GiB, Owed: tc.owed}, borrower}}
		procs := map[string][]seenProc{}
		if tc.there {
			procs["B"] = []seenProc{{ProcUsage: ProcUsage{PID: 7, Token: "B", Bytes: 10 * size.GiB}}}
		}
		f.heed("G", snap, res, procs, true, now)
		f.mu.Lock()
		got := f.claimOf("G", "B").unseen
		f.mu.Unlock()
		if (got != 0) != tc.unseen || tc.unseen && got != borrower.Cap {
			t.Fatalf("pass %d (owner waits %v, B on the GPU %v): B unseen %v, want %v", i, tc.owed, tc.there, got, tc.unseen)
		}
	}
}

// A process NVML lists at 0 bytes is one whose memory it cannot attribute (gpu: some virtualised
// setups), not one that holds nothing: what it shows is no bound on the task's borrow, and its
// task is never marked, however many passes of a wait go by.
func TestUnseenNeedsWhatNVMLShows(t *testing.T) {
	f := &fences{cfg: FenceConfig{}, log: hclog.NewNullLogger(), claims: map[string]map[string]*claim{}}
	res := []ledger.Reservation{{Token: "O"}, {Token: "B"}}
	snap := fence.Snapshot{Tasks: []fence.TaskUse{{Token: "O", Cap: 8 * size.GiB, Owed: true},
		{Token: "B", Cap: 2 * size.GiB, Limit: 70 * size.GiB, Used: 10 * size.GiB}}}
	procs := map[string][]seenProc{"B": {{ProcUsage: ProcUsage{PID: 7, Token: "B"}}}}
	now := at0
	for i := range 2 * unseenAfter {
		now = now.Add(100 * time.Millisecond)
		f.heed("G", snap, res, procs, true, now)
		f.mu.Lock()
		got := f.claimOf("G", "B").unseen
		f.mu.Unlock()
		if got != 0 {
			t.Fatalf("pass %d of the wait: B marked at %s beside a process NVML cannot read", i, got)
		}
	}
}
