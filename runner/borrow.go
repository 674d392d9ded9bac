package runner

import (
	"errors"
	"fmt"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// Borrowing settings of Options.Borrow (docs/run.md, "Caps that lend what nobody uses"): the
// enforcer's rules, and auto.
const (
	// BorrowAuto is BorrowWait wherever borrowing can be safe (the packed arm, isolated mode,
	// the allocation fence on), else off.
	BorrowAuto = "auto"
	BorrowOff  = string(enforcer.BorrowOff)
	BorrowNow  = string(enforcer.BorrowNow)
	BorrowWait = string(enforcer.BorrowWait)
	// BorrowLend lends borrowers the guarantees of jobs still in their start-up; when such a
	// job allocates and its bytes are not free, the borrowers give them back (the fence
	// refuses them more, the watchdog stops the one that borrowed most if it holds on): the
	// borrower, never the owner, pays for a loan that comes due. Not the default: in
	// simulation the leaker's loans came due and its re-run cost more than waiting
	// (docs/benchmarks.md).
	BorrowLend = string(enforcer.BorrowLend)
)

// DefaultBorrowWait bounds a borrower's wait.
const DefaultBorrowWait = enforcer.DefaultBorrowWait

// CheckBorrow is the one rule for a borrowing setting ("" = auto).
func CheckBorrow(b string) error {
	if b == "" || b == BorrowAuto {
		return nil
	}
	if enforcer.BorrowRule(b).Check() != nil {
		return fmt.Errorf("borrow %q: want %s, %s, %s, %s or %s", b, BorrowAuto, BorrowWait, BorrowNow, BorrowLend, BorrowOff)
	}
	return nil
}

// borrowPlan is a run's borrowing as borrowing decided it.
type borrowPlan struct {
	rule string // an enforcer borrowing rule; BorrowOff when jobs do not borrow
	note string // the run's first lines say it
}

func (p borrowPlan) on() bool { return p.rule != BorrowOff }

// borrowing decides a run's borrowing and says why, for the run's first lines. Borrowing needs
// the fence: only it can refuse an allocation that would reach into a neighbour's guarantee
// (the watchdog only sees use after it happened). Under MPS a client's pinned limit is fixed
// when it starts, so a cap there stays the most a job may use.
func borrowing(o *Options, fenced bool) borrowPlan {
	asked := o.Borrow
	if asked == "" || asked == BorrowAuto {
		asked = BorrowWait
	}
	off := func(why string) borrowPlan {
		return borrowPlan{rule: BorrowOff, note: "borrowing: off (" + why + "): a job that outgrows its cap is re-run with more room"}
	}
	switch {
	case asked == BorrowOff:
		return off("asked for")
	case o.Arm != record.ArmPacked:
		return off("the " + string(o.Arm) + " arm")
	case o.modeOf() != policy.ModeIsolated:
		return off("mps mode: a client's pinned limit is fixed at its start")
	case !fenced:
		return off("the allocation fence is off")
	case asked == BorrowNow:
		return borrowPlan{rule: asked, note: "borrowing: on (a job may use memory no other job's guarantee covers, up to the GPU's budget; an allocation that finds none free fails inside the job)"}
	}
	wait := o.BorrowWait
	if wait <= 0 {
		wait = DefaultBorrowWait
	}
	if asked == BorrowLend {
		return borrowPlan{rule: asked, note: fmt.Sprintf("borrowing: on, lending (a job may use memory no started job's guarantee covers, up to the GPU's budget, "+
			"and a starting job's guarantee but for %s until it allocates, when borrowers give it back; "+
			"an allocation that finds none free waits up to %s while nothing new starts on its GPU)", enforcer.DefaultLendKeep, wait)}
	}
	return borrowPlan{rule: asked, note: fmt.Sprintf("borrowing: on (a job may use memory no other job's guarantee covers, up to the GPU's budget; "+
		"an allocation that finds none free waits up to %s while nothing new starts on its GPU)", wait)}
}

// lender is what the scheduler needs of the fence to let jobs borrow.
type lender interface {
	// FenceUse is what tasks on a GPU hold past their guarantees, and whether an allocation
	// there waits for memory to come free.
	FenceUse(uuid string) (size.Bytes, bool)
	SyncFence(st ledger.GPUState) error
}

// lend counts what borrowers hold as reserved, since admission must not promise it again, and
// freezes the GPUs where an allocation waits for memory: a new job would take what it waits for.
func (s *sched) lend(states map[string]ledger.GPUState) {
	clear(s.frozen)
	clear(s.refused)
	if s.lender == nil {
		return
	}
	for _, g := range s.gpus {
		b, waiting := s.lender.FenceUse(g)
		st := states[g]
		st.ReservedBytes += b
		states[g] = st
		if waiting {
			s.frozen[g] = true
		}
	}
}

// place writes a new reservation into its GPU's fence table before its job starts. The table
// is the last word: a borrower may have taken the memory since lend looked, and then the
// reservation is given back and the job waits for its turn.
func (s *sched) place(res ledger.Reservation) bool {
	if s.lender == nil {
		return true
	}
	st, err := s.led.State(res.GPU)
	if err == nil {
		err = s.lender.SyncFence(st)
	}
	if err == nil || !errors.Is(err, fence.ErrNoRoom) {
		return true // other fence faults are the watchdog's to cover, as without borrowing
	}
	s.refused[res.GPU] = err
	// The table left the task out and holds the others: giving the reservation back makes
	// the ledger match it again.
	if rerr := s.led.Release(res.Token, "no room in the fence"); rerr != nil {
		s.log.Warn("giving back a reservation the fence had no room for", "gpu", res.GPU, "error", rerr)
	}
	s.log.Debug("borrowers hold what the job's guarantee would cover; it waits", "gpu", res.GPU, "job", res.Task.JobName, "why", err)
	return false
}

// fenceRefusal is a refusal of the fence still standing on some GPU (the first in order), or nil.
func (s *sched) fenceRefusal() error {
	for _, g := range s.gpus {
		if err := s.refused[g]; err != nil {
			return err
		}
	}
	return nil
}

// limitFor is the most a job may hold on a GPU in state st: the GPU's budget when it borrows.
func (s *sched) limitFor(st ledger.GPUState) []ledger.ReserveOption {
	if s.lender == nil {
		return nil
	}
	return []ledger.ReserveOption{ledger.WithLimit(st.BudgetBytes)}
}

// probeGuarantee is what a probe that borrows is promised: what any job needs before its first
// allocation (the policy's cap of nothing: the margin that covers a CUDA context), at least one
// unit; the ledger rounds it up to whole units like every cap. It measures its footprint on
// what it borrows, so it keeps no memory from jobs whose caps are known.
func (s *sched) probeGuarantee(st ledger.GPUState) size.Bytes {
	return max(s.pol.Cap(0), st.UnitBytes)
}
