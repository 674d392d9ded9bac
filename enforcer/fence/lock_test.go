package fence_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// bound is how long an attach, a charge or the enforcer's snapshot may take on a table whose
// lock holder died: a guard against a hang, far above what recovery takes.
const bound = 10 * time.Second

// underAWait is what proves that something did not wait for a kept lock: less than the 1 s a
// process waits for its own task's lock (GF_LOCK_WAIT_NS), with room for a loaded machine.
const underAWait = 900 * time.Millisecond

// within runs f and ends the test binary if f has not returned after d. A cgo call that spins
// cannot be interrupted, and it holds the Table's mutex that the test's cleanup needs, so the
// only way to fail in seconds rather than at the 20-minute timeout is to stop everything.
// startOver is an enforcer starting over the fence files in dir after another died (when): it
// opens the table and places task A with 1 GiB, each step within bound.
func startOver(t *testing.T, dir, when string) *fence.Table {
	t.Helper()
	var tb *fence.Table
	var err error
	within(t, bound, "fence.Create "+when, func() { tb, err = fence.Create(dir, fencetest.FakeUUID, 80*size.GiB, 0) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	within(t, bound, "SetTasks "+when, func() { err = tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB}}, 0) })
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		panic(fmt.Sprintf("%s: %s did not return within %s: the fence table's lock hangs", t.Name(), what, d))
	}
}

func snapshotWithin(t *testing.T, tb *fence.Table) fence.Snapshot {
	t.Helper()
	var s fence.Snapshot
	var err error
	within(t, bound, "the enforcer's snapshot", func() { s, err = tb.Snapshot() })
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A process SIGKILLed inside any critical section of the table, whatever slot it held, was
// claiming or had just given back, leaves a table on which the next process (taking the same
// slot where it can) attaches and charges, and the enforcer snapshots, at once; the sums come
// out right.
func TestKilledInsideEachCriticalSection(t *testing.T) {
	k := fencetest.Build(t)
	cases := []struct {
		point  string
		before []string // commands that answer before the one that stops
		stall  string
		// the dead process's slot is free again: the next attach takes it (the lock word of
		// old named a slot, and that next process read the dead holder's lock as its own)
		sameSlot bool
		// a killed neighbour's slot is there to reap
		deadNeighbour bool
	}{
		{point: "claim", stall: "attach", sameSlot: true},
		{point: "claim-live", stall: "attach"},
		{point: "charge-enter", before: []string{"attach"}, stall: "charge 100M"},
		{point: "charge", before: []string{"attach"}, stall: "charge 100M"},
		{point: "uncharge", before: []string{"attach", "charge 100M"}, stall: "uncharge 40M"},
		{point: "view", before: []string{"attach", "charge 100M"}, stall: "view"},
		{point: "detach", before: []string{"attach", "charge 100M"}, stall: "detach", sameSlot: true},
		{point: "reap", before: []string{"attach"}, stall: "reap", deadNeighbour: true},
	}
	for _, tc := range cases {
		t.Run(tc.point, func(t *testing.T) {
			dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
			path := fence.Path(dir, fencetest.FakeUUID)
			cmd := func(c string) string {
				if c == "attach" {
					return "attach " + path + " " + tokA
				}
				return c
			}
			if tc.deadNeighbour {
				n := k.StartTool(t)
				want(t, n.Do(cmd("attach")), "ok", "neighbour attaches")
				want(t, n.Do("charge 50M"), "ok", "neighbour charges")
				n.Kill()
			}
			victim := k.StartTool(t, "GF_TEST_STALL="+tc.point)
			for _, c := range tc.before {
				want(t, victim.Do(cmd(c)), "ok", c)
			}
			victim.Send(cmd(tc.stall))
			victim.WaitStderr("gf-test: stalled at " + tc.point)
			victim.Kill()

			next := k.StartTool(t)
			got := next.DoWithin(cmd("attach"), bound)
			wantSlot := "ok "
			if tc.sameSlot {
				wantSlot = "ok 0"
			}
			want(t, got, wantSlot, "attach after the holder died")
			want(t, next.DoWithin("charge 200M", bound), "ok", "charge after the holder died")
			snapshotWithin(t, tb)
			within(t, bound, "the enforcer's reap", func() { tb.Reap() })
			s := snapshotWithin(t, tb)
			u, _ := s.Task(tokA)
			if u.Used != 200*size.MiB || u.Procs != 1 || s.Underflows != 0 || s.Recoveries != 1 {
				t.Fatalf("after the holder died at %s: task %+v, recoveries %d (want 1), underflows %d",
					tc.point, u, s.Recoveries, s.Underflows)
			}
		})
	}
}

// The enforcer killed inside its own critical sections: the next enforcer (a restarted
// plugin, the next gpufrac run) takes the table over at once. The old lock named the enforcer
// by a fixed id, which the next one read as its own: gf_create spun forever.
func TestEnforcerKilledInsideItsCriticalSections(t *testing.T) {
	k := fencetest.Build(t)
	cases := []struct {
		point  string
		before []string
		stall  string
	}{
		{"create", nil, "create"},
		{"set-tasks", []string{"create"}, "set " + tokA + " 1G"},
		// The enforcer reads the tasks' files without their locks; it writes one (a rebuild, a
		// reap) from a child that maps it, which dies with it.
		{"rebuild", []string{"create", "set " + tokA + " 1G"}, "rebuild"},
	}
	for _, tc := range cases {
		t.Run(tc.point, func(t *testing.T) {
			dir := t.TempDir()
			path := fence.Path(dir, fencetest.FakeUUID)
			cmd := func(c string) string {
				if c == "create" {
					return fmt.Sprintf("create %s %s 80G", path, fencetest.FakeUUID)
				}
				return c
			}
			victim := k.StartTool(t, "GF_TEST_STALL="+tc.point)
			for _, c := range tc.before {
				if got := victim.Do(cmd(c)); got != "ok" && got != "placed 1" {
					t.Fatalf("%s: %q", c, got)
				}
			}
			victim.Send(cmd(tc.stall))
			victim.WaitStderr("gf-test: stalled at " + tc.point)
			victim.Kill()

			tb := startOver(t, dir, "after "+tc.point)
			c := k.StartTool(t)
			want(t, c.DoWithin("attach "+path+" "+tokA, bound), "ok", "attach")
			want(t, c.DoWithin("charge 100M", bound), "ok", "charge")
			s := snapshotWithin(t, tb)
			if u, _ := s.Task(tokA); u.Used != 100*size.MiB || u.Procs != 1 || s.Recoveries != 1 {
				t.Fatalf("after the enforcer died at %s: task %+v, recoveries %d (want 1)", tc.point, u, s.Recoveries)
			}
		})
	}
}

// Processes attaching, charging, freeing and detaching in a loop, SIGKILLed at random moments
// as the watchdog and the kernel's OOM killer do: the table stays usable and its sums right.
func TestStormOfKilledProcesses(t *testing.T) {
	k := fencetest.Build(t)
	dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: 64 * size.GiB})
	path := fence.Path(dir, fencetest.FakeUUID)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 26))
	const procs, kills = 8, 60
	loop := func() *fencetest.Proc {
		p := k.StartTool(t)
		want(t, p.Do("loop "+path+" "+tokA), "looping", "looper starts")
		return p
	}
	loopers := make([]*fencetest.Proc, procs)
	for i := range loopers {
		loopers[i] = loop()
	}
	for n := range kills {
		i := rng.IntN(procs)
		// Not a wait for anything: it picks a random moment of the victim's loop.
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		loopers[i].Kill()
		loopers[i] = loop()
		if n%10 == 9 {
			snapshotWithin(t, tb)
		}
	}
	for _, p := range loopers {
		p.Kill()
	}
	c := k.StartTool(t)
	want(t, c.DoWithin("attach "+path+" "+tokA, bound), "ok", "attach after the storm")
	want(t, c.DoWithin("charge 300M", bound), "ok", "charge after the storm")
	within(t, bound, "the enforcer's reap", func() { tb.Reap() })
	s := snapshotWithin(t, tb)
	u, _ := s.Task(tokA)
	if u.Used != 300*size.MiB || u.Procs != 1 || s.Underflows != 0 {
		t.Fatalf("after the storm: task %+v, underflows %d", u, s.Underflows)
	}
	t.Logf("%d kills: %d lock recoveries, %d slots reaped", kills, s.Recoveries, s.Reaped)
}

// A holder that lives but keeps its task's lock (stopped by SIGSTOP or a debugger inside a
// critical section, or a hostile tenant) hangs nobody and slows only its own task: after
// GF_LOCK_WAIT_NS its task's attach fails, a charge passes unfenced (the watchdog holds the cap)
// and a free is kept for later; another task allocates within its guarantee at once, and the
// enforcer reads, writes and reaps the GPU within its short bound (the held file read without
// the lock). Once the holder is gone the file serves again and the sums are right.
func TestLiveHolderThatKeepsTheLock(t *testing.T) {
	k := fencetest.Build(t)
	dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB}, fence.Task{Token: tokB, Cap: size.GiB})
	attachCmd := "attach " + fence.Path(dir, fencetest.FakeUUID) + " " + tokA
	early := k.StartTool(t)
	want(t, early.Do(attachCmd), "ok", "attach before")
	want(t, early.Do("charge 100M"), "ok", "charge before")
	holder := k.StartTool(t, "GF_TEST_STALL=charge")
	want(t, holder.Do(attachCmd), "ok", "the holder attaches")
	holder.Send("charge 10M")
	holder.WaitStderr("gf-test: stalled at charge")

	// Another task: not slowed at all (its lock is its own): under the 1 s its own task's
	// processes wait.
	neighbour := k.StartTool(t)
	start := time.Now()
	want(t, neighbour.DoWithin("attach "+fence.Path(dir, fencetest.FakeUUID)+" "+tokB, bound), "ok ", "the neighbour attaches")
	want(t, neighbour.DoWithin("charge 900M", bound), "ok", "the neighbour within its guarantee")
	if d := time.Since(start); d > underAWait {
		t.Fatalf("the neighbour's attach and allocation took %s while another task kept its own lock", d)
	}
	// The enforcer: a snapshot, a placement, a reap and a check, each well under the 1 s a
	// process waits for a kept lock (the enforcer waits 20 ms a file); the held task read
	// without its lock. Each is timed alone: four of them on a loaded machine may add up to a
	// second without any of them having waited.
	var s fence.Snapshot
	var err error
	quick := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		within(t, bound, what, f)
		if d := time.Since(start); d > underAWait {
			t.Fatalf("%s took %s while a task kept its lock: it waited for the lock", what, d)
		}
	}
	quick("the enforcer's snapshot", func() { s, err = tb.Snapshot() })
	if err != nil {
		t.Fatalf("snapshot while a task keeps its lock: %v", err)
	}
	quick("SetTasks", func() {
		err = tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB}, {Token: tokB, Cap: size.GiB}}, 0)
	})
	if err != nil {
		t.Fatalf("SetTasks while a task keeps its lock: %v", err)
	}
	quick("the enforcer's reap", func() { tb.Reap() })
	var diffs []string
	quick("the enforcer's Verify", func() { diffs, err = tb.Verify() })
	if diffs != nil || err != nil {
		// The holder stopped between raising its task's sum and its own: read without the
		// lock, that is an update in flight, not a tenant's rewrite.
		t.Fatalf("Verify while a task keeps its lock mid-update: %v %v", diffs, err)
	}
	if u, _ := s.Task(tokB); u.Used != 900*size.MiB || u.Unlocked {
		t.Fatalf("the neighbour as the enforcer read it: %+v", u)
	}
	if u, _ := s.Task(tokA); !u.Unlocked {
		t.Fatalf("the held task as the enforcer read it: %+v, want it marked read without its lock", u)
	}

	late := k.StartTool(t)
	want(t, late.DoWithin(attachCmd, bound), "err -5", "its own task's attach while the lock is kept")
	want(t, early.DoWithin("charge 100M", bound), "busy", "its own task's charge while the lock is kept")
	want(t, early.DoWithin("uncharge 100M", bound), "ok", "free while the lock is kept")
	c := k.Start(t, k.Env(dir, tokA))
	want(t, c.DoWithin("alloc 2G", bound), "ok", "a library client of its task passes unfenced")
	c.WaitStderr("locked by a live process")

	holder.Kill()
	want(t, late.DoWithin(attachCmd, bound), "ok", "attach once the holder is gone")
	want(t, early.DoWithin("charge 10M", bound), "ok", "charge once the holder is gone")
	within(t, bound, "the enforcer's reap", func() { tb.Reap() })
	s = snapshotWithin(t, tb)
	if u, _ := s.Task(tokA); u.Used != 10*size.MiB || u.Procs != 2 || s.Underflows != 0 {
		t.Fatalf("the free made while the lock was kept must count: task %+v, underflows %d", u, s.Underflows)
	}
}

// A lock its holder takes again and again is not kept: under heavy contention inside one task
// one process may win it many times running, and its task's other processes wait their turn
// instead of going on unfenced after GF_LOCK_WAIT_NS. Only a holder that stops taking it is
// waited out. The stalled holder stands for the winner: the lock word names it throughout, and
// the tool counts its takings in the header as each would.
func TestLockTakenAgainIsNotKept(t *testing.T) {
	k := fencetest.Build(t)
	dir, _ := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
	path := fence.Path(dir, fencetest.FakeUUID)
	attachCmd := "attach " + path + " " + tokA
	waiter := k.StartTool(t)
	want(t, waiter.Do(attachCmd), "ok", "the waiter attaches")
	holder := k.StartTool(t, "GF_TEST_STALL=charge")
	want(t, holder.Do(attachCmd), "ok", "the holder attaches")
	holder.Send("charge 10M")
	holder.WaitStderr("gf-test: stalled at charge")

	waiter.Send("charge 1M")
	// Three times the 1 s a kept lock is waited for.
	want(t, k.StartTool(t).DoWithin("takes "+fence.AccountPath(dir, tokA, fencetest.FakeUUID)+" 3000", bound), "took ", "the holder's takings")
	if got, ok := waiter.Answered(); ok {
		t.Fatalf("the waiter answered %q while the holder took the lock again every 10 ms: it took a lock in use for a kept one", got)
	}
	// The takings stop: now the holder keeps the lock, and the waiter goes on without it.
	if got := waiter.Reply(); got != "busy" {
		t.Fatalf("the waiter's charge once the holder kept the lock: got %q, want busy", got)
	}
	holder.Kill()
	want(t, waiter.DoWithin("charge 1M", bound), "ok", "charge once the holder is gone")
}
