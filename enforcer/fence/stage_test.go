package fence_test

import (
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/size"
)

// A staged task (placed on a small guarantee, promised a larger one) is shown the promised
// guarantee, allocates up to its small one at once, and waits past it, without stopping
// admission on the GPU: a borrower's guarantee may still be placed, and its own guarantee is
// raised under the waiting allocation, which then goes on.
func TestStagedTaskWaitsForItsGuarantee(t *testing.T) {
	dir, tb := table(t, 8*size.GiB)
	staged := fence.Task{Token: tokA, Cap: size.GiB, Limit: size.GiB, Stage: 4 * size.GiB}
	if err := tb.SetTasks([]fence.Task{staged, {Token: tokB, Cap: 6 * size.GiB}}, 8*size.GiB); err != nil {
		t.Fatal(err)
	}
	a := attach(t, dir, tokA)
	if c, _, ok := a.View(); !ok || c != 4*size.GiB {
		t.Fatalf("a staged task's view: cap %s (ok %v), want its promised 4GiB", c, ok)
	}
	if r := a.Charge(2 * size.MiB); r != fence.Charged {
		t.Fatalf("a first small block within the staged guarantee: %v", r)
	}
	got := make(chan fence.Result, 1)
	go func() { got <- a.Charge(3 * size.GiB) }()
	s := waitFor(t, tb, "the staged allocation waiting", func(s fence.Snapshot) bool {
		u, _ := s.Task(tokA)
		return u.StageWaiting
	})
	if u, _ := s.Task(tokA); u.Waiting || u.Stage != 4*size.GiB || s.Waiting() {
		t.Fatalf("a staged wait must not count as a wait for memory (it would stop admission): %+v", u)
	}
	// Another task may still be placed while it waits: its wait holds up no guarantee.
	if err := tb.SetTasks([]fence.Task{staged, {Token: tokB, Cap: 6 * size.GiB}, {Token: tokC, Cap: size.GiB}}, 8*size.GiB); err != nil {
		t.Fatalf("placing a guarantee beside a staged wait: %v", err)
	}
	select {
	case r := <-got:
		t.Fatalf("the staged allocation returned %v before its guarantee was granted", r)
	default:
	}
	// B ends; A is granted its guarantee, in place, under the waiting allocation.
	if err := tb.SetTasks([]fence.Task{{Token: tokA, Cap: 4 * size.GiB}, {Token: tokC, Cap: size.GiB}}, 8*size.GiB); err != nil {
		t.Fatalf("granting the staged task its guarantee: %v", err)
	}
	if r := <-got; r != fence.Charged {
		t.Fatalf("the staged allocation after its grant: %v, want Charged", r)
	}
	if u := snap(t, tb, tokA); u.Used != 3*size.GiB+2*size.MiB || u.StageWaiting || u.Stage != 0 || u.Refused != 0 {
		t.Fatalf("A after its grant: %+v", u)
	}
	// Granted, it is an ordinary task: past its guarantee it is refused (it may not borrow).
	if r := a.Charge(size.GiB); r != fence.Refused {
		t.Fatalf("past the granted guarantee: %v, want Refused", r)
	}
}

// A staged guarantee's raise is judged like any raise: not over memory a borrower holds.
func TestStagedGrantIsNotPlacedOnBorrowedMemory(t *testing.T) {
	dir, tb := table(t, 4*size.GiB)
	staged := fence.Task{Token: tokA, Cap: size.GiB, Stage: 2 * size.GiB}
	borrower := fence.Task{Token: tokB, Cap: size.GiB, Limit: 4 * size.GiB}
	if err := tb.SetTasks([]fence.Task{staged, borrower}, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	b := attach(t, dir, tokB)
	if r := b.Charge(3 * size.GiB); r != fence.Charged { // 2 GiB of it borrowed: the budget is full
		t.Fatal(r)
	}
	granted := fence.Task{Token: tokA, Cap: 2 * size.GiB}
	if err := tb.SetTasks([]fence.Task{granted, borrower}, 4*size.GiB); err == nil {
		t.Fatal("a grant over borrowed memory was placed")
	}
	if u := snap(t, tb, tokA); u.Cap != size.GiB || u.Stage != 2*size.GiB {
		t.Fatalf("A after a refused grant: %+v, want still staged at 1GiB", u)
	}
	b.Uncharge(size.GiB)
	if err := tb.SetTasks([]fence.Task{granted, borrower}, 4*size.GiB); err != nil {
		t.Fatalf("the grant once the borrower gave its memory back: %v", err)
	}
}

// While a borrower's allocation waits, no new guarantee is placed, but a staged task is: it
// holds its small guarantee only, and its grant (a raise) waits like any guarantee.
func TestStagedTaskIsPlacedBesideAWait(t *testing.T) {
	tb, a, b := waitingTable(t, time.Minute) // A borrows up to 4 GiB, B holds 1 GiB
	if r := b.Charge(size.GiB); r != fence.Charged {
		t.Fatal(r)
	}
	if r := a.Charge(size.GiB + 512*size.MiB); r != fence.Charged { // 512 MiB borrowed: 1.5 of 4 free
		t.Fatal(r)
	}
	go a.Charge(2 * size.GiB) // needs B's guarantee: waits
	waitFor(t, tb, "A waiting", fence.Snapshot.Waiting)
	base := []fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, {Token: tokB, Cap: size.GiB}}
	if err := tb.SetTasks(append(base, fence.Task{Token: tokC, Cap: size.GiB}), 4*size.GiB); err == nil {
		t.Fatal("an ordinary guarantee was placed while A waits")
	}
	staged := fence.Task{Token: tokC, Cap: size.GiB, Limit: size.GiB, Stage: 2 * size.GiB}
	if err := tb.SetTasks(append(base, staged), 4*size.GiB); err != nil {
		t.Fatalf("a staged task beside A's wait: %v", err)
	}
	if err := tb.SetTasks(append(base, fence.Task{Token: tokC, Cap: 2 * size.GiB}), 4*size.GiB); err == nil {
		t.Fatal("a staged task's grant was placed while A waits")
	}
	if u := snap(t, tb, tokC); u.Cap != size.GiB || u.Stage != 2*size.GiB {
		t.Fatalf("C after a refused grant: %+v", u)
	}
	b.Uncharge(size.GiB) // A's charge ends with the test: B's and C's tasks end
	if err := tb.SetTasks(base[:1], 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	waitFor(t, tb, "A served", func(s fence.Snapshot) bool { return !s.Waiting() })
}
