package enforcer

import (
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
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
	dir := t.TempDir()
	r := newRig(t, policy.ModeIsolated, func(c *Config) {
		c.Fence, c.Allowance = FenceConfig{Dir: dir, LendKeep: 256 * size.MiB}, 640*size.MiB
	})
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
	dir := t.TempDir()
	r := newRig(t, policy.ModeIsolated, func(c *Config) {
		c.Fence, c.Allowance = FenceConfig{Dir: dir, LendKeep: 256 * size.MiB}, 640*size.MiB
	})
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
