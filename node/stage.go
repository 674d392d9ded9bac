package node

import (
	"errors"
	"fmt"

	"github.com/gpufrac/gpufrac/ledger"
)

// Grant gives a staged task (ledger.WithStage) the cap it was promised: what borrowers hold is
// brought up to date, the ledger grants it under the admission rule, and the fence's table
// raises its guarantee, which lets its waiting allocation go on. Where the table has no room
// (a borrower took the memory since the ledger last heard), the grant is taken back and the
// task stays staged; the error says which step refused (ledger.ErrDenied, ErrBorrowed, ErrFence).
func (n *Node) Grant(staged ledger.Reservation) (ledger.Reservation, error) {
	n.RefreshBorrowing(staged.GPU)
	res, err := n.led.Grant(staged.Token)
	if err != nil {
		var d *ledger.DeniedError
		if errors.As(err, &d) && d.Reason == ledger.ReasonBorrowed {
			err = fmt.Errorf("%w: %w", ErrBorrowed, err)
		}
		return staged, err
	}
	if n.enf == nil {
		return res, nil
	}
	st, err := n.led.State(res.GPU)
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrFence, err)
		if uerr := n.led.Ungrant(staged); uerr != nil {
			return staged, errors.Join(err, uerr)
		}
		return staged, err
	}
	// Taken back before any other write of the table: the watchdog's, between the two, would
	// write the grant from the ledger, the task's waiting allocation would go through, and the
	// undo would leave it holding that past its staged cap, which the watchdog stops.
	ungrant := func(error) error { return n.led.Ungrant(staged) }
	if err := n.enf.SyncFenceOr(st, ungrant); err != nil {
		return staged, fenceRefused(err)
	}
	return res, nil
}

// Withdraw takes back a staged task's promise and its borrowing (ledger.Withdraw) and writes
// the fence's table, so that the allocation it waits with is refused inside its process at the
// fence's next poll: under MPS gpufrac run ends a staged job so before it stops it.
func (n *Node) Withdraw(staged ledger.Reservation) error {
	res, err := n.led.Withdraw(staged.Token)
	if err != nil {
		return err
	}
	return n.SyncFence(res.GPU)
}

// Waiters are the reservation tokens on GPU uuid whose allocations wait for memory other tasks
// hold, and those of staged tasks whose allocations wait for their grants, as the fence's table
// says now (none without the fence).
func (n *Node) Waiters(uuid string) (waiting, staged []string) {
	if !n.fenced() {
		return nil, nil
	}
	return n.enf.FenceWaiters(uuid)
}
