package policy

import (
	"errors"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// look is one look at a GPU's borrowers, at ms milliseconds, and the answer the rule must give.
type look struct {
	ms       int
	borrowed size.Bytes
	waiting  bool
	admit    bool
}

func TestHold(t *testing.T) {
	const G = size.GiB
	rule := HoldRule{Quiet: time.Second, Bound: 30 * time.Second}
	patient := HoldRule{Quiet: time.Second, Bound: 30 * time.Second, After: 5 * time.Second}
	// trickle is a borrower that never gets enough: it waits, is served a little, waits again,
	// every 500 ms for 40 s.
	var trickle []look
	for ms := 0; ms <= 40000; ms += 500 {
		trickle = append(trickle, look{ms: ms, borrowed: size.Bytes(ms) * size.MiB, waiting: ms%1000 == 0,
			admit: ms%1000 != 0 && ms >= 30000})
	}
	tests := []struct {
		name  string
		rule  HoldRule
		looks []look
	}{
		{"nobody borrows", rule, []look{{0, 0, false, true}, {5000, 0, false, true}}},
		{"a borrower grows into free memory: no wait, no hold", rule, []look{{0, 5 * G, false, true}, {100, 9 * G, false, true}}},
		{"no hold: admissions pause only while an allocation waits", NoHold, []look{
			{0, 10 * G, true, false}, {100, 12 * G, false, true}, {200, 14 * G, true, false}}},
		{"a waiting borrower is served first: the hold lasts while it grows, then a quiet second", rule, []look{
			{0, 10 * G, true, false},    // it waits: the hold begins
			{100, 12 * G, false, false}, // a neighbour ended; the borrower grows into what it freed
			{900, 30 * G, false, false},
			{1800, 30 * G, false, false}, // 0.9 s quiet: not yet served
			{1900, 30 * G, false, true},  // a second with no wait and no growth: served
			{2000, 30 * G, false, true},
		}},
		{"a borrower that ends (nothing borrowed, nothing waits) releases the hold at once", rule, []look{
			{0, 10 * G, true, false}, {200, 0, false, true}}},
		{"a hold begins once the borrower has waited After, counted from its first wait", patient, []look{
			{0, 10 * G, true, false},
			{100, 12 * G, false, true}, // 0.1 s into its waits: a job may still be admitted
			{4000, 20 * G, true, false},
			{4100, 22 * G, false, true},
			{5000, 22 * G, true, false}, // 5 s: the hold begins
			{5100, 24 * G, false, false},
			{6200, 24 * G, false, true}, // served
			{7300, 24 * G, true, false}, // a new episode: admissions between its waits again
			{7400, 26 * G, false, true},
		}},
		{"a borrower that never fits holds no longer than the bound and chains no new hold", rule, trickle},
		{"after a spent hold and a quiet second a new wait holds again", rule, []look{
			{0, G, true, false}, {30000, 2 * G, false, true}, {30500, 3 * G, true, false}, {30600, 3 * G, false, true},
			{31600, 3 * G, false, true}, {31700, 3 * G, true, false}, {31800, 4 * G, false, false}}},
	}
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			replay(t, tc.rule, len(tc.looks), func(i int) (BorrowSeen, time.Time, bool) {
				l := tc.looks[i]
				return BorrowSeen{Borrowed: l.borrowed, Waiting: l.waiting}, t0.Add(time.Duration(l.ms) * time.Millisecond), l.admit
			})
		})
	}
}

// replay gives rule n looks, look(i) saying what the i-th sees, when, and whether it must
// admit, and fails at the first answer that is not the one wanted.
func replay(t *testing.T, rule HoldRule, n int, look func(i int) (BorrowSeen, time.Time, bool)) {
	t.Helper()
	var h BorrowHold
	for i := range n {
		seen, at, want := look(i)
		var admit bool
		h, admit = rule.Hold(h, seen, at)
		if admit != want {
			t.Fatalf("look %d at %s (%+v): admit %v, want %v (hold %+v)", i, at.Format("15:04:05.000"), seen, admit, want, h)
		}
	}
}

// A job that ends while a borrower waits frees memory that goes to the borrower first, also
// after its hold ran to its bound (the H200's busy seed 1: the leaker, served only by its
// neighbours' ends, was passed over at each of them).
func TestHoldRenewsWhenAJobEndsDuringTheWait(t *testing.T) {
	const G = size.GiB
	rule := HoldRule{Quiet: time.Second, Bound: 30 * time.Second}
	tests := []struct {
		name  string
		looks []BorrowSeen // one every 500 ms
		admit []bool
	}{
		{"spent hold, then a job ends while it waits: held while it grows, then a quiet second",
			append(waits(61, G), // 30 s of waiting: the hold runs to its bound
				BorrowSeen{Borrowed: G, Waiting: true, Freed: true},
				BorrowSeen{Borrowed: 20 * G}, BorrowSeen{Borrowed: 40 * G}, BorrowSeen{Borrowed: 40 * G},
				BorrowSeen{Borrowed: 40 * G}, BorrowSeen{Borrowed: 40 * G}),
			append(falses(61), false, false, false, false, true, true)},
		{"spent hold, the borrower growing, not waiting, when a job ends: held while it grows",
			append(waits(61, G), BorrowSeen{Borrowed: 2 * G}, // served a little: it grows, the hold spent
				BorrowSeen{Borrowed: 3 * G, Freed: true}, // a job ends as it grows
				BorrowSeen{Borrowed: 30 * G}, BorrowSeen{Borrowed: 30 * G}, BorrowSeen{Borrowed: 30 * G},
				BorrowSeen{Borrowed: 30 * G}),
			append(falses(61), true, false, false, false, true, true)},
		{"spent hold, the borrower quiet for a second, when a job ends: no new hold",
			append(waits(61, G), BorrowSeen{Borrowed: 2 * G}, BorrowSeen{Borrowed: 2 * G}, BorrowSeen{Borrowed: 2 * G},
				BorrowSeen{Borrowed: 2 * G}, BorrowSeen{Borrowed: 2 * G, Freed: true}),
			append(falses(61), true, true, true, true, true)},
		{"a job ends while nobody waits: no hold",
			[]BorrowSeen{{Borrowed: 5 * G, Freed: true}, {Borrowed: 6 * G}},
			[]bool{true, true}},
		{"no job ends: the spent hold chains no new one, as before",
			append(waits(61, G), BorrowSeen{Borrowed: 2 * G}, BorrowSeen{Borrowed: 3 * G}),
			append(falses(61), true, true)},
	}
	t0 := time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			replay(t, rule, len(tc.looks), func(i int) (BorrowSeen, time.Time, bool) {
				return tc.looks[i], t0.Add(time.Duration(i) * 500 * time.Millisecond), tc.admit[i]
			})
		})
	}
	if _, admit := NoHold.Hold(BorrowHold{}, BorrowSeen{Borrowed: G, Freed: true}, t0); !admit {
		t.Error("NoHold: a job's end with no allocation waiting refused admission")
	}
}

// waits is n looks at a borrower that holds b and waits.
func waits(n int, b size.Bytes) []BorrowSeen {
	out := make([]BorrowSeen, n)
	for i := range out {
		out[i] = BorrowSeen{Borrowed: b, Waiting: true}
	}
	return out
}

func falses(n int) []bool { return make([]bool, n) }

func TestHoldRuleValidate(t *testing.T) {
	for _, tc := range []struct {
		rule HoldRule
		ok   bool
	}{
		{NoHold, true}, {DefaultHold, true}, {HoldRule{Quiet: time.Second, Bound: time.Second}, true},
		{HoldRule{Quiet: time.Second}, false}, {HoldRule{Quiet: 2 * time.Second, Bound: time.Second}, false},
		{HoldRule{Quiet: -time.Second, Bound: time.Second}, false},
		{HoldRule{Quiet: time.Second, Bound: time.Second, After: -time.Second}, false},
	} {
		if err := tc.rule.Validate(); (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%+v: %v, want ok %v", tc.rule, err, tc.ok)
		}
	}
}
