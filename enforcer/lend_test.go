package enforcer

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// A borrower that took the guarantee of a job still in its start-up, and holds it without
// allocating more, is stopped once that job needs its memory: the owner waits in its own
// allocation meanwhile and finishes with its own result; the borrower's loss is recorded as
// its violation.
func TestBorrowerThatHoldsALoanIsStopped(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, policy.ModeIsolated, func(c *Config) {
		// The allowance covers the simulated context (500 MiB), which the fence does not count.
		c.Fence, c.Allowance = FenceConfig{Dir: dir, BorrowWait: time.Minute, LendKeep: 256 * size.MiB}, 640*size.MiB
	})
	r.start()
	borrower, owner, _ := borrowerBesideOwner(r)
	// The owner has not allocated: the borrower may take all but 256 MiB of its guarantee.
	b := r.run(borrower, "borrower", "--peak", "60GiB", "--ramp", "200ms", "--hold", "2m")
	waitTask(r, borrower.Token, "the borrower holding 60 GiB", func(tu fence.TaskUse) bool { return tu.Used >= 59*size.GiB })
	// Now the owner starts: 30 GiB of its 40 do not fit beside the borrower's 60.
	o := r.run(owner, "owner", "--peak", "30GiB", "--ramp", "200ms", "--hold", "100ms", "--seed", "5")
	o.checkResult(t, 5)
	if code := b.wait(t); code == 0 || b.killedBy() != syscall.SIGKILL {
		t.Fatalf("borrower: exit %d, signal %v; want stopped by SIGKILL; output:\n%s", code, b.killedBy(), b.out.String())
	}
	v := r.violation(borrower.Token)
	if v.Action != ActionSIGKILL || !v.Reclaimed || !strings.Contains(v.Detail, "guarantee needed back") {
		t.Fatalf("the borrower's violation: %+v", v)
	}
	if s := r.sent(o.cmd.Process.Pid); len(s) != 0 {
		t.Fatalf("the owner was sent %v", s)
	}
	if u, _ := r.enf.fence.view(r.uuid); u.Owed() {
		t.Fatalf("an owner still waits after the borrower left: %+v", u.Tasks)
	}
	if tu, ok := snapTask(r, owner.Token); !ok || tu.OwedWaits == 0 {
		t.Fatalf("the owner's task in the fence: %+v: want one allocation that waited for its guarantee", tu)
	}
}

// borrowerBesideOwner reserves, on the rig's GPU, a 2 GiB guarantee that may borrow up to the
// budget and a 40 GiB owner beside it, and writes both into the fence; st is the GPU after that.
func borrowerBesideOwner(r *rig) (borrower, owner ledger.Reservation, st ledger.GPUState) {
	r.t.Helper()
	return borrowerBeside(r, 40*size.GiB, "owner")
}

// borrowerBeside is borrowerBesideOwner with an owner (job) of ownerCap.
func borrowerBeside(r *rig, ownerCap size.Bytes, job string) (borrower, owner ledger.Reservation, st ledger.GPUState) {
	r.t.Helper()
	st, err := r.led.State(r.uuid)
	if err != nil {
		r.t.Fatal(err)
	}
	if borrower, err = r.led.ReserveBytes(r.uuid, 2*size.GiB, ledger.Task{}, ledger.WithLimit(st.BudgetBytes)); err != nil {
		r.t.Fatal(err)
	}
	owner = r.reserve(ownerCap, job)
	return borrower, owner, r.syncFence()
}

// attach is a client of task token in the rig GPU's fence in dir, detached when the test ends.
func attach(r *rig, dir, token string) *fence.Client {
	r.t.Helper()
	c, err := fence.Attach(dir, r.uuid, token)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(c.Detach)
	return c
}

// tamper writes field of task token's accounting file (the rig GPU's, in dir) as the task may,
// around the fence: through tool, a fencetest tool process.
func tamper(r *rig, tool *fencetest.Proc, dir, token, field, value string) {
	r.t.Helper()
	if got := tool.Do("tamper " + fence.AccountPath(dir, token, r.uuid) + " " + field + " " + value + " " + token); got != "ok" {
		r.t.Fatalf("tamper %s %s: %q", field, value, got)
	}
}

// waitTask waits until task token of the rig's GPU, as the fence sees it, meets cond.
func waitTask(r *rig, token, what string, cond func(fence.TaskUse) bool) {
	r.t.Helper()
	testutil.Eventually(r.t, waitLong, what, func() bool {
		u, ok := snapTask(r, token)
		return ok && cond(u)
	})
}

// snapTask is one task of the rig's GPU as the fence sees it now.
func snapTask(r *rig, token string) (u fence.TaskUse, ok bool) {
	s, found := r.enf.fence.view(r.uuid)
	if !found {
		return u, false
	}
	return s.Task(token)
}

// With a grace, the same borrower that ends while the owner's first allocation waits keeps its
// run: nobody is stopped, nothing is recorded against it, and the owner is served when the
// borrower's memory comes back.
func TestBorrowerThatEndsWithinTheGraceKeepsItsRun(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, policy.ModeIsolated, func(c *Config) {
		c.Fence, c.Allowance = FenceConfig{Dir: dir, BorrowWait: time.Minute, LendKeep: 256 * size.MiB, LendGrace: time.Minute}, 640*size.MiB
	})
	r.start()
	borrower, owner, _ := borrowerBesideOwner(r)
	b := r.run(borrower, "borrower", "--peak", "60GiB", "--ramp", "200ms", "--hold", "3s")
	waitTask(r, borrower.Token, "the borrower holding 60 GiB", func(tu fence.TaskUse) bool { return tu.Used >= 59*size.GiB })
	o := r.run(owner, "owner", "--peak", "30GiB", "--ramp", "200ms", "--hold", "100ms", "--seed", "5")
	waitTask(r, owner.Token, "the owner waiting out its grace", func(tu fence.TaskUse) bool { return tu.Waiting && !tu.Owed })
	if code := b.wait(t); code != 0 {
		t.Fatalf("borrower: exit %d (signal %v), want 0; output:\n%s", code, b.killedBy(), b.out.String())
	}
	o.checkResult(t, 5)
	if tu, ok := snapTask(r, owner.Token); ok && tu.OwedWaits != 0 {
		t.Fatalf("the owner was owed: %+v; want served within its grace", tu)
	}
	for _, v := range r.led.Violations() {
		t.Fatalf("a violation was recorded: %+v", v)
	}
}

// Without lending, where memory of a process without a reservation shrank the budget under a
// borrower, an owner's guarantee no longer fits beside what the borrower holds: the fence makes
// its next allocation wait (owed), however small, and the watchdog stops the borrower, though
// NVML shows that allocation would fit. The owner finishes with its own result. Before, the
// watchdog believed the owner's wait only where NVML's free memory was short of the allocation:
// no pass stopped the borrower, and the owner's allocation, within its guarantee, waited for as
// long as the borrower ran (the fence refuses it after its owed wait, 120 s).
func TestOwnerOwedWhereTheBudgetShrankHasTheBorrowerStopped(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, policy.ModeIsolated, func(c *Config) {
		// The allowance covers the simulated context (500 MiB), which the fence does not count.
		c.Fence, c.Allowance = FenceConfig{Dir: dir, BorrowWait: time.Minute}, 640*size.MiB
	})
	r.start()
	borrower, owner, st := borrowerBesideOwner(r)
	b := r.run(borrower, "borrower", "--peak", "30GiB", "--ramp", "200ms", "--hold", "30s")
	waitTask(r, borrower.Token, "the borrower holding 30 GiB", func(tu fence.TaskUse) bool { return tu.Used >= 29*size.GiB })
	rogue := r.run(ledger.Reservation{}, "rogue", "--peak", "20GiB", "--ramp", "100ms", "--hold", "1m")
	defer rogue.cmd.Process.Kill()
	// 20 GiB less: the owner's 40 beside the borrower's 29.5 no longer fit.
	testutil.Eventually(t, waitLong, "the budget shrunk under the borrower", func() bool {
		s, ok := r.enf.fence.view(r.uuid)
		return ok && s.Budget <= st.BudgetBytes-19*size.GiB
	})
	o := r.run(owner, "owner", "--peak", "5GiB", "--ramp", "200ms", "--hold", "100ms", "--seed", "5")
	waitTask(r, owner.Token, "the owner owed", func(tu fence.TaskUse) bool { return tu.OwedWaits > 0 })
	if code := b.wait(t); code == 0 || b.killedBy() != syscall.SIGKILL {
		t.Fatalf("borrower: exit %d, signal %v; want stopped by SIGKILL; output:\n%s", code, b.killedBy(), b.out.String())
	}
	if v := r.violation(borrower.Token); v.Action != ActionSIGKILL || !v.Reclaimed {
		t.Fatalf("the borrower's violation: %+v", v)
	}
	o.checkResult(t, 5)
	if s := r.sent(o.cmd.Process.Pid); len(s) != 0 {
		t.Fatalf("the owner was sent %v", s)
	}
}
