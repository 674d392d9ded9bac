package ledger

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// A rule that cannot work is refused where it is given, naming the bad value.
func TestBorrowHoldRefusesABadRule(t *testing.T) {
	bad := policy.HoldRule{Quiet: time.Second}
	if _, err := Open(t.TempDir(), Options{BorrowHold: bad}); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "bound 0s") {
		t.Fatalf("Open with a hold without a bound: %v, want ErrBadInput naming the bound", err)
	}
	l, _ := newTest(t, Options{})
	if err := l.SetBorrowHold(policy.HoldRule{Quiet: -time.Second, Bound: time.Second}); !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), "-1s") {
		t.Fatalf("SetBorrowHold with a negative quiet time: %v, want policy.ErrInvalid naming it", err)
	}
}

// The hold refuses admission with ReasonBorrowed while it is on, and its end by time, which
// no call marks, wakes the subscribers: the ledger's timer takes that look.
func TestBorrowHoldEndsByTimeAndWakes(t *testing.T) {
	rule := policy.HoldRule{Quiet: 200 * time.Millisecond, Bound: 10 * time.Second}
	l, _ := newTest(t, Options{BorrowHold: rule})
	ch, cancel := l.Subscribe()
	defer cancel()
	if err := l.SetBorrowed(gpuB, size.GiB, true); err != nil {
		t.Fatal(err)
	}
	if err := l.SetBorrowed(gpuB, 2*size.GiB, false); err != nil {
		t.Fatal(err)
	}
	_, err := l.ReserveBytes(gpuB, size.GiB, Task{JobName: "j"})
	var d *DeniedError
	if !errors.As(err, &d) || d.Reason != ReasonBorrowed || !strings.Contains(err.Error(), "served first") {
		t.Fatalf("a reservation while the hold is on: %v, want ReasonBorrowed saying the borrower is served first", err)
	}
	deadline := time.After(10 * time.Second)
	for {
		st, err := l.State(gpuB)
		if err != nil {
			t.Fatal(err)
		}
		if !st.BorrowHeld {
			break
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatal("the hold did not end, or ended without waking a subscriber")
		}
	}
	if _, err := l.ReserveBytes(gpuB, size.GiB, Task{JobName: "j"}); err != nil {
		t.Fatalf("a reservation once the borrower is served: %v", err)
	}
}
