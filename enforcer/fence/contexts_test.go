package fence_test

import (
	"errors"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/size"
)

// A borrower leaves free what the CUDA contexts of processes take where their task's guarantee
// does not cover them, its own included, past what the GPU holds beyond the budget (the spare):
// no fenced call shows a context, and a borrower that filled the budget met the GPU's end in the
// simulator's cold run. Admission's figure (Snapshot.Borrowed) and the placement of a guarantee
// count the same contexts.
func TestBorrowersLeaveRoomForContexts(t *testing.T) {
	cases := []struct {
		name        string
		ctx, spare  size.Bytes
		ownerUses   size.Bytes
		borrowerGet size.Bytes // the most the borrower's allocations reach
	}{
		{"no context set", 0, 0, 0, 3 * size.GiB},
		{"the owner's context within its guarantee", 512 * size.MiB, 0, 0, 2*size.GiB + 512*size.MiB},
		{"the owner's context past its full guarantee", 512 * size.MiB, 0, size.GiB, 2 * size.GiB},
		{"a spare for one of the two contexts", 512 * size.MiB, 512 * size.MiB, size.GiB, 2*size.GiB + 512*size.MiB},
		{"a spare for both: the budget binds", 512 * size.MiB, 2 * size.GiB, size.GiB, 3 * size.GiB},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, tb := table(t, 4*size.GiB)
			tb.SetContext(tc.ctx, tc.spare)
			if err := tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, {Token: tokB, Cap: size.GiB}}, 4*size.GiB); err != nil {
				t.Fatal(err)
			}
			a, b := attach(t, dir, tokA), attach(t, dir, tokB)
			if tc.ownerUses > 0 {
				if r := b.Charge(tc.ownerUses); r != fence.Charged {
					t.Fatalf("the owner within its guarantee: %v", r)
				}
			}
			if r := a.Charge(tc.borrowerGet); r != fence.Charged {
				t.Fatalf("the borrower to %s: %v", tc.borrowerGet, r)
			}
			if r := a.Charge(size.MiB); r != fence.Refused {
				t.Fatalf("the borrower past %s: %v, want Refused", tc.borrowerGet, r)
			}
			s, err := tb.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			// Full either way: what the two guarantees leave of the budget is borrowed.
			if got := s.Borrowed(); got != 2*size.GiB {
				t.Fatalf("admission's borrowed: %s, want 2GiB (contexts at %s each, spare %s)", got, tc.ctx, tc.spare)
			}
			// ... and no new guarantee is placed on what the contexts take.
			err = tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, {Token: tokB, Cap: size.GiB}, {Token: tokC, Cap: 256 * size.MiB}}, 4*size.GiB)
			var noRoom *fence.NoRoomError
			if !errors.As(err, &noRoom) {
				t.Fatalf("a 256 MiB guarantee on a full GPU: %v, want a NoRoomError", err)
			}
		})
	}
}
