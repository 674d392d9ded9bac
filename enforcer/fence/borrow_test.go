package fence_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

const tokC = "cccccccccccccccccccccccccccccccc"

// waitingTable is a 4 GiB budget where A may borrow up to all of it, B holds a 1 GiB guarantee
// and allocations may wait for borrowable memory as long as wait.
func waitingTable(t *testing.T, wait time.Duration) (*fence.Table, *fence.Client, *fence.Client) {
	t.Helper()
	dir, tb := table(t, 4*size.GiB)
	tb.SetWait(wait)
	if err := tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, {Token: tokB, Cap: size.GiB}}, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	a := attach(t, dir, tokA)
	b := attach(t, dir, tokB)
	return tb, a, b
}

func attach(t *testing.T, dir, token string) *fence.Client {
	t.Helper()
	c, err := fence.Attach(dir, fencetest.FakeUUID, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Detach)
	return c
}

// twoBorrowers is a 4 GiB budget, full, of A and B, each on a 1 GiB guarantee with the whole
// budget for a limit, holding aUse and bUse; borrowers wait up to a minute.
func twoBorrowers(t *testing.T, aUse, bUse size.Bytes) (*fence.Table, *fence.Client, *fence.Client) {
	t.Helper()
	dir, tb := table(t, 4*size.GiB)
	tb.SetWait(time.Minute)
	if err := tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, {Token: tokB, Cap: size.GiB, Limit: 4 * size.GiB}}, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	a, b := attach(t, dir, tokA), attach(t, dir, tokB)
	if a.Charge(aUse) != fence.Charged || b.Charge(bUse) != fence.Charged {
		t.Fatal("filling the budget")
	}
	return tb, a, b
}

// largerLoses has A, the larger borrower, wait for aMore, then B ask for bMore: A's charge is
// refused for cause at once, and B's waits until A's process fails (it frees aHeld) and is then
// served.
func largerLoses(t *testing.T, tb *fence.Table, a, b *fence.Client, aMore, bMore, aHeld size.Bytes, cause string) {
	t.Helper()
	gotA := charging(a, aMore)
	waitFor(t, tb, "A waiting", fence.Snapshot.Waiting)
	gotB := charging(b, bMore)
	if r := <-gotA; r != fence.Refused {
		t.Fatalf("A, the larger borrower: %v, want Refused", r)
	}
	refusedFor(t, a, cause, 0)
	if len(gotB) != 0 {
		t.Fatalf("B's charge returned %v before A freed anything", <-gotB)
	}
	servedOnceFreed(t, a, aHeld, gotB, "B after A freed its borrowing")
}

// refusedFor checks the reason the client's last refusal gives (the preload library prints it
// to the task's log): the words that name the cause, and a wait at least min long.
func refusedFor(t *testing.T, c *fence.Client, cause string, minWait time.Duration) {
	t.Helper()
	why, waited := c.Refusal()
	if !strings.Contains(why, cause) || waited < minWait {
		t.Fatalf("refused because %q after %s; want %q after %s at least", why, waited, cause, minWait)
	}
}

// waitFor polls the table until cond holds; the charge under test runs on another goroutine.
func waitFor(t *testing.T, tb *fence.Table, what string, cond func(fence.Snapshot) bool) fence.Snapshot {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := tb.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened; table %+v", what, s.Tasks)
		}
		time.Sleep(time.Millisecond)
	}
}

// A borrower whose memory is not free waits while a neighbour holds it, no new guarantee is
// placed meanwhile, and it is served the moment the neighbour frees.
func TestBorrowerWaitsForANeighboursFree(t *testing.T) {
	tb, a, b := waitingTable(t, time.Minute)
	if r := b.Charge(size.GiB); r != fence.Charged {
		t.Fatal(r)
	}
	// 3 GiB fit beside B's 1 GiB guarantee: 2 GiB of it borrowed.
	if r := a.Charge(3 * size.GiB); r != fence.Charged {
		t.Fatal(r)
	}
	got := make(chan fence.Result, 1)
	go func() { got <- a.Charge(size.GiB) }() // needs B's memory
	s := waitFor(t, tb, "A waiting", fence.Snapshot.Waiting)
	if u, _ := s.Task(tokA); u.Waits != 1 || u.Borrowed() != 2*size.GiB {
		t.Fatalf("A while it waits: %+v", u)
	}
	// A newcomer's guarantee would take what A waits for.
	err := tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, {Token: tokB, Cap: size.GiB}, {Token: tokC, Cap: 1}}, 4*size.GiB)
	var nr *fence.NoRoomError
	if !errors.As(err, &nr) || !errors.Is(err, fence.ErrNoRoom) || !nr.Waiting || len(nr.Tokens) != 1 || nr.Tokens[0] != tokC {
		t.Fatalf("a new guarantee while A waits: %v (%+v)", err, nr)
	}
	select {
	case r := <-got:
		t.Fatalf("A's charge returned %v before B freed anything", r)
	default:
	}
	b.Uncharge(size.GiB)
	// B still holds its guarantee, so A must wait for B's task to end.
	if err := tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}}, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r != fence.Charged {
		t.Fatalf("A after B ended: %v, want Charged", r)
	}
	if u := snap(t, tb, tokA); u.Used != 4*size.GiB || u.Waiting || u.Refused != 0 {
		t.Fatalf("A served: %+v", u)
	}
}

// Waiting is refused at once where it cannot help, and bounded where it could.
func TestBorrowerFailsWhenWaitingCannotHelp(t *testing.T) {
	t.Run("no one else holds memory", func(t *testing.T) {
		tb, a, _ := waitingTable(t, time.Minute)
		// A alone on the GPU: nobody will free anything, so a want past the budget fails now.
		if err := tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB, Limit: 8 * size.GiB}}, 4*size.GiB); err != nil {
			t.Fatal(err)
		}
		if r := a.Charge(5 * size.GiB); r != fence.Refused {
			t.Fatalf("a want past the whole budget: %v", r)
		}
		if u := snap(t, tb, tokA); u.Waits != 0 || u.Refused != 1 {
			t.Fatalf("A: %+v, want refused without a wait", u)
		}
		refusedFor(t, a, "waiting cannot help", 0)
	})
	t.Run("borrowers waiting on each other", func(t *testing.T) {
		tb, a, b := twoBorrowers(t, 1536*size.MiB, 2560*size.MiB) // B borrowing the more
		got := charging(a, size.GiB)
		waitFor(t, tb, "A waiting", fence.Snapshot.Waiting)
		// B's wait could only be served by A, who waits for B, and B has borrowed the more:
		// B fails inside itself at once.
		if r := b.Charge(size.GiB); r != fence.Refused {
			t.Fatalf("B waiting on A waiting on B: %v, want Refused", r)
		}
		if u := snap(t, tb, tokB); u.Waits != 0 {
			t.Fatalf("B waited: %+v", u)
		}
		refusedFor(t, b, "every other task holding memory waits itself", 0)
		servedOnceFreed(t, b, 2560*size.MiB, got, "A after B freed its borrowing") // B's process fails
	})
	t.Run("the larger borrower loses the tie", func(t *testing.T) {
		tb, a, b := twoBorrowers(t, 2560*size.MiB, 1536*size.MiB) // A borrowing the more
		// B asks second, but A has borrowed the more: A fails, and B waits for what it frees,
		// where before whoever asked into the tie failed (a loading job as often as a leaker).
		largerLoses(t, tb, a, b, size.GiB, 512*size.MiB, 2560*size.MiB, "every other task holding memory waits itself")
	})
	t.Run("the larger borrower loses beside a task that computes", func(t *testing.T) {
		dir, tb := table(t, 6*size.GiB)
		tb.SetWait(time.Minute)
		tasks := []fence.Task{{Token: tokA, Cap: size.GiB, Limit: 6 * size.GiB}, {Token: tokB, Cap: size.GiB, Limit: 6 * size.GiB}, {Token: tokC, Cap: size.GiB}}
		if err := tb.SetTasks(tasks, 6*size.GiB); err != nil {
			t.Fatal(err)
		}
		a, b, c := attach(t, dir, tokA), attach(t, dir, tokB), attach(t, dir, tokC)
		if a.Charge(3*size.GiB) != fence.Charged || b.Charge(2*size.GiB) != fence.Charged || c.Charge(size.GiB) != fence.Charged {
			t.Fatal("filling the budget")
		}
		// C computes and may end, but B's want has no room beside what A holds even then, nor
		// A's beside B's. A has borrowed the more: A fails and B waits for what it frees, where
		// before B, asking second, failed at once and A grew on into its memory.
		largerLoses(t, tb, a, b, 2*size.GiB, 2*size.GiB, 3*size.GiB, "waiting cannot help")
	})
	t.Run("the wait is bounded", func(t *testing.T) {
		tb, a, b := waitingTable(t, 50*time.Millisecond)
		if b.Charge(size.GiB) != fence.Charged || a.Charge(3*size.GiB) != fence.Charged {
			t.Fatal("setup")
		}
		start := time.Now()
		if r := a.Charge(size.GiB); r != fence.Refused {
			t.Fatalf("past the wait: %v", r)
		}
		if d := time.Since(start); d < 50*time.Millisecond {
			t.Fatalf("refused after %s, before its 50ms wait", d)
		}
		if u := snap(t, tb, tokA); u.Waits != 1 || u.Refused != 1 || u.Waiting {
			t.Fatalf("A after its wait: %+v", u)
		}
		refusedFor(t, a, "came free within its wait", 50*time.Millisecond)
	})
	t.Run("no wait configured", func(t *testing.T) {
		tb, a, b := waitingTable(t, 0)
		if b.Charge(size.GiB) != fence.Charged || a.Charge(3*size.GiB) != fence.Charged {
			t.Fatal("setup")
		}
		if r := a.Charge(size.GiB); r != fence.Refused {
			t.Fatalf("no wait: %v", r)
		}
		if u := snap(t, tb, tokA); u.Waits != 0 {
			t.Fatalf("A waited with no wait set: %+v", u)
		}
		refusedFor(t, a, "borrowers do not wait", 0)
	})
}

// A guarantee is never placed over memory a borrower holds: the newcomer is left out, named,
// and placed once the borrower frees.
func TestNoGuaranteeOverBorrowedMemory(t *testing.T) {
	tb, a, _ := waitingTable(t, 0)
	if r := a.Charge(3 * size.GiB); r != fence.Charged {
		t.Fatal(r)
	}
	tasks := []fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, {Token: tokB, Cap: size.GiB}, {Token: tokC, Cap: size.GiB}}
	err := tb.SetTasks(tasks, 4*size.GiB)
	var nr *fence.NoRoomError
	if !errors.As(err, &nr) || nr.Waiting || nr.Borrowed != 2*size.GiB || len(nr.Tokens) != 1 || nr.Tokens[0] != tokC {
		t.Fatalf("C over A's borrowing: %v (%+v)", err, nr)
	}
	if s, _ := tb.Snapshot(); len(s.Tasks) != 2 {
		t.Fatalf("C was placed: %+v", s.Tasks)
	}
	a.Uncharge(size.GiB)
	if err := tb.SetTasks(tasks, 4*size.GiB); err != nil {
		t.Fatalf("C once A gave back: %v", err)
	}
	if u := snap(t, tb, tokC); u.Cap != size.GiB {
		t.Fatalf("C: %+v", u)
	}
}

// A borrower that waits for memory polls the table; an owner allocating within its guarantee
// meanwhile must never mistake the waiting borrower's probe for memory it holds: that made the
// owner "owed", which refuses every borrower at once, and on the H200 the benchmark's leaker
// died inside itself seconds into a wait that had 60 s to run, as its neighbours loaded.
func TestOwnerDoesNotSeeAWaitingBorrowersProbe(t *testing.T) {
	tb, a, b := waitingTable(t, time.Minute)
	// 3 GiB fit beside B's 1 GiB guarantee: 2 GiB of it borrowed, the budget full.
	if r := a.Charge(3 * size.GiB); r != fence.Charged {
		t.Fatal(r)
	}
	got := make(chan fence.Result, 1)
	go func() { got <- a.Charge(size.GiB) }() // waits: the rest is B's
	waitFor(t, tb, "A waiting", fence.Snapshot.Waiting)
	// B loads: small allocations within its guarantee while A waits, for long enough to meet
	// hundreds of A's polls (one every 2 ms).
	end := time.Now().Add(time.Second)
	for i := 0; time.Now().Before(end); i++ {
		if r := b.Charge(size.MiB); r != fence.Charged {
			t.Fatalf("B within its guarantee, allocation %d: %v", i, r)
		}
		b.Uncharge(size.MiB)
		select {
		case r := <-got:
			why, waited := a.Refusal()
			t.Fatalf("A's wait ended with %v after B's allocation %d (%s after %s)", r, i, why, waited)
		default:
		}
	}
	if u := snap(t, tb, tokB); u.OwedWaits != 0 {
		t.Fatalf("B waited as owed %d times: %+v", u.OwedWaits, u)
	}
	// B ends: A is served.
	if err := tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}}, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r != fence.Charged {
		t.Fatalf("A after B ended: %v", r)
	}
}
