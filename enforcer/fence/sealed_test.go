package fence_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// Whether a task is armed is its own file's word: one whose file never says so (B here, which
// never attaches) has all but its keep lent, however long it has run. Once the enforcer seals it
// (Task.Sealed), borrowers read its whole guarantee as held whatever its file says, the placing
// of guarantees counts it whole, and the seal holds for as long as the enforcer sets it.
func TestSealedGuaranteeIsLentNoMore(t *testing.T) {
	_, tb, a := lendingTable(t, 256*size.MiB, 0)
	if r := a.Charge(4*size.GiB - 256*size.MiB); r != fence.Charged {
		t.Fatalf("A borrowing all of B's unarmed guarantee but its keep: %v, want Charged", r)
	}
	a.Uncharge(4*size.GiB - 256*size.MiB)
	borrower, owner := fence.Task{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, fence.Task{Token: tokB, Cap: 2 * size.GiB, Keep: 256 * size.MiB, Sealed: true}
	if err := tb.SetTasks([]fence.Task{borrower, owner}, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	if u := snap(t, tb, tokB); u.Armed || !u.Sealed {
		t.Fatalf("B sealed: %+v, want its file unarmed and the table sealed", u)
	}
	if r := a.Charge(2*size.GiB + size.MiB); r != fence.Refused {
		t.Fatalf("A reaching into B's sealed guarantee: %v, want Refused", r)
	}
	if r := a.Charge(2 * size.GiB); r != fence.Charged {
		t.Fatalf("A borrowing what no guarantee covers beside B's sealed one: %v, want Charged", r)
	}
	// A third guarantee of 512 MiB that lends all but 64 MiB is placed on borrowed memory where
	// its keep fits beside what the tasks take: beside an unsealed B (its use and keep, 256 MiB)
	// and A's 2 GiB, not beside a sealed one (2 GiB).
	c := fence.Task{Token: tokC, Cap: 512 * size.MiB, Keep: 64 * size.MiB}
	if err := tb.SetTasks([]fence.Task{borrower, owner, c}, 4*size.GiB); err == nil {
		t.Fatal("a guarantee placed on memory B's sealed guarantee covers")
	}
	owner.Sealed = false
	if err := tb.SetTasks([]fence.Task{borrower, owner, c}, 4*size.GiB); err != nil {
		t.Fatalf("the same guarantee beside an unsealed B: %v, want it placed", err)
	}
}

// A task may write that it borrows memory it holds nowhere (its file is its own): an owner then
// finds its guarantee short and waits, and with no process of the liar on the GPU for the
// watchdog to stop it would be refused inside its guarantee once its owed wait ran out. Once the
// enforcer marks the liar unseen (Task.Unseen), the rules believe its use up to its guarantee
// only, and the owner is served.
func TestUnseenBorrowIsBelievedUpToItsGuarantee(t *testing.T) {
	k := fencetest.Build(t)
	dir, tb := table(t, 4*size.GiB)
	liar, owner := fence.Task{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, fence.Task{Token: tokB, Cap: 2 * size.GiB}
	if err := tb.SetTasks([]fence.Task{liar, owner}, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	tenant := k.StartTool(t)
	want(t, tenant.Do("tamper "+fence.AccountPath(dir, tokA, fencetest.FakeUUID)+" used 3G "+tokA), "ok", "tamper")
	o := attach(t, dir, tokB)
	got := charging(o, 1536*size.MiB) // 3 GiB of the liar's beside the owner's 2: 1 GiB short
	waitFor(t, tb, "the owner owed", fence.Snapshot.Owed)
	if u := snap(t, tb, tokA); u.Borrowed() != 2*size.GiB {
		t.Fatalf("the liar before it is marked: %+v, want 2 GiB borrowed", u)
	}
	liar.Unseen = liar.Cap
	if err := tb.SetTasks([]fence.Task{liar, owner}, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r != fence.Charged {
		t.Fatalf("the owner beside an unseen borrow: %v, want Charged", r)
	}
	if u := snap(t, tb, tokA); u.Unseen != size.GiB || u.Borrowed() != 0 || u.Used != 3*size.GiB {
		t.Fatalf("the liar once marked: %+v, want unseen, its file's 3 GiB, and nothing borrowed", u)
	}
}

// A seal stops borrowers, not owners: an owner's allocation within its guarantee is checked
// against what the other tasks take now, a sealed task its use and keep as any (charge.c's judge
// reads no seal there). The watchdog's check of an owed wait (short, in the enforcer) must count
// the same: counting the sealed guarantee whole, it believed an owed flag that this owner, asking
// as much, never raises, and had a borrower stopped for it. This is decide_test's lentElsewhere,
// on the fence itself: B borrowed 15 GiB of X's guarantee before X was sealed, and L's 9 GiB fit
// beside B's 17 and X's keep.
func TestAnOwnerBesideASealedGuaranteeCountsWhatItsTaskTakes(t *testing.T) {
	dir, tb := table(t, 28*size.GiB)
	owner, sealed := fence.Task{Token: tokA, Cap: 10 * size.GiB, Keep: 768 * size.MiB}, fence.Task{Token: tokB, Cap: 16 * size.GiB, Keep: 768 * size.MiB}
	borrower := fence.Task{Token: tokC, Cap: 2 * size.GiB, Limit: 28 * size.GiB}
	if err := tb.SetTasks([]fence.Task{owner, sealed, borrower}, 28*size.GiB); err != nil {
		t.Fatal(err)
	}
	b, o := attach(t, dir, tokC), attach(t, dir, tokA)
	if r := b.Charge(17 * size.GiB); r != fence.Charged {
		t.Fatalf("B borrowing 15 GiB of X's unarmed guarantee: %v, want Charged", r)
	}
	if r := o.Charge(512 * size.MiB); r != fence.Charged {
		t.Fatalf("L's first 512 MiB: %v, want Charged", r)
	}
	sealed.Sealed = true
	if err := tb.SetTasks([]fence.Task{owner, sealed, borrower}, 28*size.GiB); err != nil {
		t.Fatal(err)
	}
	if u := snap(t, tb, tokB); !u.Sealed {
		t.Fatalf("X: %+v, want sealed", u)
	}
	if r := o.Charge(9 * size.GiB); r != fence.Charged {
		t.Fatalf("L asking 9 GiB beside a sealed X: %v, want Charged", r)
	}
	if u := snap(t, tb, tokA); u.OwedWaits != 0 || u.Waits != 0 {
		t.Fatalf("L: %+v, want it served without a wait", u)
	}
	// The seal still keeps borrowers out of X's guarantee.
	if r := b.Charge(size.MiB); r != fence.Refused {
		t.Fatalf("B reaching further into a sealed guarantee: %v, want Refused", r)
	}
}

// The unseen mark is the enforcer's, written at its passes, and the owner's wait that it serves
// ends between two of them: from then on borrowers may borrow again, and a mark still set would
// hide from them whatever the marked task holds by then (a process it started since, which no
// pass has seen yet, borrowing within what its own file leaves it). So the rules believe an
// unseen task's use up to its guarantee only while some owner's wait is owed, as the enforcer
// sets the mark: B is served beside the liar A's claim, and once it is, C may not borrow what A
// claims though the mark is still set.
func TestUnseenMarkGoesWithTheWait(t *testing.T) {
	k := fencetest.Build(t)
	dir, tb := table(t, 4*size.GiB)
	liar, owner := fence.Task{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, fence.Task{Token: tokB, Cap: 2 * size.GiB}
	borrower := fence.Task{Token: tokC, Cap: 512 * size.MiB, Limit: 4 * size.GiB}
	if err := tb.SetTasks([]fence.Task{liar, owner, borrower}, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	tenant := k.StartTool(t)
	want(t, tenant.Do("tamper "+fence.AccountPath(dir, tokA, fencetest.FakeUUID)+" used 3G "+tokA), "ok", "tamper")
	o, c := attach(t, dir, tokB), attach(t, dir, tokC)
	got := charging(o, 1536*size.MiB) // A's 3 GiB, C's 512 MiB and B's 2: 1.5 GiB short
	waitFor(t, tb, "the owner owed", fence.Snapshot.Owed)
	liar.Unseen = liar.Cap
	if err := tb.SetTasks([]fence.Task{liar, owner, borrower}, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r != fence.Charged {
		t.Fatalf("the owner beside an unseen borrow: %v, want Charged", r)
	}
	if s, err := tb.Snapshot(); err != nil || s.Owed() {
		t.Fatalf("after the owner was served: %+v %v, want nobody owed", s.Tasks, err)
	}
	if u := snap(t, tb, tokA); u.Unseen == 0 {
		t.Fatalf("the liar before the enforcer's next pass: %+v, want still marked", u)
	}
	// Beside A at its guarantee and B's 2 GiB, 1 GiB would be C's to take; beside A's claim, none.
	if r := c.Charge(size.GiB); r != fence.Refused {
		t.Fatalf("C borrowing what A claims once no owner waits: %v, want Refused", r)
	}
}

// A task writes its own file, its use too, and the placing of a lent guarantee sums every
// task's (taken, tasks.c): a use written near 2^64 wrapped that sum round to a few GiB, and a
// guarantee was placed where what the tasks take, A's 3 GiB and B's guarantee at least, passes
// the budget. The sum now stops at its top, as the fence's other sums do.
func TestAUseWrittenNearTheTopWrapsNoPlacement(t *testing.T) {
	k := fencetest.Build(t)
	dir, tb := table(t, 4*size.GiB)
	tasks := []fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, {Token: tokB, Cap: 2 * size.GiB, Keep: 256 * size.MiB}}
	if err := tb.SetTasks(tasks, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	if r := attach(t, dir, tokA).Charge(3 * size.GiB); r != fence.Charged { // 1 GiB of B's lent guarantee
		t.Fatalf("A borrowing: %v", r)
	}
	tenant := k.StartTool(t)
	top := ^uint64(0) - uint64(2*size.GiB) + 1 // 2^64 less 2 GiB: A's 3 GiB beside it wrap to 1 GiB
	want(t, tenant.Do(fmt.Sprintf("tamper %s used %d %s", fence.AccountPath(dir, tokB, fencetest.FakeUUID), top, tokB)), "ok", "tamper")
	c := fence.Task{Token: tokC, Cap: 512 * size.MiB, Keep: 64 * size.MiB}
	if err := tb.SetTasks(append(tasks, c), 4*size.GiB); !errors.Is(err, fence.ErrNoRoom) {
		t.Fatalf("a lent guarantee placed beside a use written near 2^64: %v, want ErrNoRoom", err)
	}
}

// A task writes its own file: where a guarantee is placed, a use written past the task's limit
// is believed no further, as the other tasks' rules believe it (gf_peers_view). Before, a task
// that may not borrow at all kept every new guarantee off its GPU, lent or not, by writing that
// it held the whole GPU.
func TestAUseWrittenPastTheLimitKeepsNoGuaranteeOff(t *testing.T) {
	k := fencetest.Build(t)
	for _, c := range []fence.Task{
		{Token: tokC, Cap: 4 * size.GiB},                       // nothing lent: committed's sum
		{Token: tokC, Cap: 4 * size.GiB, Keep: 256 * size.MiB}, // lent: taken's sum
	} {
		dir, tb := table(t, 8*size.GiB)
		tasks := []fence.Task{{Token: tokA, Cap: 2 * size.GiB}, {Token: tokB, Cap: size.GiB, Limit: 2 * size.GiB}}
		if err := tb.SetTasks(tasks, 8*size.GiB); err != nil {
			t.Fatal(err)
		}
		tenant := k.StartTool(t)
		for _, tok := range []string{tokA, tokB} {
			want(t, tenant.Do(fmt.Sprintf("tamper %s used %d %s", fence.AccountPath(dir, tok, fencetest.FakeUUID), 7*size.GiB, tok)), "ok", "tamper")
		}
		// Believed at their limits, A and B take 4 GiB of the 8: C's 4 GiB fit beside them.
		if err := tb.SetTasks(append(tasks, c), 8*size.GiB); err != nil {
			t.Errorf("a guarantee of %s (keep %s) beside uses written past their limits: %v, want it placed", c.Cap, c.Keep, err)
		}
	}
}
