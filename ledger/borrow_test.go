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

// A reservation that ends while a borrower waits renews the borrower's hold, so the next job is
// not admitted onto the freed memory before the borrower grows into it, also after the first
// hold ran to its bound.
func TestReleaseDuringAWaitRenewsTheHold(t *testing.T) {
	c := newClock()
	l, _ := newTest(t, Options{Now: c.Now, BorrowHold: policy.DefaultHold})
	neighbour := mustReserve(t, l, Task{JobName: "neighbour"}, ids(gpuB, 0, 1, 2)...)
	if err := l.SetBorrowed(gpuB, size.GiB, true); err != nil {
		t.Fatal(err)
	}
	c.Advance(policy.DefaultHold.Bound + time.Second)
	if err := l.SetBorrowed(gpuB, size.GiB, true); err != nil { // still waiting: the hold is spent
		t.Fatal(err)
	}
	if st, _ := l.State(gpuB); st.BorrowHeld {
		t.Fatal("the hold outlived its bound")
	}
	if err := l.Release(neighbour.Token, "ok"); err != nil {
		t.Fatal(err)
	}
	c.Advance(100 * time.Millisecond)
	if err := l.SetBorrowed(gpuB, 3*size.GiB, false); err != nil { // served: it grows into the freed units
		t.Fatal(err)
	}
	_, err := l.ReserveBytes(gpuB, size.GiB, Task{JobName: "next"})
	var d *DeniedError
	if !errors.As(err, &d) || d.Reason != ReasonBorrowed {
		t.Fatalf("a reservation just after a neighbour ended during the wait: %v, want ReasonBorrowed", err)
	}
	c.Advance(policy.DefaultHold.Quiet)
	if _, err := l.ReserveBytes(gpuB, size.GiB, Task{JobName: "next"}); err != nil {
		t.Fatalf("a reservation once the borrower is served (a quiet second): %v", err)
	}
}

// What borrowers hold is withheld from the free units, a unit for each unit or part of one,
// from the highest ID down, skipping units a task holds; every free unit while an allocation
// waits. GPU B has 6 units of 1GiB; unit 0 is reserved.
func TestBorrowedUnits(t *testing.T) {
	for _, tc := range []struct {
		name     string
		borrowed size.Bytes
		waiting  bool
		lending  bool
		want     string // per unit: r reserved, h healthy, w withheld
		why      string
	}{
		{"nothing borrowed", 0, false, false, "rhhhhh", ""},
		{"2.5GiB borrowed", 2*size.GiB + 512*size.MiB, false, false, "rhhwww", "held by tasks borrowing past their guarantees ("},
		{"more than is free", 40 * size.GiB, false, false, "rwwwww", "borrowing past their guarantees"},
		{"an allocation waits", size.MiB, true, false, "rwwwww", "a task's allocation waits for memory to come free"},
		{"lending: nothing withheld", 40 * size.GiB, true, true, "rhhhhh", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newTest(t, Options{})
			if err := l.SetLending(tc.lending); err != nil {
				t.Fatal(err)
			}
			mustReserve(t, l, Task{JobName: "j"}, InstanceID(gpuB, 0))
			if err := l.SetBorrowed(gpuB, tc.borrowed, tc.waiting); err != nil {
				t.Fatal(err)
			}
			st, err := l.State(gpuB)
			if err != nil {
				t.Fatal(err)
			}
			if st.BorrowedBytes != tc.borrowed || st.BorrowWaiting != tc.waiting {
				t.Fatalf("state borrowed %s waiting %v, want %s %v", st.BorrowedBytes, st.BorrowWaiting, tc.borrowed, tc.waiting)
			}
			var got strings.Builder
			for _, in := range st.Instances {
				switch {
				case in.Token != "":
					got.WriteByte('r')
				case in.Healthy:
					got.WriteByte('h')
				default:
					got.WriteByte('w')
					if !strings.Contains(in.HealthDescription, tc.why) {
						t.Fatalf("unit %s withheld with %q, want it to say %q", in.ID, in.HealthDescription, tc.why)
					}
				}
			}
			if got.String() != tc.want {
				t.Fatalf("units %s, want %s", got.String(), tc.want)
			}
		})
	}
}

// Admission never admits onto borrowed memory: a cap that fits the budget but for what
// borrowers hold, or any cap while an allocation waits, is refused as borrowed, on both paths.
// Where guarantees are lent it counts guarantees alone: the fence places them on what borrowers
// hold and lends them back.
func TestAdmissionCountsBorrowed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		borrowed size.Bytes
		waiting  bool
		lending  bool
		cap      size.Bytes
		reason   Reason // "" = admitted
	}{
		{"fits beside the loan", 4 * size.GiB, false, false, 6 * size.GiB, ""},
		{"only without the loan", 5 * size.GiB, false, false, 6 * size.GiB, ReasonBorrowed},
		{"an allocation waits", 0, true, false, size.GiB, ReasonBorrowed},
		{"lending: on the loan", 9 * size.GiB, true, true, 6 * size.GiB, ""},
		{"lending: the whole budget on the loan", 9 * size.GiB, false, true, 10 * size.GiB, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"bytes", "ids"} {
				l, _ := newTest(t, Options{})
				if err := l.SetLending(tc.lending); err != nil {
					t.Fatal(err)
				}
				if err := l.SetBorrowed(gpuA, tc.borrowed, tc.waiting); err != nil {
					t.Fatal(err)
				}
				var err error
				if path == "bytes" {
					_, err = l.ReserveBytes(gpuA, tc.cap, Task{JobName: "j"})
				} else {
					var ks []int
					for k := 0; k < int(tc.cap/size.GiB); k++ {
						ks = append(ks, k)
					}
					_, err = l.ReserveIDs(ids(gpuA, ks...), Task{JobName: "j"})
				}
				var d *DeniedError
				switch {
				case tc.reason == "" && err != nil:
					t.Fatalf("%s: %v, want admitted", path, err)
				case tc.reason != "" && (!errors.As(err, &d) || d.Reason != tc.reason):
					t.Fatalf("%s: %v, want a %s denial", path, err, tc.reason)
				}
			}
		})
	}
}

// What borrowers hold is not written to disk (the fence's tables are its record), and the
// ledger's subscribers hear of it only when what is placeable changes.
func TestSetBorrowedIsVolatileAndCoalesced(t *testing.T) {
	l, dir := newTest(t, Options{})
	ch, cancel := l.Subscribe()
	defer cancel()
	drain := func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	drain()
	steps := []struct {
		b       size.Bytes
		waiting bool
		wake    bool
	}{
		{512 * size.MiB, false, true},  // a unit withheld
		{768 * size.MiB, false, false}, // still one unit
		{1536 * size.MiB, false, true}, // two
		{1536 * size.MiB, true, true},  // a wait began
		{0, false, true},
	}
	for i, s := range steps {
		if err := l.SetBorrowed(gpuA, s.b, s.waiting); err != nil {
			t.Fatal(err)
		}
		if got := drain(); got != s.wake {
			t.Fatalf("step %d (%s, waiting %v): subscribers woken %v, want %v", i, s.b, s.waiting, got, s.wake)
		}
	}
	if err := l.SetBorrowed(gpuA, 3*size.GiB, true); err != nil {
		t.Fatal(err)
	}
	if err := l.SetBorrowed("GPU-none", size.GiB, false); !errors.Is(err, ErrUnknownGPU) {
		t.Fatalf("SetBorrowed on an unknown GPU: %v, want ErrUnknownGPU", err)
	}
	l.Close()
	l2, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	st, err := l2.State(gpuA)
	if err != nil {
		t.Fatal(err)
	}
	if st.BorrowedBytes != 0 || st.BorrowWaiting {
		t.Fatalf("after a restart: borrowed %s waiting %v, want none until the fence is read again", st.BorrowedBytes, st.BorrowWaiting)
	}
	if err := l.SetBorrowed(gpuA, size.GiB, false); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetBorrowed on a closed ledger: %v, want ErrClosed", err)
	}
}

// Under lending a borrower's short waits do not pause admission (the start-up queue's leaker
// waits 1-2 s while jobs are placed on its memory); one that waits StuckWait at a stretch stops
// lending on its GPU, and admission follows the rules without it (here: what borrowers hold is
// taken, and while it waits nothing is admitted) until the GPU's borrowers hold nothing.
func TestLendingStopsBesideAStuckBorrower(t *testing.T) {
	clock := newClock()
	l, _ := newTest(t, Options{Now: clock.Now})
	if err := l.SetLending(true); err != nil {
		t.Fatal(err)
	}
	state := func() GPUState {
		t.Helper()
		st, err := l.State(gpuA)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	reserve := func(b size.Bytes) error {
		_, err := l.ReserveBytes(gpuA, b, Task{JobName: "j"})
		return err
	}
	if err := l.SetBorrowed(gpuA, 4*size.GiB, true); err != nil {
		t.Fatal(err)
	}
	clock.Advance(StuckWait - time.Second)
	if st := state(); !st.Lending || st.BorrowStuck {
		t.Fatalf("a borrower waiting %s: lending %v, stuck %v; want lending", StuckWait-time.Second, st.Lending, st.BorrowStuck)
	}
	if err := reserve(2 * size.GiB); err != nil {
		t.Fatalf("lending beside a short wait: %v", err)
	}
	clock.Advance(time.Second)
	if st := state(); st.Lending || !st.BorrowStuck {
		t.Fatalf("a borrower waiting %s: lending %v, stuck %v; want stuck", StuckWait, st.Lending, st.BorrowStuck)
	}
	var d *DeniedError
	if err := reserve(size.GiB); !errors.As(err, &d) || d.Reason != ReasonBorrowed {
		t.Fatalf("beside a stuck borrower that waits: %v, want ReasonBorrowed", err)
	}
	// Served, it still holds borrowed memory: still stuck, and what it holds is taken (10 GiB
	// budget, 2 GiB reserved, 7 GiB borrowed).
	if err := l.SetBorrowed(gpuA, 7*size.GiB, false); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute) // past any hold
	if st := state(); st.Lending || !st.BorrowStuck {
		t.Fatalf("the stuck borrower served: lending %v, stuck %v; want still stuck", st.Lending, st.BorrowStuck)
	}
	if err := reserve(2 * size.GiB); !errors.As(err, &d) || d.Reason != ReasonBorrowed {
		t.Fatalf("2 GiB beside 7 GiB borrowed and 2 reserved of 10: %v, want ReasonBorrowed", err)
	}
	if err := reserve(size.GiB); err != nil {
		t.Fatalf("1 GiB beside 7 GiB borrowed and 2 reserved of 10: %v", err)
	}
	if err := l.SetBorrowed(gpuA, 0, false); err != nil {
		t.Fatal(err)
	}
	if st := state(); !st.Lending || st.BorrowStuck {
		t.Fatalf("borrowers holding nothing: lending %v, stuck %v; want lending", st.Lending, st.BorrowStuck)
	}
}
