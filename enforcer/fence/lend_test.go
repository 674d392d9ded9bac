package fence_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// lendingTable is a 4 GiB budget where A may borrow up to all of it and B holds a 2 GiB
// guarantee of which it keeps its use and keep from borrowers until its use passes keep, with no
// grace. A is attached; B is not, so its guarantee is lent but for keep. A borrowing allocation
// may wait for wait.
func lendingTable(t *testing.T, keep size.Bytes, wait time.Duration) (string, *fence.Table, *fence.Client) {
	t.Helper()
	return graceTable(t, keep, wait, 0)
}

// graceTable is lendingTable where B's first allocation waits out grace quietly.
func graceTable(t *testing.T, keep size.Bytes, wait, grace time.Duration) (string, *fence.Table, *fence.Client) {
	t.Helper()
	dir, tb := table(t, 4*size.GiB)
	tb.SetWait(wait)
	tasks := []fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, {Token: tokB, Cap: 2 * size.GiB, Keep: keep, Grace: grace}}
	if err := tb.SetTasks(tasks, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	return dir, tb, attach(t, dir, tokA)
}

// A guarantee whose owner has not allocated yet is lent to borrowers, but for what it keeps.
func TestUnarmedGuaranteeIsLent(t *testing.T) {
	for _, tc := range []struct {
		name string
		keep size.Bytes
		// most is what A may hold: the budget less what B keeps from borrowers.
		most, wantKeep size.Bytes
	}{
		{"keep 256MiB", 256 * size.MiB, 4*size.GiB - 256*size.MiB, 256 * size.MiB},
		{"keep 0 keeps it all", 0, 2 * size.GiB, 2 * size.GiB},
		{"keep above the cap keeps it all", 3 * size.GiB, 2 * size.GiB, 2 * size.GiB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// No wait: a want past what is lent fails at once instead of waiting for B to end.
			_, tb, a := lendingTable(t, tc.keep, 0)
			if r := a.Charge(tc.most); r != fence.Charged {
				t.Fatalf("A taking %s: %v, want Charged", tc.most, r)
			}
			if r := a.Charge(1); r != fence.Refused {
				t.Fatalf("A taking a byte past %s: %v, want Refused", tc.most, r)
			}
			if u := snap(t, tb, tokB); u.Armed || u.Keep != tc.wantKeep {
				t.Fatalf("B before it allocates: %+v, want unarmed keeping %s", u, tc.wantKeep)
			}
		})
	}
}

// A task's first small allocations, within its keep, leave the rest of its guarantee lent (the
// workloads make their CUDA context and a 2 MiB block seconds before they load a model); once its
// use passes its keep, its whole guarantee is its own: nothing more of it is lent.
func TestArmedGuaranteeIsNotLent(t *testing.T) {
	dir, tb, a := lendingTable(t, 256*size.MiB, 0)
	b := attach(t, dir, tokB)
	if r := b.Charge(2 * size.MiB); r != fence.Charged {
		t.Fatal(r)
	}
	if u := snap(t, tb, tokB); u.Armed {
		t.Fatalf("B after 2 MiB, within its 256 MiB keep: %+v, want unarmed", u)
	}
	// A may take all but what B uses and keeps: B's 2 MiB count beside its keep.
	if r := a.Charge(4*size.GiB - 258*size.MiB); r != fence.Charged {
		t.Fatalf("A borrowing what B's guarantee covers past its use and keep: %v", r)
	}
	if r := a.Charge(1); r != fence.Refused {
		t.Fatalf("A taking a byte of what B uses or keeps: %v, want Refused", r)
	}
	a.Uncharge(size.GiB - 258*size.MiB) // A holds 3 GiB: 1 GiB of B's guarantee
	if r := b.Charge(256 * size.MiB); r != fence.Charged {
		t.Fatalf("B past its keep, with its bytes free: %v", r)
	}
	if u := snap(t, tb, tokB); !u.Armed {
		t.Fatalf("B past its keep: %+v, want armed", u)
	}
	if r := a.Charge(1); r != fence.Refused {
		t.Fatalf("A reaching further into B's armed guarantee: %v, want Refused", r)
	}
}

// An owner that finds borrowers on its guarantee waits for them to give it back; meanwhile
// no borrower is lent anything more (its allocation fails inside it at once), and the owner
// is served the moment the memory comes back. An owner whose bytes are free never waits.
func TestOwnerGetsItsGuaranteeBack(t *testing.T) {
	dir, tb, a := lendingTable(t, 256*size.MiB, time.Minute)
	if r := a.Charge(3 * size.GiB); r != fence.Charged { // 1 GiB of B's guarantee lent
		t.Fatal(r)
	}
	b := attach(t, dir, tokB)
	// B's first 512 MiB, with its contexts' 256 MiB, fit beside A's 3 GiB: no wait.
	if r := b.Charge(512 * size.MiB); r != fence.Charged {
		t.Fatalf("B within what is free: %v", r)
	}
	if u := snap(t, tb, tokB); u.OwedWaits != 0 {
		t.Fatalf("B waited for free memory: %+v", u)
	}
	got := charging(b, size.GiB) // its guarantee's last GiB is A's now
	s := waitFor(t, tb, "B owed", fence.Snapshot.Owed)
	if u, _ := s.Task(tokB); !u.Owed || u.OwedWaits != 1 || u.Refused != 0 {
		t.Fatalf("B while it waits: %+v", u)
	}
	if u, _ := s.Task(tokA); u.Borrowed() != 2*size.GiB {
		t.Fatalf("A while B waits: %+v", u)
	}
	// A borrower gets nothing more while an owner waits, not even memory that is free.
	if r := a.Charge(size.MiB); r != fence.Refused {
		t.Fatalf("A borrowing while B is owed: %v, want Refused at once", r)
	}
	refusedFor(t, a, "an owner waits for its guarantee", 0)
	select {
	case r := <-got:
		t.Fatalf("B's charge returned %v before A gave anything back", r)
	default:
	}
	servedOnceFreed(t, a, 2*size.GiB, got, "B once A gave back") // A fails and frees (or the enforcer stops it)
	if u := snap(t, tb, tokB); u.Used != 1536*size.MiB || u.Waiting || u.Owed {
		t.Fatalf("B served: %+v", u)
	}
	// With no owner waiting, A may borrow again what nobody's guarantee covers.
	if r := a.Charge(512 * size.MiB); r != fence.Charged {
		t.Fatalf("A borrowing after B was served: %v", r)
	}
}

// An owed owner is served when the borrower's process leaves holding the memory (how a
// borrower the enforcer stopped gives it back).
func TestOwnerServedWhenTheBorrowerLeaves(t *testing.T) {
	dir, tb, a := lendingTable(t, 256*size.MiB, time.Minute)
	if r := a.Charge(3*size.GiB + 512*size.MiB); r != fence.Charged {
		t.Fatal(r)
	}
	b := attach(t, dir, tokB)
	got := charging(b, size.GiB)
	waitFor(t, tb, "B owed", fence.Snapshot.Owed)
	a.Detach() // the borrower's process leaves: its bytes go back to nobody
	if r := <-got; r != fence.Charged {
		t.Fatalf("B after the borrower left: %v", r)
	}
}

// An allocation granted after borrowers gave its bytes back tries the driver again while the
// driver still releases them (a stopped borrower's memory comes back a moment after its slot);
// any other allocation's out-of-memory error stands at once.
func TestOwedAllocationWaitsForTheDriver(t *testing.T) {
	k := fencetest.Build(t)
	_, tb, a := lendingTable(t, 256*size.MiB, time.Minute)
	dir := filepath.Dir(tb.Path())
	if r := a.Charge(3*size.GiB + 512*size.MiB); r != fence.Charged { // 1.5 GiB of B's guarantee lent
		t.Fatal(r)
	}
	b := k.Start(t, k.Env(dir, tokB, "FAKE_CUDA_OOM_FIRST=3"))
	b.Send("alloc 1G")
	waitFor(t, tb, "B owed", fence.Snapshot.Owed)
	a.Uncharge(2 * size.GiB)
	want(t, b.Reply(), "ok", "B's allocation once A gave back, the driver failing it 3 times first")

	c := k.Start(t, k.Env(dir, tokB, "FAKE_CUDA_OOM_FIRST=1"))
	want(t, c.Do("alloc 1M"), "err 2", "an allocation that did not wait, the driver failing it once")
}

// Without lending too: where the budget shrank under a borrower (memory of processes without a
// reservation appeared), an owner whose guarantee no longer fits beside the borrower waits for
// the borrower to give back, rather than failing in the driver.
func TestOwnerWaitsWhenTheBudgetShrankUnderABorrower(t *testing.T) {
	dir, tb := table(t, 4*size.GiB)
	tb.SetWait(time.Minute)
	tasks := []fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, {Token: tokB, Cap: 2 * size.GiB}}
	if err := tb.SetTasks(tasks, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	a, b := attach(t, dir, tokA), attach(t, dir, tokB)
	if r := a.Charge(2 * size.GiB); r != fence.Charged { // 1 GiB borrowed
		t.Fatal(r)
	}
	if err := tb.SetTasks(tasks, 3*size.GiB); err != nil {
		t.Fatal(err)
	}
	got := charging(b, 1536*size.MiB)
	waitFor(t, tb, "B owed", fence.Snapshot.Owed)
	if r := a.Charge(size.MiB); r != fence.Refused {
		t.Fatalf("A borrowing while B waits: %v", r)
	}
	servedOnceFreed(t, a, size.GiB, got, "B once A gave back")
}

// With a grace, an owner whose first allocation finds its lent guarantee held waits quietly:
// unarmed, not owed, nobody refused, the borrower free to go on growing into what is still
// lent. A borrower that ends within the grace gives it everything and loses nothing.
func TestOwnerWaitsOutItsGraceQuietly(t *testing.T) {
	dir, tb, a := graceTable(t, 256*size.MiB, time.Minute, time.Minute)
	if r := a.Charge(3 * size.GiB); r != fence.Charged { // 1 GiB of B's guarantee lent
		t.Fatal(r)
	}
	b := attach(t, dir, tokB)
	got := charging(b, 1536*size.MiB) // with its keep, 0.75 GiB more than is free
	s := waitFor(t, tb, "B waiting", fence.Snapshot.Waiting)
	if u, _ := s.Task(tokB); u.Owed || u.Armed || u.OwedWaits != 0 || u.Used != 0 {
		t.Fatalf("B in its grace: %+v, want waiting unarmed, not owed, holding nothing", u)
	}
	if s.Owed() {
		t.Fatalf("an owner is owed during the grace: %+v", s.Tasks)
	}
	// The borrower goes on growing into what B has not taken (all but its keep).
	if r := a.Charge(512 * size.MiB); r != fence.Charged {
		t.Fatalf("A growing during B's grace: %v, want Charged", r)
	}
	select {
	case r := <-got:
		t.Fatalf("B's charge returned %v while A held its guarantee", r)
	default:
	}
	servedOnceFreed(t, a, 3*size.GiB+512*size.MiB, got, "B once A ended") // the borrower ends
	u := snap(t, tb, tokB)
	if !u.Armed || u.Waiting || u.Used != 1536*size.MiB || u.OwedWaits != 0 {
		t.Fatalf("B served after its grace: %+v", u)
	}
	if ua := snap(t, tb, tokA); ua.Refused != 0 {
		t.Fatalf("A was refused %d times during B's grace", ua.Refused)
	}
}

// Past its grace the owner is owed, as without one: borrowers are refused more and give back.
func TestGraceRunsOut(t *testing.T) {
	dir, tb, a := graceTable(t, 256*size.MiB, time.Minute, 50*time.Millisecond)
	if r := a.Charge(3*size.GiB + 512*size.MiB); r != fence.Charged {
		t.Fatal(r)
	}
	b := attach(t, dir, tokB)
	got := make(chan fence.Result, 1)
	start := time.Now()
	go func() { got <- b.Charge(size.GiB) }()
	s := waitFor(t, tb, "B owed", fence.Snapshot.Owed)
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("B owed after %v, within its 50ms grace", waited)
	}
	if u, _ := s.Task(tokB); !u.Armed || u.OwedWaits != 1 {
		t.Fatalf("B past its grace: %+v, want armed and owed", u)
	}
	if r := a.Charge(size.MiB); r != fence.Refused {
		t.Fatalf("A borrowing while B is owed: %v, want Refused", r)
	}
	refusedFor(t, a, "an owner waits for its guarantee", 0)
	servedOnceFreed(t, a, 2*size.GiB, got, "B once A gave back")
}

// An owner already served has its grace too, when a later allocation finds what was lent of
// its guarantee held; a grace runs out once in a process's life: its later owed waits (here the
// budget shrinks under a borrower) begin at once.
func TestAnArmedOwnerHasItsGraceOnce(t *testing.T) {
	dir, tb, a := graceTable(t, 256*size.MiB, time.Minute, 50*time.Millisecond)
	if r := a.Charge(3 * size.GiB); r != fence.Charged { // 1 GiB of B's guarantee lent
		t.Fatal(r)
	}
	b := attach(t, dir, tokB)
	if r := b.Charge(384 * size.MiB); r != fence.Charged { // past its keep
		t.Fatalf("B's first allocation, with its bytes free: %v", r)
	}
	if u := snap(t, tb, tokB); !u.Armed || u.Waiting {
		t.Fatalf("B after its first allocation: %+v, want armed, not waiting", u)
	}
	got := make(chan fence.Result, 1)
	start := time.Now()
	go func() { got <- b.Charge(size.GiB) }() // the lent GiB, which A holds
	waitFor(t, tb, "B owed", fence.Snapshot.Owed)
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("armed B owed after %v, within its 50ms grace", waited)
	}
	servedOnceFreed(t, a, size.GiB, got, "B once A gave back")
	if err := tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB},
		{Token: tokB, Cap: 2 * size.GiB, Keep: 256 * size.MiB, Grace: time.Minute}}, 3*size.GiB+512*size.MiB); err != nil {
		t.Fatal(err)
	}
	// A minute's grace now, but this process's ran out: owed at once (waitFor gives up at 30 s).
	go func() { got <- b.Charge(512 * size.MiB) }() // 1.875 GiB and its keep beside A's 2 GiB
	s := waitFor(t, tb, "B owed again", fence.Snapshot.Owed)
	if u, _ := s.Task(tokB); u.OwedWaits != 2 {
		t.Fatalf("B owed again: %+v, want its second owed wait", u)
	}
	servedOnceFreed(t, a, size.GiB, got, "B once A gave back again")
}

// lendingPair places, on a 4 GiB budget where guarantees are lent (every task keeps 256 MiB), a
// borrower A (1 GiB guarantee, may reach the budget) and returns its client.
func lendingPair(t *testing.T) (string, *fence.Table, *fence.Client, []fence.Task) {
	t.Helper()
	dir, tb := table(t, 4*size.GiB)
	tb.SetWait(0)
	tasks := []fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB, Keep: 256 * size.MiB}}
	if err := tb.SetTasks(tasks, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	return dir, tb, attach(t, dir, tokA), tasks
}

// Where guarantees are lent, a borrower leaves a keep free: room for the contexts of a task
// whose guarantee is placed on what it holds.
func TestBorrowersLeaveAKeepFree(t *testing.T) {
	_, _, a, _ := lendingPair(t)
	if r := a.Charge(4*size.GiB - 256*size.MiB); r != fence.Charged {
		t.Fatalf("A borrowing all but a keep: %v", r)
	}
	if r := a.Charge(1); r != fence.Refused {
		t.Fatalf("A taking a byte of the keep it leaves free: %v, want Refused", r)
	}
}

// A new guarantee that lends is placed on what borrowers hold when all the guarantees fit the
// budget and its keep is free; the borrower keeps the memory, and the owner's first allocation
// waits out its grace until the borrower ends. A guarantee that would pass the budget beside the
// others is refused, and so is one that lends nothing (the rule before lending).
func TestLentGuaranteeIsPlacedOnBorrowedMemory(t *testing.T) {
	dir, tb, a, tasks := lendingPair(t)
	if r := a.Charge(3*size.GiB + 512*size.MiB); r != fence.Charged { // all but the keep left free
		t.Fatal(r)
	}
	whole := fence.Task{Token: tokB, Cap: 2 * size.GiB}
	var nr *fence.NoRoomError
	if err := tb.SetTasks(append(tasks, whole), 4*size.GiB); !errors.As(err, &nr) {
		t.Fatalf("a 2 GiB guarantee that lends nothing on borrowed memory: %v, want a NoRoomError", err)
	}
	b := fence.Task{Token: tokB, Cap: 2 * size.GiB, Keep: 256 * size.MiB, Grace: time.Minute}
	if err := tb.SetTasks(append(tasks, b), 4*size.GiB); err != nil {
		t.Fatalf("a 2 GiB guarantee that lends all but its keep, on borrowed memory: %v", err)
	}
	if u := snap(t, tb, tokA); u.Used != 3*size.GiB+512*size.MiB {
		t.Fatalf("the borrower after the placement: %+v, want what it held", u)
	}
	over := fence.Task{Token: tokC, Cap: 1536 * size.MiB, Keep: 256 * size.MiB}
	if err := tb.SetTasks(append(tasks, b, over), 4*size.GiB); !errors.As(err, &nr) {
		t.Fatalf("guarantees of 4.5 GiB on a 4 GiB budget: %v, want a NoRoomError", err)
	}
	ob := attach(t, dir, tokB)
	got := charging(ob, size.GiB)
	waitFor(t, tb, "B waiting out its grace", fence.Snapshot.Waiting)
	servedOnceFreed(t, a, 3*size.GiB+512*size.MiB, got, "B once the borrower ended") // the borrower ends
	if u := snap(t, tb, tokA); u.Refused != 0 {
		t.Fatalf("the borrower was refused: %+v", u)
	}
}

// A borrower that waits for memory is not lent against: a new guarantee is not placed on what it
// holds while it waits (the rule without lending), and is once its wait is over.
func TestLentGuaranteeIsNotPlacedBesideAWaitingBorrower(t *testing.T) {
	tb, tasks, got := waitingBorrower(t)
	borrower, other := tasks[0], tasks[1]
	b := fence.Task{Token: tokB, Cap: 2 * size.GiB, Keep: 256 * size.MiB, Grace: time.Minute}
	var nr *fence.NoRoomError
	if err := tb.SetTasks([]fence.Task{borrower, other, b}, 4*size.GiB); !errors.As(err, &nr) || !nr.Waiting {
		t.Fatalf("a lent guarantee on a waiting borrower's memory: %v, want a NoRoomError naming the wait", err)
	}
	// A's limit cut to its guarantee: its waiting charge is refused, and nothing waits.
	cut := borrower
	cut.Limit = borrower.Cap
	if err := tb.SetTasks([]fence.Task{cut, other}, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r != fence.Refused {
		t.Fatalf("A's wait past its new limit: %v, want Refused", r)
	}
	if err := tb.SetTasks([]fence.Task{borrower, other, b}, 4*size.GiB); err != nil {
		t.Fatalf("the same guarantee once nothing waits: %v", err)
	}
}

// waitingBorrower places, on a 4 GiB budget where a borrow may wait a minute, a borrower A (1 GiB
// guarantee, keep 256 MiB, up to the budget) and C (256 MiB, borrowing too: it holds 512 MiB and
// may give some back), A holding all but C's memory and its keep free; A's next 256 MiB waits
// (got). It returns the table and both tasks.
func waitingBorrower(t *testing.T) (*fence.Table, []fence.Task, <-chan fence.Result) {
	t.Helper()
	dir, tb := table(t, 4*size.GiB)
	tb.SetWait(time.Minute)
	tasks := []fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB, Keep: 256 * size.MiB},
		{Token: tokC, Cap: 256 * size.MiB, Limit: 4 * size.GiB}}
	if err := tb.SetTasks(tasks, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	a, c := attach(t, dir, tokA), attach(t, dir, tokC)
	if r := c.Charge(512 * size.MiB); r != fence.Charged {
		t.Fatal(r)
	}
	if r := a.Charge(3*size.GiB + 256*size.MiB); r != fence.Charged {
		t.Fatal(r)
	}
	got := charging(a, 256*size.MiB) // the keep it leaves free: it waits
	waitFor(t, tb, "A waiting", func(s fence.Snapshot) bool { u, _ := s.Task(tokA); return u.Waiting })
	return tb, tasks, got
}

// An owner waiting out its grace on a borrower that waits itself (for memory the owner's
// guarantee covers) is a tie nothing but a reclaim ends: after a second of it the owner is owed,
// well within its minute's grace, and the borrower is refused and gives back.
func TestATieEndsTheGrace(t *testing.T) {
	dir, tb, a := graceTable(t, 256*size.MiB, time.Minute, time.Minute)
	if r := a.Charge(3 * size.GiB); r != fence.Charged { // 1 GiB of B's guarantee lent
		t.Fatal(r)
	}
	b := attach(t, dir, tokB)
	if r := b.Charge(512 * size.MiB); r != fence.Charged { // served from what is free: B armed
		t.Fatalf("B's first allocation: %v", r)
	}
	// A wants the rest of the budget, which B's armed guarantee covers: it waits (a minute).
	aGot := charging(a, 512*size.MiB)
	waitFor(t, tb, "A waiting", func(s fence.Snapshot) bool { u, _ := s.Task(tokA); return u.Waiting })
	// B wants its lent GiB, which A holds: each waits for the other.
	bGot := make(chan fence.Result, 1)
	start := time.Now()
	go func() { bGot <- b.Charge(size.GiB) }()
	if r := <-aGot; r != fence.Refused {
		t.Fatalf("A in the tie: %v, want Refused once B is owed", r)
	}
	if waited := time.Since(start); waited > 30*time.Second {
		t.Fatalf("the tie lasted %v: B waited out its grace", waited)
	}
	refusedFor(t, a, "an owner waits for its guarantee", 0)
	servedOnceFreed(t, a, 3*size.GiB, bGot, "B once A gave back") // the borrower fails and frees
}

// A borrower that still grows goes on growing into the guarantee of an owner that waits out
// its grace, but for what the owner holds, its keep and an ask that fits: the owner has let it
// keep what it holds for the grace, and one that ends within it leaves nobody waiting (on the
// H200, seed 3, 2026-12-04, owners armed with their first small block stopped a growing leaker
// short of its end, each waiting for the other until the leaker was stopped).
func TestBorrowerGrowsDuringAGrace(t *testing.T) {
	// No wait: a borrow that does not fit is refused at once.
	dir, tb, a := graceTable(t, 256*size.MiB, 0, time.Minute)
	if r := a.Charge(3 * size.GiB); r != fence.Charged { // 1 GiB of B's guarantee lent
		t.Fatal(r)
	}
	b := attach(t, dir, tokB)
	if r := b.Charge(384 * size.MiB); r != fence.Charged { // served from what is free: B armed
		t.Fatalf("B's first allocation: %v", r)
	}
	if r := a.Charge(size.MiB); r != fence.Refused {
		t.Fatalf("A reaching into B's armed guarantee: %v, want Refused", r)
	}
	// B asks 1 GiB, which does not fit beside what A holds: it waits out its grace, and A grows
	// into what B neither holds nor keeps.
	bGot := charging(b, size.GiB)
	waitFor(t, tb, "B waiting out its grace", func(s fence.Snapshot) bool { u, _ := s.Task(tokB); return u.Waiting })
	if r := a.Charge(384 * size.MiB); r != fence.Charged {
		t.Fatalf("A growing during B's grace: %v, want Charged", r)
	}
	if r := a.Charge(1); r != fence.Refused {
		t.Fatalf("A taking a byte of what B holds and keeps: %v, want Refused", r)
	}
	if u := snap(t, tb, tokB); u.Owed || !u.Waiting || u.OwedWaits != 0 {
		t.Fatalf("B while A grew: %+v, want waiting out its grace, not owed", u)
	}
	servedOnceFreed(t, a, 3*size.GiB+384*size.MiB, bGot, "B once A ended") // the borrower ends
	if u := snap(t, tb, tokB); u.OwedWaits != 0 || u.Used != 1408*size.MiB {
		t.Fatalf("B after its grace: %+v, want 1.375 GiB and no owed wait", u)
	}
}

// An owner waiting out its grace whose ask fits beside what a waiting borrower holds is served
// first: the borrower may not take the memory that ask needs. The owner's wait is written into
// its file here, as its own process could (tablectl), so that it never looks itself and the
// borrower's rule alone decides; a task that says it waits out a grace lends only its own
// guarantee.
func TestGraceAskIsServedFirst(t *testing.T) {
	k := fencetest.Build(t)
	dir, tb := table(t, 4*size.GiB)
	tb.SetWait(time.Minute)
	owner := fence.Task{Token: tokB, Cap: 2 * size.GiB, Keep: 256 * size.MiB, Grace: time.Minute}
	a, d := fence.Task{Token: tokA, Cap: 512 * size.MiB, Limit: 4 * size.GiB}, fence.Task{Token: tokC, Cap: 512 * size.MiB, Limit: 4 * size.GiB}
	if err := tb.SetTasks([]fence.Task{a, d, owner}, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	ca, cd, cb := attach(t, dir, tokA), attach(t, dir, tokC), attach(t, dir, tokB)
	for _, c := range []*fence.Client{ca, cd} {
		if r := c.Charge(1536 * size.MiB); r != fence.Charged { // 1.75 GiB of B's guarantee lent
			t.Fatal(r)
		}
	}
	if r := cb.Charge(384 * size.MiB); r != fence.Charged { // past its keep: B armed
		t.Fatalf("B's first allocation: %v", r)
	}
	aGot := charging(ca, size.GiB) // 2.5 GiB: past what B's guarantee leaves
	waitFor(t, tb, "A waiting", func(s fence.Snapshot) bool { u, _ := s.Task(tokA); return u.Waiting })
	tenant := k.StartTool(t)
	path := fence.AccountPath(dir, tokB, fencetest.FakeUUID)
	want(t, tenant.Do("tamper "+path+" ngrace 1 "+tokB), "ok", "tamper")
	want(t, tenant.Do("tamper "+path+" gwant 768M "+tokB), "ok", "tamper")
	// D frees 1 GiB: room for B's ask (768 MiB beside A's 1.5 GiB) or for A's, not both.
	cd.Uncharge(size.GiB)
	select {
	case r := <-aGot:
		t.Fatalf("A's charge returned %v: it took what B's ask needs", r)
	case <-time.After(300 * time.Millisecond): // a hundred of A's looks
	}
	// B asks nothing more: what it does not hold or keep is lent, and A is served.
	want(t, tenant.Do("tamper "+path+" gwant 0 "+tokB), "ok", "tamper")
	if r := <-aGot; r != fence.Charged {
		t.Fatalf("A once B asked for nothing: %v, want Charged", r)
	}
}

// charging starts c's charge of n; its result comes on the channel.
func charging(c *fence.Client, n size.Bytes) <-chan fence.Result {
	got := make(chan fence.Result, 1)
	go func() { got <- c.Charge(n) }()
	return got
}

// servedOnceFreed frees n of borrower a (it ends, or gives back) and wants the pending charge
// got served.
func servedOnceFreed(t *testing.T, a *fence.Client, n size.Bytes, got <-chan fence.Result, what string) {
	t.Helper()
	a.Uncharge(n)
	if r := <-got; r != fence.Charged {
		t.Fatalf("%s: %v, want Charged", what, r)
	}
}
