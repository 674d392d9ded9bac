package fence_test

import (
	"fmt"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// A task's contexts are counted by the processes the enforcer saw of it on the GPU (Task.Seen),
// not by what the task writes in its own file: one that writes fewer cannot leave its contexts
// to a borrower's last allocation, and one that writes thousands cannot keep borrowers off the
// GPU. Its file is believed for NewProcs processes past what was seen (ones started since the
// enforcer's last look). Admission's figure counts the same.
func TestContextsAreCountedByTheProcessesSeen(t *testing.T) {
	const budget, ctx = 8 * size.GiB, 512 * size.MiB
	k := fencetest.Build(t)
	cases := []struct {
		name      string
		seen      int
		writes    int        // the owner's process count in its own file, -1: as its one process left it
		counted   int        // the owner's contexts the fence counts
		borrowMax size.Bytes // so the most the borrower's allocations reach
	}{
		{"as seen", 1, -1, 1, 6 * size.GiB},
		{"fewer written than seen", 3, 0, 3, 5 * size.GiB},
		{"thousands written", 1, 5000, 1 + fence.NewProcs, 4 * size.GiB},
		{"started since the last look", 0, 2, 2, 5*size.GiB + 512*size.MiB},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, tb := table(t, budget)
			tb.SetContext(ctx, 0)
			tasks := []fence.Task{{Token: tokA, Cap: size.GiB, Limit: budget}, {Token: tokB, Cap: size.GiB, Seen: tc.seen}}
			if err := tb.SetTasks(tasks, budget); err != nil {
				t.Fatal(err)
			}
			a, b := attach(t, dir, tokA), attach(t, dir, tokB)
			if r := b.Charge(size.MiB); r != fence.Charged {
				t.Fatalf("the owner's first allocation: %v", r)
			}
			if tc.writes >= 0 {
				tenant := k.StartTool(t)
				want(t, tenant.Do(fmt.Sprintf("tamper %s procs %d %s", fence.AccountPath(dir, tokB, fencetest.FakeUUID), tc.writes, tokB)), "ok", "tamper")
			}
			if r := a.Charge(tc.borrowMax); r != fence.Charged {
				t.Fatalf("the borrower to %s: %v", tc.borrowMax, r)
			}
			if r := a.Charge(size.MiB); r != fence.Refused {
				t.Fatalf("the borrower past %s: %v, want Refused", tc.borrowMax, r)
			}
			// The borrower's context, the owner's counted ones and the next task's first, past
			// a spare of nothing, besides what the borrower holds past its guarantee.
			wantBorrowed := tc.borrowMax - size.GiB + ctx*size.Bytes(1+tc.counted+1)
			if got := snapshotWithin(t, tb).Borrowed(); got != wantBorrowed {
				t.Fatalf("admission's borrowed: %s, want %s", got, wantBorrowed)
			}
		})
	}
}
