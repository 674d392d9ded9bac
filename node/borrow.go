package node

import (
	"cmp"
	"fmt"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/policy"
)

// Borrowing settings (docs/run.md, "Caps that lend what nobody uses"; docs/plugin.md): the
// enforcer's rules as the operator writes them, and auto. The plugin's `borrow` and `gpufrac run --borrow` take them.
const (
	// BorrowAuto is BorrowWait wherever borrowing can be safe (the allocation fence on, the GPU
	// in isolated mode), else off.
	BorrowAuto = "auto"
	BorrowOff  = string(enforcer.BorrowOff)
	BorrowNow  = string(enforcer.BorrowNow)
	BorrowWait = string(enforcer.BorrowWait)
	// BorrowLend lends borrowers the guarantees of tasks still in their start-up; when such a
	// task allocates and its bytes are not free, the borrowers give them back. Not the default:
	// in simulation the leaker's loans came due and its re-run cost more than waiting
	// (docs/benchmarks.md).
	BorrowLend = string(enforcer.BorrowLend)
)

// DefaultBorrow is both front ends' borrowing when none is asked for. Auto, that is wait where
// the fence holds caps on an isolated GPU: measured, it packed the benchmark's queues with no
// job harmed and the leaker done in one attempt (docs/benchmarks.md, docs/enforcement.md).
const DefaultBorrow = BorrowAuto

// DefaultBorrowWait bounds a borrower's wait.
const DefaultBorrowWait = enforcer.DefaultBorrowWait

// CheckBorrow is the one rule for a borrowing setting ("" = DefaultBorrow).
func CheckBorrow(b string) error {
	if b == "" || b == BorrowAuto {
		return nil
	}
	if enforcer.BorrowRule(b).Check() != nil {
		return fmt.Errorf("borrow %q: want %s, %s, %s, %s or %s", b, BorrowAuto, BorrowWait, BorrowNow, BorrowLend, BorrowOff)
	}
	return nil
}

// Borrowing is a node's borrowing as PlanBorrowing decided it.
type Borrowing struct {
	// Rule is an enforcer borrowing rule; BorrowOff when tasks do not borrow.
	Rule string
	// Wait bounds a borrower's allocation's wait (BorrowWait, BorrowLend).
	Wait time.Duration
	// Note says what was decided and why, for a command's first lines.
	Note string
	// MPS: tasks borrow on mps-mode GPUs too, asked for by name (never by auto): the fence holds
	// their caps and borrowing, and each client's pinned limit is the GPU's budget instead of
	// its cap. Opt-in because the driver's limit then no longer backs the fence up
	// (docs/enforcement.md, "Borrowing under MPS", with what the H200 and H100 measured).
	MPS bool
}

// On says whether tasks may borrow.
func (b Borrowing) On() bool { return b.Rule != "" && b.Rule != BorrowOff }

// PlanBorrowing decides borrowing from what was asked ("" = DefaultBorrow). Borrowing needs the
// fence: only it can refuse an allocation that would reach into a neighbour's guarantee (the
// watchdog only sees use after it happened). Under MPS a client's pinned limit is fixed when it
// starts, so auto leaves a cap there the most a task may use; wait or now asked for by name
// borrow under MPS too, the pinned limit raised to the budget and the fence holding the rest.
// mode is the GPUs' mode where one is known for all of them, or "" where each GPU's is (Admit
// then lends on isolated GPUs only).
// offWhy, when set, turns borrowing off for that reason (the benchmark's arms without it).
func PlanBorrowing(asked string, fenced bool, mode policy.Mode, wait time.Duration, offWhy string) Borrowing {
	if asked == "" {
		asked = DefaultBorrow
	}
	named := asked != BorrowAuto
	if asked == BorrowAuto {
		asked = BorrowWait
	}
	off := func(why string) Borrowing {
		return Borrowing{Rule: BorrowOff, Note: "borrowing: off (" + why + "): a job that outgrows its cap is re-run with more room"}
	}
	switch {
	case asked == BorrowOff:
		return off("asked for")
	case offWhy != "":
		return off(offWhy)
	case !fenced:
		return off("the allocation fence is off")
	case mode == policy.ModeMPS && !named:
		return off("mps mode: a client's pinned limit is fixed at its start; --borrow wait asks for it")
	case mode == policy.ModeMPS && asked == BorrowLend:
		return off("mps mode: lend stops borrowers, and a stop under MPS can fault their neighbours")
	}
	if mode != policy.ModeMPS {
		return onRule(asked, wait, "borrowing: on")
	}
	// The same rule, with the fence holding each cap where a pinned limit held it.
	b := onRule(asked, wait, "borrowing: on under mps, asked for (the driver's pinned limit no longer backs the fence up)")
	b.MPS = true
	b.Note += "; each client's pinned limit is the GPU's budget, and the fence holds its cap"
	return b
}

// onRule is the Borrowing of a rule that borrows (wait, now or lend), with its note after on.
func onRule(rule string, wait time.Duration, on string) Borrowing {
	if rule == BorrowNow {
		return Borrowing{Rule: rule, Note: on + " (a job may use memory no other job's guarantee covers, up to the GPU's budget; an allocation that finds none free fails inside the job)"}
	}
	wait = cmp.Or(max(wait, 0), DefaultBorrowWait)
	if rule == BorrowLend {
		return Borrowing{Rule: rule, Wait: wait, Note: fmt.Sprintf(on+", lending (a job may use memory no started job's guarantee covers, up to the GPU's budget, "+
			"and a starting job's guarantee but for what it uses and %s, until its use passes that; an allocation of the job that finds its guarantee held waits up to %s for the borrowers to end, then they give it back; "+
			"an allocation that finds none free waits up to %s while nothing new starts on its GPU)", enforcer.DefaultLendKeep, enforcer.DefaultLendGrace, wait)}
	}
	return Borrowing{Rule: rule, Wait: wait, Note: fmt.Sprintf(on+" (a job may use memory no other job's guarantee covers, up to the GPU's budget; "+
		"an allocation that finds none free waits up to %s while nothing new starts on its GPU)", wait)}
}
