package main

import (
	"os/exec"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/internal/testutil"
)

// A task of two device requests carries the last one's GPUFRAC_RESERVATION and a per-GPU key for
// each: status charges its memory on each GPU to that GPU's reservation.
func TestTokenOfPrefersTheGPUsOwnKey(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.Env = []string{enforcer.EnvReservation + "=tokB", enforcer.ReservationKey("GPU-a-1") + "=tokA",
		enforcer.ReservationKey("GPU-b-2") + "=tokB"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Until the child has exec'd sleep, its environment is the test binary's.
	testutil.Eventually(t, 5*time.Second, "a token in the child's environment",
		func() bool { return tokenOf(cmd.Process.Pid, "GPU-c-3") != "" })
	for _, tc := range []struct{ gpu, want string }{
		{"GPU-a-1", "tokA"},
		{"GPU-b-2", "tokB"},
		{"GPU-c-3", "tokB"}, // no key of its own: GPUFRAC_RESERVATION
	} {
		if got := tokenOf(cmd.Process.Pid, tc.gpu); got != tc.want {
			t.Errorf("tokenOf(pid, %s) = %q, want %q", tc.gpu, got, tc.want)
		}
	}
}
