package ledger

import (
	"fmt"
	"time"

	"github.com/gpufrac/gpufrac/policy"
)

// The borrower hold lives here so that both front ends, which admit only through the ledger,
// make the same decision on the same inputs (issue 21): gpufrac run's scheduler reads GPUState,
// the plugin's fingerprint advertises its instances, and Reserve/ReserveBytes refuse while the
// hold is on. The rule is policy.HoldRule's; the ledger carries each GPU's BorrowHold from one
// look to the next, a look being SetBorrowed or any read of the GPU's state, at the ledger's
// clock. A hold that ends by time (served: quiet; or its bound) ends with no look of anyone's,
// so a timer takes that look and wakes the subscribers: the plugin offers the units again then,
// not at the next unrelated change.

// SetLending says whether guarantees are lent (enforcer.BorrowLend): then admission counts
// guarantees alone, advertises no free unit as held by borrowers, and pauses for no borrower's
// wait or hold. The fence places a new guarantee on what borrowers hold (its keep must be free,
// which borrowers leave) and lends all but its keep back to them until its task allocates; a
// guarantee it cannot place undoes the admission, as before.
func (l *Ledger) SetLending(on bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if l.st.lend != on {
		l.st.lend = on
		l.cache = nil
		l.changed.Publish(struct{}{})
	}
	return nil
}

// SetBorrowHold makes r the rule for pausing admissions on a GPU where a borrower waited;
// policy.NoHold (the zero rule, and the default) pauses them only while an allocation waits.
func (l *Ledger) SetBorrowHold(r policy.HoldRule) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	l.holdRule = r
	now := l.now()
	for u := range l.st.gpus {
		l.advanceHold(u, now)
	}
	return nil
}

// StuckWait is how long a borrower's wait lasts before lending stops on its GPU (BorrowStuck):
// the lend grace's bound (enforcer.DefaultLendGrace, policy.DefaultHold's), what an owner placed
// on its memory would wait before the reclaim took its run. On the start-up queue the leaker's
// waits took 1-2 s; on the busy queue, simulated, 61 s at a stretch, and jobs placed on the
// memory each first-wave end had just given it cost it its run (docs/bench/results.md).
const StuckWait = 30 * time.Second

// lookStuck carries rec's stuck mark to now: a wait that lasted StuckWait sets it, and it holds
// until the GPU's borrowers hold nothing and wait for nothing. It says whether the mark changed.
func lookStuck(rec *gpuRec, now time.Time) bool {
	switch {
	case !rec.BorrowWaiting:
		rec.waitFrom = time.Time{}
	case rec.waitFrom.IsZero():
		rec.waitFrom = now
	}
	stuck := rec.stuck || !rec.waitFrom.IsZero() && now.Sub(rec.waitFrom) >= StuckWait
	if rec.Borrowed == 0 && !rec.BorrowWaiting {
		stuck = false
	}
	changed := stuck != rec.stuck
	rec.stuck = stuck
	return changed
}

// advanceHold takes a look at uuid's borrowers at now: it carries the GPU's hold forward,
// invalidates the cache and wakes subscribers when the hold began or ended, and arms the timer
// for the instant it may end. Called with l.mu held.
func (l *Ledger) advanceHold(uuid string, now time.Time) { l.lookHold(uuid, now, false) }

// lookHold is advanceHold's look; freed says a guarantee on the GPU just ended (end), which
// renews the hold of a borrower that waits (policy.HoldRule.Hold). Called with l.mu held.
func (l *Ledger) lookHold(uuid string, now time.Time, freed bool) {
	rec, ok := l.st.gpus[uuid]
	if !ok {
		return
	}
	h, _ := l.holdRule.Hold(rec.hold, policy.BorrowSeen{Borrowed: rec.Borrowed, Waiting: rec.BorrowWaiting, Freed: freed}, now)
	was := rec.hold.Held()
	rec.hold = h
	stuckChanged := lookStuck(&rec, now)
	l.st.gpus[uuid] = rec
	if stuckChanged {
		l.cache = nil
		l.changed.Publish(struct{}{})
		l.log.Debug("borrower stuck", "gpu", uuid, "stuck", rec.stuck, "borrowed", rec.Borrowed.String())
	}
	if rec.BorrowWaiting && !rec.stuck {
		l.wakeHoldAt(rec.waitFrom.Add(StuckWait), now)
	}
	if h.Held() != was {
		l.cache = nil
		l.changed.Publish(struct{}{})
		l.log.Debug("borrower hold", "gpu", uuid, "held", h.Held(), "borrowed", rec.Borrowed.String(), "waiting", rec.BorrowWaiting)
	}
	if h.Held() {
		due := h.Since.Add(l.holdRule.Bound)
		if q := h.Busy.Add(l.holdRule.Quiet); q.Before(due) {
			due = q
		}
		l.wakeHoldAt(due, now)
	}
}

// wakeHoldAt arms the hold timer for at unless it is already due earlier. Called with l.mu held.
func (l *Ledger) wakeHoldAt(at, now time.Time) {
	if l.closed || !l.holdWake.IsZero() && !at.Before(l.holdWake) {
		return
	}
	l.holdWake = at
	d := max(at.Sub(now), 0)
	if l.holdTimer == nil {
		l.holdTimer = time.AfterFunc(d, l.holdDue)
		return
	}
	l.holdTimer.Reset(d)
}

// holdDue takes the look a hold's end by time needs.
func (l *Ledger) holdDue() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.holdWake = time.Time{}
	now := l.now()
	for u := range l.st.gpus {
		l.advanceHold(u, now)
	}
}
