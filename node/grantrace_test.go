package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// racer is the node's enforcer with two other actors driven at fixed points of an admission or
// a grant: took runs once after the refresh of what borrowers hold (a borrower takes the memory
// since), and between runs once right after the table's write has failed (a borrower frees it,
// and the watchdog's pass starts its write of the table from the ledger).
type racer struct {
	*enforcer.Enforcer
	took, between func()
	// landed waits for the watchdog's write that between started, and for what it let through.
	landed func()
}

func (g *racer) FenceUse(uuid string) (size.Bytes, bool) {
	b, w := g.Enforcer.FenceUse(uuid)
	if f := g.took; f != nil {
		g.took = nil
		f()
	}
	return b, w
}

// SyncFence is where a failed write ended while the write and its undo were two steps (the node
// wrote, then undid): nothing held the watchdog's write back until the undo, so it is let land
// here, with what it lets through.
func (g *racer) SyncFence(st ledger.GPUState) error {
	err := g.Enforcer.SyncFence(st)
	if f := g.between; err != nil && f != nil {
		g.between = nil
		f()
		g.landed()
	}
	return err
}

// SyncFenceOr runs the other actors as soon as the write has failed: the watchdog's write, in
// its own goroutine, may land no sooner than the undo.
func (g *racer) SyncFenceOr(st ledger.GPUState, undo func(error) error) error {
	return g.Enforcer.SyncFenceOr(st, func(why error) error {
		if f := g.between; f != nil {
			g.between = nil
			f()
		}
		return undo(why)
	})
}

// raceRig is a node over one simulated 80 GiB GPU whose fence's table holds a 2 GiB borrower
// (b, attached) that may borrow up to the budget; stale is the GPU's state a watchdog pass read.
type raceRig struct {
	led      *ledger.Ledger
	enf      *enforcer.Enforcer
	g        *racer
	n        *node.Node
	dir      string
	uuid     string
	borrower ledger.Reservation
	b        *fence.Client
	budget   size.Bytes
}

func newRaceRig(t *testing.T) *raceRig {
	t.Helper()
	sim, devs := testutil.NewSim(t, "H100=80GiB")
	r := &raceRig{uuid: devs[0].UUID, dir: t.TempDir()}
	led, err := ledger.Open(t.TempDir(), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	r.led = led
	if err := led.SetPolicy(policy.Default()); err != nil {
		t.Fatal(err)
	}
	if err := node.SyncGPUs(led, devs, nil); err != nil {
		t.Fatal(err)
	}
	// No borrow wait: an allocation that finds no room is refused at once (borrow now).
	if r.enf, err = enforcer.New(enforcer.Config{Backend: sim, Ledger: led, Fence: enforcer.FenceConfig{Dir: r.dir}}); err != nil {
		t.Fatal(err)
	}
	r.g = &racer{Enforcer: r.enf}
	r.n = node.New(led, r.g, node.Config{Borrow: node.BorrowNow})
	st, err := led.State(r.uuid)
	if err != nil {
		t.Fatal(err)
	}
	r.budget = st.BudgetBytes
	if r.borrower, err = led.ReserveBytes(r.uuid, 2*size.GiB, ledger.Task{}, ledger.WithLimit(st.BudgetBytes)); err != nil {
		t.Fatal(err)
	}
	return r
}

// attachBorrower writes the table and attaches the borrower's process.
func (r *raceRig) attachBorrower(t *testing.T) ledger.GPUState {
	t.Helper()
	stale, err := r.led.State(r.uuid)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.enf.SyncFence(stale); err != nil {
		t.Fatal(err)
	}
	if r.b, err = fence.Attach(r.dir, r.uuid, r.borrower.Token); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.b.Detach)
	return stale
}

// race sets the actors: after the refresh the borrower takes borrowed bytes, which leaves the
// table no room for what the node writes next; after the failed write it frees them, and the
// watchdog writes the table from stale (landed waits for that write, then for then()).
func (r *raceRig) race(t *testing.T, borrowed size.Bytes, stale ledger.GPUState, then func()) (watchdog chan error) {
	watchdog = make(chan error, 1)
	r.g.took = func() {
		if got := r.b.Charge(borrowed); got != fence.Charged {
			t.Errorf("the borrower's allocation: %d", got)
		}
	}
	r.g.between = func() {
		r.b.Uncharge(borrowed)
		go func() { watchdog <- r.enf.SyncFence(stale) }()
	}
	r.g.landed = func() {
		err := <-watchdog
		watchdog <- err
		if err == nil && then != nil {
			then()
		}
	}
	return watchdog
}

// A grant the fence's table has no room for is taken back (node.Grant), and the table must
// never let the staged task allocate it meanwhile: the watchdog's pass writes the table from the
// ledger, and a pass that came between the grant's failed write and its undo, a borrower having
// freed the memory in between, wrote the grant. The staged allocation that waited for it went
// through; the undo then put the small staged cap back, and the watchdog stopped the task for
// memory the fence had given it (under MPS a GPU-wide event).
func TestGrantTakenBackIsNeverInTheFence(t *testing.T) {
	r := newRaceRig(t)
	staged, err := r.led.ReserveBytes(r.uuid, size.GiB, ledger.Task{}, ledger.WithStage(8*size.GiB))
	if err != nil {
		t.Fatal(err)
	}
	stale := r.attachBorrower(t)
	s, err := fence.Attach(r.dir, r.uuid, staged.Token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A charge still waiting for a grant ends with its task.
		_ = r.n.Release(staged.Token, "test over")
		s.Detach()
	})
	charged := make(chan fence.Result, 1)
	go func() { charged <- s.Charge(4 * size.GiB) }() // past its staged cap: waits for the grant
	testutil.Eventually(t, 10*time.Second, "the staged allocation waiting for its grant", func() bool {
		_, stagedWaits := r.enf.FenceWaiters(r.uuid)
		return len(stagedWaits) == 1 && stagedWaits[0] == staged.Token
	})
	// Room for the staged cap beside the borrowed bytes, not for the promise.
	watchdog := r.race(t, r.budget-4*size.GiB, stale, func() {
		// The table holds the grant until the undo: the allocation goes through at its next poll.
		select {
		case res := <-charged:
			charged <- res
		case <-time.After(10 * time.Second):
		}
	})
	_, grantErr := r.n.Grant(staged)
	if r.g.between != nil {
		t.Fatalf("the grant's write never failed (%v): the test drove nothing", grantErr)
	}
	if !errors.Is(grantErr, node.ErrBorrowed) {
		t.Fatalf("the grant's refusal: %v, want ErrBorrowed", grantErr)
	}
	if err := <-watchdog; err != nil {
		t.Fatalf("the watchdog's write: %v", err)
	}
	if now, _ := r.led.Reservation(staged.Token); now.CapBytes != staged.CapBytes || now.StagedFor != staged.StagedFor {
		t.Fatalf("the staged task in the ledger: cap %s for %s, want it staged as before", now.CapBytes, now.StagedFor)
	}
	select {
	case res := <-charged:
		t.Fatalf("the staged task's allocation past its staged cap went through (result %d) while its grant was taken back: "+
			"the watchdog judges it by its staged cap", res)
	default:
	}
	if _, stagedWaits := r.enf.FenceWaiters(r.uuid); len(stagedWaits) != 1 || stagedWaits[0] != staged.Token {
		t.Fatalf("the staged allocation no longer waits for its grant: %v", stagedWaits)
	}
	// The memory is free now: the next round's grant goes through, and the allocation with it.
	if _, err := r.n.Grant(staged); err != nil {
		t.Fatalf("the grant once the borrower gave the memory back: %v", err)
	}
	if res := <-charged; res != fence.Charged {
		t.Fatalf("the staged allocation after its grant: %d", res)
	}
}

// An admission whose guarantee the fence's table has no room for is given back (node.Admit), and
// the table must not keep that guarantee: a watchdog pass between the failed write and the
// release, a borrower having freed the memory in between, wrote it, and nothing wrote the table
// again until the next pass. Meanwhile the guarantee of a task that never starts held the memory
// against the borrowers, whose allocations were refused for it.
func TestRefusedAdmissionLeavesNoGuaranteeInTheFence(t *testing.T) {
	r := newRaceRig(t)
	stale := r.attachBorrower(t)
	borrowed := r.budget - 4*size.GiB // beside the borrower's guarantee, no room for 8 GiB more
	watchdog := r.race(t, borrowed, stale, nil)
	_, err := r.n.Admit(context.Background(), node.Request{GPU: r.uuid, Cap: 8 * size.GiB})
	if r.g.between != nil {
		t.Fatalf("the admission's write never failed (%v): the test drove nothing", err)
	}
	if !errors.Is(err, node.ErrBorrowed) {
		t.Fatalf("the admission: %v, want ErrBorrowed", err)
	}
	if err := <-watchdog; err != nil {
		t.Fatalf("the watchdog's write: %v", err)
	}
	if n := len(r.led.Reservations()); n != 1 {
		t.Fatalf("%d reservations after a refused admission, want the borrower's alone", n)
	}
	if got := r.b.Charge(borrowed); got != fence.Charged {
		t.Fatalf("the borrower's allocation of the memory the refused task was to have: %d, want it charged", got)
	}
}
