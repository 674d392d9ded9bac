package fence_test

import (
	"testing"
	"time"
)

// until polls cond every millisecond for d at most: a condition waited on, not a sleep.
func until(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %s", what, d)
		}
	}
}

// A thread cancelled (pthread_cancel) while its allocation waits inside the fence: the driver's
// allocation holds no cancellation point, but the fence's wait sleeps in nanosleep, which is
// one. Cancelled there, the thread left its wait flagged in its task's file until its process
// allocated again or ended, and a flagged wait stops every new guarantee on the GPU (and an owed
// one refuses every borrower). Cancellation now lands once the call has returned.
func TestCancelledThreadLeavesNoWaitBehind(t *testing.T) {
	tb, a := blockedBorrower(t)
	// B's guarantee covers the other half of the budget: A's 1.5 GiB waits for it, in vain.
	want(t, a.Do("bg 1500M"), "started", "a thread's allocation that waits to borrow")
	until(t, 10*time.Second, "the allocation waits", func() bool { return snap(t, tb, tokA).Waiting })
	want(t, a.DoWithin("cancel", 10*time.Second), "finished err 2", "the cancelled thread's allocation")
	if u := snap(t, tb, tokA); u.Waiting || u.Used != 0 || u.Refused != 1 {
		t.Fatalf("after the cancelled thread ended, its task: %+v; want no wait left, nothing used, one refusal", u)
	}
	want(t, a.Do("alloc 100M"), "ok", "the process allocates on")
}
