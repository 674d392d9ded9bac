package testutil

import (
	"testing"
	"time"
)

// pollEvery is short next to every wait the tests make, and long enough that polling does not
// starve the processes it waits for on a loaded 2-core machine.
const pollEvery = 5 * time.Millisecond

// Eventually polls cond until it holds and fails the test when it still does not after within;
// what names the condition in the failure. Tests wait on the condition itself, never on a sleep.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(pollEvery)
	}
}
