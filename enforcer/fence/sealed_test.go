package fence_test

import (
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
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
