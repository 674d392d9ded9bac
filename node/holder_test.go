package node_test

import (
	"os/exec"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/procfs"
)

// A gpufrac run killed while its parent does not reap it is a zombie: it holds nothing, so its
// reservations are released at once instead of after the ledger's grace.
func TestHolderAliveCountsAZombieAsGone(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep to start: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	st, err := procfs.Linux("").Stat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	h := ledger.Holder{PID: cmd.Process.Pid, StartTicks: st.StartTicks}
	if !node.HolderAlive(h) {
		t.Fatalf("holder %v: want alive while it sleeps", h)
	}
	if other := (ledger.Holder{PID: h.PID, StartTicks: h.StartTicks + 1}); node.HolderAlive(other) {
		t.Fatalf("holder %v: another start time is another process", other)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Not reaped yet (no Wait): the kernel keeps it as a zombie until the test's cleanup.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := procfs.Linux("").Stat(h.PID)
		if err == nil && st.Dead() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("killed child %d never became a zombie: %+v, %v", h.PID, st, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if node.HolderAlive(h) {
		t.Fatalf("holder %v: a zombie counted alive", h)
	}
}
