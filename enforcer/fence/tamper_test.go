package fence_test

import (
	"os"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// Tasks get the control copies read-only, but under gpufrac run every job is the same Unix user
// as the enforcer and can write them: a job that raises its own limit, cuts a neighbour's
// guarantee, drops a task, moves the budget, changes how its contexts are counted (the
// processes seen of it, the context, the spare), whether a task's waits are heeded, its
// guarantee sealed or its borrowing seen there is found out by the enforcer's next Verify, which writes back what it set.
func TestVerifyRestoresWhatATenantRewrote(t *testing.T) {
	k := fencetest.Build(t)
	for _, field := range []string{"cap", "limit", "keep", "state", "budget", "seen", "unheeded", "sealed", "unseen", "ctx", "spare"} {
		t.Run(field, func(t *testing.T) {
			dir, tb := table(t, 4*size.GiB)
			tb.SetContext(256*size.MiB, 512*size.MiB)
			tasks := []fence.Task{{Token: tokA, Cap: size.GiB, Limit: 2 * size.GiB, Keep: 512 * size.MiB, Seen: 2}, {Token: tokB, Cap: size.GiB}}
			if err := tb.SetTasks(tasks, 4*size.GiB); err != nil {
				t.Fatal(err)
			}
			if diffs, err := tb.Verify(); diffs != nil || err != nil {
				t.Fatalf("an untouched table: %v %v", diffs, err)
			}
			tenant := k.StartTool(t)
			want(t, tenant.Do("tamper-control "+fence.ControlPath(dir, fencetest.FakeUUID)+" "+field+" 3G"), "ok", "tamper")
			diffs, err := tb.Verify()
			if len(diffs) == 0 || err != nil {
				t.Fatalf("a rewritten %s went unseen: %v %v", field, diffs, err)
			}
			t.Logf("seen: %v", diffs)
			s, _ := tb.Snapshot()
			u, ok := s.Task(tokA)
			if !ok || u.Cap != size.GiB || u.Limit != 2*size.GiB || u.Keep != 512*size.MiB || u.Seen != 2 || u.Unheeded || u.Sealed || u.Unseen != 0 || s.Budget != 4*size.GiB ||
				s.Context != 256*size.MiB || s.Spare != 512*size.MiB {
				t.Fatalf("not restored: %+v, budget %s, context %s, spare %s", s.Tasks, s.Budget, s.Context, s.Spare)
			}
			if diffs, err := tb.Verify(); diffs != nil || err != nil {
				t.Fatalf("after the restore: %v %v", diffs, err)
			}
		})
	}
}

// A job that raises a neighbour's use in the neighbour's accounting file (so the fence refuses
// the neighbour what its guarantee covers), which it can under gpufrac run (one Unix user, no
// mounts; under the plugin the file system refuses it, TestTaskCannotWriteAnotherTasksAccounting),
// is found out by Verify, which rebuilds the sum from the neighbour's processes: the neighbour
// gets its memory again.
func TestVerifyRebuildsARaisedUse(t *testing.T) {
	k := fencetest.Build(t)
	dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB}, fence.Task{Token: tokB, Cap: size.GiB})
	b := attach(t, dir, tokB)
	if r := b.Charge(100 * size.MiB); r != fence.Charged {
		t.Fatalf("charge: %v", r)
	}
	tenant := k.StartTool(t)
	want(t, tenant.Do("tamper "+fence.AccountPath(dir, tokB, fencetest.FakeUUID)+" used 1G "+tokB), "ok", "tamper")
	if r := b.Charge(500 * size.MiB); r != fence.Refused {
		t.Fatalf("with its use raised to its cap the neighbour is refused: %v", r)
	}
	diffs, err := tb.Verify()
	if len(diffs) == 0 || err != nil {
		t.Fatalf("a raised use went unseen: %v %v", diffs, err)
	}
	t.Logf("seen: %v", diffs)
	if r := b.Charge(500 * size.MiB); r != fence.Charged {
		t.Fatalf("after Verify the neighbour gets its memory: %v", r)
	}
	if u := snap(t, tb, tokB); u.Used != 600*size.MiB {
		t.Fatalf("the neighbour's use: %+v", u)
	}
}

// What only the enforcer writes is in a control copy that tasks get read-only, and every process
// puts it back into its accounting file before the rules read it: a guarantee cut or a limit
// raised in an accounting file never decides an allocation, even before the enforcer's next
// Verify.
func TestControlCopyDecidesNotTheTable(t *testing.T) {
	k := fencetest.Build(t)
	dir, _ := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB}, fence.Task{Token: tokB, Cap: size.GiB})
	a, b := attach(t, dir, tokA), attach(t, dir, tokB)
	tenant := k.StartTool(t)
	want(t, tenant.Do("tamper "+fence.AccountPath(dir, tokB, fencetest.FakeUUID)+" cap 0 "+tokB), "ok", "cut the neighbour's guarantee")
	if r := b.Charge(100 * size.MiB); r != fence.Charged {
		t.Fatalf("the neighbour within its guarantee after the table said 0: %v", r)
	}
	own := fence.AccountPath(dir, tokA, fencetest.FakeUUID)
	want(t, tenant.Do("tamper "+own+" limit 64G "+tokA), "ok", "raise its own limit")
	want(t, tenant.Do("tamper "+own+" cap 64G "+tokA), "ok", "raise its own guarantee")
	if r := a.Charge(2 * size.GiB); r != fence.Refused {
		t.Fatalf("past its guarantee after the table said 64G: %v", r)
	}
	st, err := os.Stat(fence.ControlPath(dir, fencetest.FakeUUID))
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("the control copy: %v %v, want 0644 in %s", st, err, fence.ControlDir(dir))
	}
}
