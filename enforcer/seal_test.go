package enforcer

import (
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// sealedBy seals a task only on what the pass can check or read whole: its file saying it armed
// (not a file read without its lock, where a charge may have armed it for a moment), or NVML
// showing it hold past its keep and a context a process. A task that lends nothing has nothing
// to seal.
func TestSealedBy(t *testing.T) {
	const ctx = 500 * size.MiB
	lends := fence.TaskUse{Token: "A", Cap: 4 * size.GiB, Keep: 256 * size.MiB}
	procs := func(b ...size.Bytes) []seenProc {
		var ps []seenProc
		for _, n := range b {
			ps = append(ps, seenProc{ProcUsage: ProcUsage{Bytes: n}})
		}
		return ps
	}
	with := func(f func(*fence.TaskUse)) fence.TaskUse { u := lends; f(&u); return u }
	for _, tc := range []struct {
		name   string
		u      fence.TaskUse
		ps     []seenProc
		sealed bool
	}{
		{"unarmed in its start-up", lends, procs(700 * size.MiB), false},
		{"its file says armed", with(func(u *fence.TaskUse) { u.Armed = true }), nil, true},
		{"armed in a file read without its lock", with(func(u *fence.TaskUse) { u.Armed, u.Unlocked = true, true }), nil, false},
		{"NVML at its keep and contexts", lends, procs(ctx+128*size.MiB, ctx+128*size.MiB), false},
		{"NVML past its keep and contexts", lends, procs(ctx+128*size.MiB, ctx+128*size.MiB+1), true},
		{"lends nothing", with(func(u *fence.TaskUse) { u.Keep, u.Armed = u.Cap, true }), procs(3 * size.GiB), false},
	} {
		if got := sealedBy(tc.u, tc.ps, ctx) != ""; got != tc.sealed {
			t.Errorf("%s: sealed %v, want %v", tc.name, got, tc.sealed)
		}
	}
}

// A task writes its own file, whether it is armed too: one that armed and then wrote itself
// unarmed again had the rest of its guarantee lent to borrowers once more (and could claim it
// back by having the one that borrowed most stopped, again and again). Once a pass saw it armed
// the enforcer seals it, and borrowers get none of its guarantee whatever its file says.
func TestATaskThatDisarmsItselfLendsNoMore(t *testing.T) {
	k := fencetest.Build(t)
	r, dir := lendingRig(t)
	borrower, owner, st := borrowerBeside(r, 8*size.GiB, "owner")
	o := attach(r, dir, owner.Token)
	if got := o.Charge(size.GiB); got != fence.Charged { // past its keep: armed
		t.Fatalf("the owner's first GiB: %v", got)
	}
	r.enf.Tick(t.Context())
	if u, ok := snapTask(r, owner.Token); !ok || !u.Armed || !u.Sealed {
		t.Fatalf("the owner after a pass: %+v, want armed and sealed", u)
	}
	tamper(r, k.StartTool(t), dir, owner.Token, "armed", "0")
	b := attach(r, dir, borrower.Token)
	// Unarmed, the owner would keep 1.25 GiB (its use and keep) of its 8 from borrowers: this
	// borrow reaches 5 GiB into its guarantee.
	if got := b.Charge(st.BudgetBytes - 4*size.GiB); got != fence.Refused {
		t.Fatalf("a borrow into the guarantee of an owner that wrote itself unarmed: %v, want Refused", got)
	}
	r.enf.Tick(t.Context())
	if u, ok := snapTask(r, owner.Token); !ok || u.Armed || !u.Sealed {
		t.Fatalf("the owner after another pass: %+v, want its file unarmed and still sealed", u)
	}
	if got := b.Charge(st.BudgetBytes - 10*size.GiB); got != fence.Charged {
		t.Fatalf("a borrow of what no guarantee covers: %v, want Charged", got)
	}
}

// A borrower stopped for an owner's owed wait seals the owner: an honest owner waits for its
// guarantee armed, and one that never says it is would otherwise lend it again once the
// borrower is gone.
func TestReclaimSealsTheOwner(t *testing.T) {
	r, _ := lendingRig(t)
	borrower, owner, _ := borrowerBesideOwner(r)
	r.enf.Tick(t.Context())
	if u, ok := snapTask(r, owner.Token); !ok || u.Sealed {
		t.Fatalf("the owner before it allocates: %+v, want it unsealed", u)
	}
	r.enf.apply(evictBorrower{gpu: r.uuid, token: borrower.Token, owner: owner.Token})
	r.enf.Tick(t.Context())
	if u, ok := snapTask(r, owner.Token); !ok || u.Armed || !u.Sealed {
		t.Fatalf("the owner after a borrower was stopped for it: %+v, want sealed though its file says unarmed", u)
	}
	if u, ok := snapTask(r, borrower.Token); !ok || u.Sealed {
		t.Fatalf("the borrower: %+v, want it unsealed", u)
	}
}

// A task's process may leave the GPU (or never be on it: the fence counts what its file says)
// while its file still says it borrows: an owner then finds its guarantee short and waits, and
// with no process of that task on the GPU the watchdog has nobody to stop. Two passes that find
// none of its processes there (nor any process they cannot name) mark it unseen, and the owner
// is served. Before, the owner waited out its owed wait (120 s) and was refused inside its
// guarantee. Here the borrower is a client in the test's own process, which the simulated GPU
// shows nowhere: a borrow held by no process on the GPU, in a file that agrees with itself.
func TestAnOwnerIsServedBesideABorrowNobodyHolds(t *testing.T) {
	r, dir := lendingRig(t)
	liar, owner, st := borrowerBeside(r, 40*size.GiB, "owner")
	if got := attach(r, dir, liar.Token).Charge(st.BudgetBytes - 4*size.GiB); got != fence.Charged {
		t.Fatalf("the borrow into the owner's lent guarantee: %v", got)
	}
	ownerServedAfterTheMark(t, r, dir, owner, liar)
	for _, v := range r.led.Violations() {
		t.Fatalf("a violation was recorded: %+v", v)
	}
	// The wait over, the mark goes: the borrower's word counts again, as any borrower's.
	r.enf.Tick(t.Context())
	if u, ok := snapTask(r, liar.Token); !ok || u.Unseen != 0 || u.Borrowed() == 0 {
		t.Fatalf("the borrower once no owner waits: %+v, want its borrow counted again", u)
	}
}

// A borrow is believed only as far as NVML shows it held, and only while an owner waits (no task
// may borrow more then, so no new process's borrow is hidden), after unseenAfter passes of the
// wait: up to the task's guarantee where none of its processes is on the GPU, up to what NVML
// showed them hold where that is more, and as its file says where that is no more.
func TestUnseenNow(t *testing.T) {
	b := fence.TaskUse{Cap: 2 * size.GiB, Limit: 70 * size.GiB, Used: 10 * size.GiB}
	for _, tc := range []struct {
		name   string
		u      fence.TaskUse
		waited int
		shown  size.Bytes
		want   size.Bytes
	}{
		{"two passes of the wait found none of it", b, unseenAfter, 0, 2 * size.GiB},
		{"one pass of the wait", b, unseenAfter - 1, 0, 0},
		{"no owner waits", b, 0, 0, 0},
		{"NVML shows part of its borrow", b, unseenAfter, 4 * size.GiB, 4 * size.GiB},
		{"NVML shows all of its borrow", b, unseenAfter, 10 * size.GiB, 0},
		{"within its guarantee", fence.TaskUse{Cap: 2 * size.GiB, Limit: 70 * size.GiB, Used: 2 * size.GiB}, unseenAfter, 0, 0},
		{"no borrowing allowed", fence.TaskUse{Cap: 2 * size.GiB, Limit: 2 * size.GiB, Used: 3 * size.GiB}, unseenAfter, 0, 0},
	} {
		if got := unseenNow(tc.u, tc.waited, tc.shown); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// A liar that keeps one small process on the GPU is no process-less liar: the watchdog, which
// believes a borrow only as far as NVML shows it held (short), found the owner's wait a lie and
// stopped nobody, while the fence, believing the liar's file up to its limit, kept the owner
// waiting; the owner waited out its 120 s and was refused inside its guarantee. While an owner
// waits the rules now believe a borrow as far as the watchdog does, and the owner is served.
func TestAnOwnerIsServedBesideABorrowItsProcessesDoNotHold(t *testing.T) {
	r, dir := lendingRig(t)
	liar, owner, st := borrowerBeside(r, 40*size.GiB, "owner")
	r.run(liar, "liar", "--peak", "3GiB", "--ramp", "10ms", "--hold", "1m")
	waitTask(r, liar.Token, "the liar's process charging its first block", func(u fence.TaskUse) bool { return u.Used > 0 })
	testutil.Eventually(t, waitLong, "a pass finding the liar's process on the GPU", func() bool {
		r.enf.Tick(t.Context())
		s, ok := r.enf.fence.view(r.uuid)
		u, _ := s.Task(liar.Token)
		return ok && u.Seen == 1
	})
	// The rest of its borrow a process off the GPU (the test's own) says it holds.
	if got := attach(r, dir, liar.Token).Charge(st.BudgetBytes - 6*size.GiB); got != fence.Charged {
		t.Fatalf("the borrow into the owner's lent guarantee: %v", got)
	}
	ownerServedAfterTheMark(t, r, dir, owner, liar)
	if u, ok := snapTask(r, liar.Token); !ok || u.Unseen <= liar.CapBytes || u.Unseen >= u.Used {
		t.Fatalf("the liar: %+v, want it believed up to what NVML shows, past its guarantee and short of its file", u)
	}
	for _, v := range r.led.Violations() {
		t.Fatalf("a violation was recorded: %+v", v)
	}
}

// A seal is a reservation's: the next task placed in the slot a sealed one left (a fresh token)
// lends its guarantee in its own start-up, as any. The enforcer keeps seals by token and the
// table clears a slot it gives a new task; were a seal kept by slot, every task after an armed
// one would start sealed and never lend.
func TestASealEndsWithItsReservation(t *testing.T) {
	r, dir := lendingRig(t)
	borrower, owner, st := borrowerBeside(r, 8*size.GiB, "owner")
	o := attach(r, dir, owner.Token)
	if got := o.Charge(size.GiB); got != fence.Charged {
		t.Fatalf("the owner's first GiB: %v", got)
	}
	r.enf.Tick(t.Context())
	if u, ok := snapTask(r, owner.Token); !ok || !u.Sealed {
		t.Fatalf("the owner after a pass: %+v, want sealed", u)
	}
	o.Detach()
	if err := r.led.Release(owner.Token, "done"); err != nil {
		t.Fatal(err)
	}
	r.enf.Tick(t.Context())
	if _, ok := snapTask(r, owner.Token); ok {
		t.Fatal("the ended owner is still in the table")
	}
	next := r.reserve(8*size.GiB, "next")
	r.syncFence()
	r.enf.Tick(t.Context())
	if u, ok := snapTask(r, next.Token); !ok || u.Sealed || u.Armed {
		t.Fatalf("the next task before it allocates: %+v, want it placed, unarmed and unsealed", u)
	}
	// Its guarantee is lent but for its keep: the borrow reaches 5 GiB into it.
	if got := attach(r, dir, borrower.Token).Charge(st.BudgetBytes - 4*size.GiB); got != fence.Charged {
		t.Fatalf("a borrow into the next task's guarantee in its start-up: %v, want Charged", got)
	}
}

// lendingRig is an enforcer that lends guarantees (a 256 MiB keep) with its fence in dir; the
// allowance covers the simulated context (500 MiB), which the fence does not count.
func lendingRig(t *testing.T) (*rig, string) {
	dir := t.TempDir()
	return newRig(t, policy.ModeIsolated, func(c *Config) {
		c.Fence, c.Allowance = FenceConfig{Dir: dir, LendKeep: 256 * size.MiB}, 640*size.MiB
	}), dir
}

// ownerServedAfterTheMark starts an 8 GiB allocation of owner's, which waits owed beside what
// liar says it borrows, and runs the passes the mark takes: after each but the last liar is
// still believed, and after the last the owner is served.
func ownerServedAfterTheMark(t *testing.T, r *rig, dir string, owner, liar ledger.Reservation) {
	t.Helper()
	o := attach(r, dir, owner.Token)
	got := make(chan fence.Result, 1)
	go func() { got <- o.Charge(8 * size.GiB) }()
	waitTask(r, owner.Token, "the owner owed", func(u fence.TaskUse) bool { return u.Owed })
	for i := range unseenAfter {
		r.enf.Tick(t.Context())
		if u, ok := snapTask(r, liar.Token); i < unseenAfter-1 && (!ok || u.Unseen != 0) {
			t.Fatalf("the liar after one pass of the wait: %+v, want it still believed", u)
		}
	}
	select {
	case res := <-got:
		if res != fence.Charged {
			t.Fatalf("the owner's allocation: %v, want Charged", res)
		}
	case <-time.After(waitLong):
		u, _ := snapTask(r, liar.Token)
		t.Fatalf("the owner still waits beside a borrow the liar's processes do not hold (the liar: %+v)", u)
	}
}
