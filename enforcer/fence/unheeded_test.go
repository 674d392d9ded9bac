package fence_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// A task may write its own file, its owed count too: while the enforcer heeds it, an owed wait
// made up there refuses every borrower on the GPU. Once the enforcer stops heeding the task's
// waits (Task.Unheeded, in the control copy), borrowers read its waits as none.
func TestUnheededOwedWaitRefusesNoBorrower(t *testing.T) {
	k := fencetest.Build(t)
	dir, tb := table(t, 4*size.GiB)
	borrower, liar := fence.Task{Token: tokA, Cap: size.GiB, Limit: 3 * size.GiB}, fence.Task{Token: tokB, Cap: size.GiB}
	if err := tb.SetTasks([]fence.Task{borrower, liar}, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	a := attach(t, dir, tokA)
	tenant := k.StartTool(t)
	want(t, tenant.Do("tamper "+fence.AccountPath(dir, tokB, fencetest.FakeUUID)+" nowed 1 "+tokB), "ok", "tamper")
	if r := a.Charge(2 * size.GiB); r != fence.Refused {
		t.Fatalf("a borrow beside a task that says it is owed: %v, want Refused", r)
	}
	refusedFor(t, a, "an owner waits for its guarantee", 0)
	if u := snap(t, tb, tokB); !u.Owed || !u.Waiting {
		t.Fatalf("the liar in the snapshot: %+v, want its count read as an owed wait", u)
	}
	liar.Unheeded = true
	if err := tb.SetTasks([]fence.Task{borrower, liar}, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	if u := snap(t, tb, tokB); !u.Unheeded {
		t.Fatalf("the liar in the snapshot: %+v, want it marked unheeded", u)
	}
	if r := a.Charge(2 * size.GiB); r != fence.Charged {
		t.Fatalf("a borrow beside an unheeded owed count: %v, want Charged", r)
	}
}

// While a task's allocation waits for borrowable memory no new guarantee is placed on the GPU;
// once the enforcer stops heeding that task's waits, one is, beside the wait, and the snapshot
// no longer counts the wait (its task still says it waits).
func TestUnheededWaitKeepsNoGuaranteeOff(t *testing.T) {
	tb, a, b := waitingTable(t, time.Minute)
	if r := b.Charge(size.GiB); r != fence.Charged {
		t.Fatal(r)
	}
	if r := a.Charge(2 * size.GiB); r != fence.Charged { // 1 GiB borrowed: 1 GiB of the budget left
		t.Fatal(r)
	}
	got := charging(a, 2*size.GiB) // does not fit while B holds its guarantee: it waits
	waitFor(t, tb, "A waiting", fence.Snapshot.Waiting)
	borrower, owner, c := fence.Task{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, fence.Task{Token: tokB, Cap: size.GiB},
		fence.Task{Token: tokC, Cap: 512 * size.MiB}
	var nr *fence.NoRoomError
	if err := tb.SetTasks([]fence.Task{borrower, owner, c}, 4*size.GiB); !errors.As(err, &nr) || !nr.Waiting {
		t.Fatalf("a new guarantee while A waits: %v, want a NoRoomError naming the wait", err)
	}
	borrower.Unheeded = true
	if err := tb.SetTasks([]fence.Task{borrower, owner, c}, 4*size.GiB); err != nil {
		t.Fatalf("a new guarantee beside an unheeded wait: %v, want it placed", err)
	}
	s, err := tb.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := s.Task(tokA); !u.Waiting || !u.Unheeded || s.Waiting() {
		t.Fatalf("A %+v, snapshot waiting %v: want A still saying it waits, unheeded, and the snapshot not counting it", u, s.Waiting())
	}
	// A's task ends: its wait finds no task.
	if err := tb.SetTasks([]fence.Task{owner, c}, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r != fence.NoTask {
		t.Fatalf("A's wait after its task ended: %v, want NoTask", r)
	}
}
