package fence_test

import (
	"errors"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/size"
)

// A borrower leaves free what the CUDA contexts of every task's processes take, its own included,
// on top of what each task may hold (an owner's whole guarantee), past what the GPU holds beyond
// the budget (the spare): no fenced call shows a context, and a borrower that filled the budget
// met the GPU's end in the simulator's cold run, once beside an owner whose allocations grew
// within its guarantee. Admission's figure (Snapshot.Borrowed) and the placement of a guarantee
// count the same contexts.
func TestBorrowersLeaveRoomForContexts(t *testing.T) {
	const budget = 4 * size.GiB
	cases := []struct {
		name        string
		ctx, spare  size.Bytes
		ownerUses   size.Bytes
		borrowerGet size.Bytes // the most the borrower's allocations reach
		borrowed    size.Bytes // admission's figure then
	}{
		{"no context set", 0, 0, 0, 3 * size.GiB, 2 * size.GiB},
		{"the owner's context on its empty guarantee", 512 * size.MiB, 0, 0, 2 * size.GiB, 2*size.GiB + 512*size.MiB},
		{"the owner's context on its full guarantee", 512 * size.MiB, 0, size.GiB, 2 * size.GiB, 2*size.GiB + 512*size.MiB},
		{"a spare for one of the two contexts", 512 * size.MiB, 512 * size.MiB, size.GiB, 2*size.GiB + 512*size.MiB, 2*size.GiB + 512*size.MiB},
		{"a spare for every context: the budget binds", 512 * size.MiB, 2 * size.GiB, size.GiB, 3 * size.GiB, 2 * size.GiB},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, tb := table(t, budget)
			tb.SetContext(tc.ctx, tc.spare)
			if err := tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB, Limit: budget}, {Token: tokB, Cap: size.GiB}}, budget); err != nil {
				t.Fatal(err)
			}
			a, b := attach(t, dir, tokA), attach(t, dir, tokB)
			if tc.ownerUses > 0 {
				if r := b.Charge(tc.ownerUses); r != fence.Charged {
					t.Fatalf("the owner within its guarantee: %v", r)
				}
			}
			if got := snapshotWithin(t, tb).Borrowed(); got != 0 {
				t.Fatalf("admission's borrowed before anyone borrows: %s, want 0", got)
			}
			if r := a.Charge(tc.borrowerGet); r != fence.Charged {
				t.Fatalf("the borrower to %s: %v", tc.borrowerGet, r)
			}
			if r := a.Charge(size.MiB); r != fence.Refused {
				t.Fatalf("the borrower past %s: %v, want Refused", tc.borrowerGet, r)
			}
			if got := snapshotWithin(t, tb).Borrowed(); got != tc.borrowed {
				t.Fatalf("admission's borrowed: %s, want %s (contexts at %s each, spare %s)", got, tc.borrowed, tc.ctx, tc.spare)
			}
			// The owner fills its guarantee, and the GPU holds every allocation and context.
			if rest := size.GiB - tc.ownerUses; rest > 0 {
				if r := b.Charge(rest); r != fence.Charged {
					t.Fatalf("the owner to its guarantee: %v", r)
				}
			}
			if held := tc.borrowerGet + size.GiB + 2*tc.ctx; held > budget+tc.spare {
				t.Fatalf("allocations and contexts hold %s of a GPU of %s", held, budget+tc.spare)
			}
			// ... and no new guarantee is placed on what the contexts take.
			err := tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB, Limit: budget}, {Token: tokB, Cap: size.GiB}, {Token: tokC, Cap: 256 * size.MiB}}, budget)
			var noRoom *fence.NoRoomError
			if !errors.As(err, &noRoom) {
				t.Fatalf("a 256 MiB guarantee on a full GPU: %v, want a NoRoomError", err)
			}
		})
	}
}

// Where nobody borrows, the contexts of guarantees are the headroom policy's to hold: admission
// placed the guarantees, and the fence places them though their contexts pass the spare.
func TestGuaranteesArePlacedPastTheSpareWhereNobodyBorrows(t *testing.T) {
	const budget = 4 * size.GiB
	dir, tb := table(t, budget)
	tb.SetContext(512*size.MiB, 0)
	two := []fence.Task{{Token: tokA, Cap: 1536 * size.MiB, Limit: budget}, {Token: tokB, Cap: 1536 * size.MiB}}
	if err := tb.SetTasks(two, budget); err != nil {
		t.Fatal(err)
	}
	a, _ := attach(t, dir, tokA), attach(t, dir, tokB)
	if r := a.Charge(1536 * size.MiB); r != fence.Charged {
		t.Fatalf("the owner to its guarantee: %v", r)
	}
	if err := tb.SetTasks(append(two, fence.Task{Token: tokC, Cap: size.GiB}), budget); err != nil {
		t.Fatalf("a guarantee that fits the budget, nobody borrowing: %v", err)
	}
	if got := snapshotWithin(t, tb).Borrowed(); got != 0 {
		t.Fatalf("admission's borrowed: %s, want 0", got)
	}
	// Now nothing is left to lend: the budget is placed, and its contexts are past the spare.
	if r := a.Charge(size.MiB); r != fence.Refused {
		t.Fatalf("a borrow on a full GPU: %v, want Refused", r)
	}
}
