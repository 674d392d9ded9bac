package fence_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// A process SIGKILLed while its allocation waits for borrowable memory leaves its slot live
// with its waiting flag set until a reaper gives it back. Nothing may read that flag as a live
// wait: not the snapshot admission reads (it would freeze the GPU), not SetTasks (it would
// refuse every new guarantee). Found on an H200: after the queue's other jobs ended nothing
// was admitted again.
func TestKilledWaiterFreezesNothing(t *testing.T) {
	k := fencetest.Build(t)
	for _, tc := range []struct {
		name  string
		ended bool // the waiter's task is ended before the new guarantee is asked for
		// the waiter is stopped instead of killed: alive, so no reaper can give its slot back
		// (as a process that outlives its job would be)
		stopped bool
	}{
		{name: "its task still placed"},
		{name: "its task ended", ended: true},
		{name: "a stopped waiter of an ended task", ended: true, stopped: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, tb := table(t, 4*size.GiB)
			tb.SetWait(time.Minute)
			both := []fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, {Token: tokB, Cap: size.GiB}}
			if err := tb.SetTasks(both, 4*size.GiB); err != nil {
				t.Fatal(err)
			}
			b := attach(t, dir, tokB)
			if r := b.Charge(size.GiB); r != fence.Charged {
				t.Fatal(r)
			}
			victim := k.StartTool(t)
			want(t, victim.Do("attach "+fence.Path(dir, fencetest.FakeUUID)+" "+tokA), "ok", "A attaches")
			want(t, victim.Do("charge 3G"), "ok", "A borrows 2 GiB")
			victim.Send("charge 1G") // needs B's memory: it waits
			waitFor(t, tb, "A waiting", fence.Snapshot.Waiting)
			if tc.stopped {
				stopOutsideTheLock(t, victim, tb)
			} else {
				victim.Kill()
			}

			rest := both
			if tc.ended {
				rest = both[1:]
			}
			if tc.ended {
				if err := tb.SetTasks(rest, 4*size.GiB); err != nil {
					t.Fatalf("ending the dead waiter's task: %v", err)
				}
			}
			// The snapshot does not reap: while the task is placed, the dead slot shows until a
			// reaper comes (the enforcer's FenceUse reaps when it sees a wait). A slot of an
			// ended task waits for nothing.
			if s := snapshotWithin(t, tb); tc.ended && s.Waiting() {
				t.Errorf("a dead process of an ended task reads as waiting: %+v", s.Procs)
			}
			// A new guarantee that fits once the dead process's bytes are back.
			newcomer := append(append([]fence.Task{}, rest...), fence.Task{Token: tokC, Cap: size.GiB})
			err := tb.SetTasks(newcomer, 4*size.GiB)
			var nr *fence.NoRoomError
			if errors.As(err, &nr) {
				t.Fatalf("a new guarantee beside a dead or stuck waiter: %v (%+v)", err, nr)
			}
			if err != nil {
				t.Fatal(err)
			}
			if u := snap(t, tb, tokC); u.Cap != size.GiB {
				t.Fatalf("C: %+v", u)
			}
			if s := snapshotWithin(t, tb); s.Waiting() || !tc.ended && s.Reaped != 1 {
				t.Fatalf("after the new guarantee: waiting %v, reaped %d (want the dead slot given back)", s.Waiting(), s.Reaped)
			}
		})
	}
}

// stopOutsideTheLock stops p between two of its polls: stopped inside one it would keep the
// table's lock, which is another test's (TestLiveHolderThatKeepsTheLock).
func stopOutsideTheLock(t *testing.T, p *fencetest.Proc, tb *fence.Table) {
	t.Helper()
	for range 10 {
		if err := syscall.Kill(p.PID(), syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		var err error
		within(t, bound, "the enforcer's snapshot", func() { _, err = tb.Snapshot() })
		if err == nil {
			return
		}
		if !errors.Is(err, fence.ErrLocked) {
			t.Fatal(err)
		}
		if err := syscall.Kill(p.PID(), syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("the waiter was stopped inside the lock 10 times running")
}

// A wait cut short because a live holder kept its task's lock (GF_BUSY: the allocation goes on
// unfenced) cannot clear its flag then; it is cleared at the process's next lock, so a process
// that lives on does not freeze its GPU for the rest of its life.
func TestWaitEndedWithoutTheLockLeavesNoFlag(t *testing.T) {
	k := fencetest.Build(t)
	dir, tb := table(t, 4*size.GiB)
	tb.SetWait(time.Minute)
	if err := tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, {Token: tokB, Cap: size.GiB}}, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	path := fence.Path(dir, fencetest.FakeUUID)
	b := attach(t, dir, tokB)
	if r := b.Charge(size.GiB); r != fence.Charged {
		t.Fatal(r)
	}
	waiter := k.StartTool(t)
	want(t, waiter.Do("attach "+path+" "+tokA), "ok", "A attaches")
	want(t, waiter.Do("charge 3G"), "ok", "A borrows 2 GiB")
	waiter.Send("charge 1G")
	waitFor(t, tb, "A waiting", fence.Snapshot.Waiting)
	holder := k.StartTool(t, "GF_TEST_STALL=charge-enter")
	want(t, holder.Do("attach "+path+" "+tokA), "ok", "the holder, of A's task, attaches")
	holder.Send("charge 1M")
	holder.WaitStderr("gf-test: stalled at charge-enter")
	want(t, waiter.Reply(), "busy", "A's wait once the lock is kept")
	holder.Kill()
	want(t, waiter.DoWithin("uncharge 1M", bound), "ok", "A's next lock")
	if s := snapshotWithin(t, tb); s.Waiting() {
		t.Fatalf("A waits for nothing, yet its flag stands: %+v", s.Procs)
	}
}
