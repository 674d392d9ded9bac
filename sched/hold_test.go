package sched

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node/nodetest"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// holdStep is one admission round: the fence as it looks then, at ms on the run's clock, and
// the jobs the round must admit.
type holdStep struct {
	ms       int
	borrowed size.Bytes
	waiting  bool
	want     string
}

// Memory that comes free while a borrower waits goes to the borrower: with the hold, no job is
// admitted between its waits while it grows into what a neighbour freed; without it (the rule
// before issue 25) the first round after the neighbour ended admitted a job onto that memory.
// A borrower that never gets enough holds the GPU no longer than the bound. The hold is the
// ledger's (the plugin's too): the run gives it the rule and the clock, the scheduler follows.
func TestSchedServesAWaitingBorrowerFirst(t *testing.T) {
	const G = size.GiB
	hold := policy.HoldRule{Quiet: time.Second, Bound: 10 * time.Second}
	tests := []struct {
		name  string
		rule  policy.HoldRule
		steps []holdStep
	}{
		{"no hold: a new job takes the freed memory", policy.NoHold, []holdStep{
			{0, 40 * G, true, "[]"}, {100, 42 * G, false, "[a]"}}},
		{"hold: the borrower grows first", hold, []holdStep{
			{0, 40 * G, true, "[]"},
			{100, 42 * G, false, "[]"}, // a neighbour ended: its memory is the borrower's
			{600, 52 * G, false, "[]"},
			{1500, 52 * G, false, "[]"},
			{1600, 52 * G, false, "[a]"}, // a second without a wait or growth: served
		}},
		// The ledger takes a look whenever it is read, the round's first read included, so a
		// borrower quiet for a second between two rounds is served (held no more) even when
		// it waits again at the next: this one waits from 0 to 9.9 s.
		{"hold: a borrower that never gets enough waits out the bound, then the queue goes on", hold, []holdStep{
			{0, 40 * G, true, "[]"}, {500, 41 * G, true, "[]"}, {5000, 41 * G, true, "[]"}, {9900, 42 * G, false, "[]"},
			{10000, 42 * G, true, "[]"}, {10100, 43 * G, false, "[a]"}}},
	}
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lend := &nodetest.Fence{}
			var now time.Time
			led, uuid := memLedgerOpts(t, 80*G, ledger.Options{Now: func() time.Time { return now }, BorrowHold: tc.rule})
			s := borrowSchedOn(led, uuid, lend, known("a")...)
			for _, st := range tc.steps {
				now = t0.Add(time.Duration(st.ms) * time.Millisecond)
				lend.Set(st.borrowed, st.waiting)
				if got := fmt.Sprint(names(s.Next())); got != st.want {
					t.Fatalf("at %d ms (borrowed %s, waiting %v): admitted %s, want %s", st.ms, st.borrowed, st.waiting, got, st.want)
				}
			}
		})
	}
}
