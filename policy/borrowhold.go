package policy

import (
	"fmt"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// A borrower waits on a GPU when its allocation finds no memory that nobody was promised. The
// memory that comes free while it waits must go to it first: a job admitted the moment a
// neighbour ends takes that memory in milliseconds, while a borrower growing into it needs
// seconds, and then waits again (issue 25: on the H200 a leaker waited 40 s while six jobs were
// admitted onto memory that came free during its wait). So admissions on the GPU pause from the
// first wait until the borrower is served, that is, until for HoldRule.Quiet no allocation
// waited and what borrowers hold did not grow, and never longer than HoldRule.Bound unless a job
// on the GPU ends while the borrower waits or has not been quiet since, which begins a new hold
// (BorrowSeen.Freed): a borrower that will never fit does not freeze the queue, at most one hold
// per neighbour that ends; its own allocation fails inside it when the fence's wait ends and it
// climbs the ladder (Next). The ledger calls HoldRule.Hold and carries each GPU's BorrowHold, so
// both front ends, which admit only through it, hold alike: the runner reads the hold from the
// GPU's state, the plugin's fingerprint withholds the GPU's units.

// HoldRule is how long admissions on a GPU pause for a borrower that waited there.
type HoldRule struct {
	// Quiet is how long no allocation may wait and borrowers' use not grow before the borrower
	// counts as served; 0 = no hold: admissions pause only while an allocation waits.
	Quiet time.Duration
	// Bound ends a hold this long after it began, served or not.
	Bound time.Duration
	// After is how long a borrower waits, counted from its first wait since borrowers were
	// last quiet, before a hold begins: until then a job may still be admitted between its
	// waits, as without a hold. DefaultHold has none: in simulation it only let the second
	// wave's large jobs in first.
	After time.Duration
}

// DefaultHold is the hold both front ends use: docs/bench/packing-2026-12.md ("A waiting borrower goes
// first", simulated) compares it with no hold and other bounds.
var DefaultHold = HoldRule{Quiet: time.Second, Bound: 30 * time.Second}

// NoHold pauses admissions only while an allocation waits, as before issue 25.
var NoHold = HoldRule{}

// Validate names a rule that cannot work: negative times, or a hold without a bound.
func (r HoldRule) Validate() error {
	switch {
	case r.Quiet < 0 || r.Bound < 0 || r.After < 0:
		return fmt.Errorf("%w: borrower hold: quiet %s, bound %s and after %s must not be negative", ErrInvalid, r.Quiet, r.Bound, r.After)
	case r.Quiet > 0 && r.Bound < r.Quiet:
		return fmt.Errorf("%w: borrower hold: bound %s must be at least its quiet time %s", ErrInvalid, r.Bound, r.Quiet)
	}
	return nil
}

func (r HoldRule) String() string {
	if r.Quiet <= 0 {
		return "no hold (admissions pause only while an allocation waits)"
	}
	return fmt.Sprintf("hold after %s of waiting until served (%s with no wait and no growth), at most %s", r.After, r.Quiet, r.Bound)
}

// BorrowSeen is what a GPU's borrowers look like now: the bytes they hold past their
// guarantees, and whether one of their allocations waits for memory to come free.
type BorrowSeen struct {
	Borrowed size.Bytes
	Waiting  bool
	// Freed: a guarantee on the GPU ended at this look (a job on it ended), so memory comes free;
	// with a borrower waiting or busy since its wait, that begins a new hold.
	Freed bool
}

// BorrowHold is one GPU's hold, carried from one look to the next; the zero value is no hold.
type BorrowHold struct {
	// Since is when the hold began; zero: none.
	Since time.Time
	// Waits is when borrowers began to wait, the first wait since they were last quiet; zero:
	// none waited since.
	Waits time.Time
	// Busy is the last look that found an allocation waiting or borrowers' use grown.
	Busy time.Time
	// Borrowed is what borrowers held at the last look.
	Borrowed size.Bytes
	// Spent: the last hold ran to its bound; no new one begins until borrowers are quiet, so a
	// borrower that never fits cannot chain holds.
	Spent bool
}

// Held says whether a hold is on.
func (h BorrowHold) Held() bool { return !h.Since.IsZero() }

// Hold takes a look at a GPU's borrowers at now and returns the hold to carry to the next look
// and whether a new guarantee may be placed on the GPU. While an allocation waits the answer is
// always no (the fence would leave the guarantee out anyway).
func (r HoldRule) Hold(h BorrowHold, seen BorrowSeen, now time.Time) (BorrowHold, bool) {
	if r.Quiet <= 0 {
		return BorrowHold{Borrowed: seen.Borrowed}, !seen.Waiting
	}
	busy := seen.Waiting || seen.Borrowed > h.Borrowed
	h.Borrowed = seen.Borrowed
	if busy {
		h.Busy = now
	}
	// Nothing borrowed and nothing waiting: the borrower is gone, or gave back all it took.
	quiet := now.Sub(h.Busy) >= r.Quiet || !seen.Waiting && seen.Borrowed == 0
	switch {
	case quiet:
		h.Waits = time.Time{}
	case seen.Waiting && h.Waits.IsZero():
		h.Waits = now
	}
	if seen.Freed && (seen.Waiting || (h.Held() || h.Spent) && !quiet) {
		// Memory comes free while a borrower waits, or has not been quiet since it waited (a
		// hold on or spent: the look that saw it wait may be a moment old, and its growth into
		// the last freed memory may have just ended): it goes to the borrower first, also when
		// an earlier hold ran to its bound. Without this, a borrower served only by jobs ending
		// (on the H200's busy queue the leaker waited from 20 s while its neighbours' guarantees
		// covered the GPU) was passed over at every end after its first 30 s: the next job's
		// guarantee was placed before it could grow into the freed memory, and it finished 7.1x
		// slower than alone, idle memory in hand (docs/bench/packing-2026-12-03.md, busy seed 1;
		// with this rule, 3.4x: docs/bench/results.md). Each such hold needs a job to end, and
		// none is admitted while it lasts, so a borrower that never fits renews it at most once
		// per job running beside it, then fails at its fence wait.
		h.Since, h.Spent, h.Busy = now, false, now
		return h, false
	}
	switch {
	case h.Spent:
		h.Spent = !quiet
		return h, !seen.Waiting
	case !h.Held():
		if seen.Waiting && now.Sub(h.Waits) >= r.After {
			h.Since = now
		}
		return h, !seen.Waiting
	case now.Sub(h.Since) >= r.Bound:
		h.Since, h.Spent = time.Time{}, !quiet
		return h, !seen.Waiting
	case quiet:
		h.Since = time.Time{}
		return h, true
	}
	return h, false
}
