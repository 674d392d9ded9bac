package deviceplugin

import (
	"testing"
	"time"

	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// A borrower that waited on a GPU is served first (issue 25): once its wait ends the
// fingerprint keeps every free unit withheld until it is served (policy.DefaultHold: a second
// with no wait and no growth), and the end of the hold, which no change of anyone's marks, sends
// a fingerprint that offers them again. The fence is off so that only the test records what
// borrowers hold, as the fence's pass would.
func TestFingerprintHoldsForAWaitingBorrower(t *testing.T) {
	s, _ := newSim(t, "H100=80GiB", "fence = false")
	m, stream := firstFingerprint(t, s)
	g := m.DeviceGroup[0]
	uuid := g.Attributes[AttrUUID].GetStringVal()
	_, l, _ := s.runtime().parts()
	next := func(what string, done func(*devicepb.DeviceGroup) bool) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for !done(g) {
			select {
			case m := <-stream:
				g = m.DeviceGroup[0]
			case <-deadline:
				t.Fatalf("no fingerprint %s; last unhealthy: %q", what, unhealthyDescs(g))
			}
		}
	}
	const held = "being served first"
	if err := l.SetBorrowed(uuid, 2*size.GiB, true); err != nil {
		t.Fatal(err)
	}
	next("withholding every unit while the borrower waits", func(g *devicepb.DeviceGroup) bool {
		return unhealthyFor(g, "waits for memory to come free") == 78
	})
	// Before the call: the ledger's quiet period starts at its look inside SetBorrowed, so the
	// hold ends at least that long after this instant (after the call it may be a hair less).
	served := time.Now()
	if err := l.SetBorrowed(uuid, 4*size.GiB, false); err != nil {
		t.Fatal(err)
	}
	next("withholding every unit while the borrower is served", func(g *devicepb.DeviceGroup) bool {
		return unhealthyFor(g, held) == 78
	})
	wantDocumentedHealth(t, unhealthyDescs(g)...)
	next("offering the units again once the borrower is served", func(g *devicepb.DeviceGroup) bool {
		return unhealthyFor(g, held) == 0
	})
	if waited := time.Since(served); waited < policy.DefaultHold.Quiet {
		t.Fatalf("the hold ended %s after the wait, before the %s quiet period", waited, policy.DefaultHold.Quiet)
	}
	if n := unhealthyFor(g, "borrowing past their guarantees"); n != 4 {
		t.Fatalf("after the hold %d units are withheld for the 4GiB borrowed, want 4", n)
	}
}
