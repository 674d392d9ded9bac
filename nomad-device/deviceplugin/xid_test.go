package deviceplugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/gpufrac/gpufrac/acctest/nomad/emulator"
	"github.com/gpufrac/gpufrac/gpu"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
)

// A GPU that raises a critical XID leaves service within the plugin's one-second health look
// (fingerprint_period stays the default minute): every unit unhealthy with the XID, its time and
// what it means, and Reserve refused. The XIDs a tenant raises by faulting its own context, and
// one the operator lists in ignored_xids, leave the GPU placeable: a tenant must not be able to
// drain a GPU its neighbours share. A double-bit ECC error marks the GPU it struck alone.
func TestCriticalXIDTakesTheGPUOutOfService(t *testing.T) {
	s, dir := newSim(t, "H100=80GiB,A100=40GiB", `ignored_xids = [92]`)
	if p := s.config().FingerprintPeriod; p != time.Minute {
		t.Fatalf("fingerprint_period %s, want the default 1m: the test must not lean on a short one", p)
	}
	m, ch := firstFingerprint(t, s)
	h100, a100 := uuidOf(m.DeviceGroup[0]), uuidOf(m.DeviceGroup[1])
	held := ids(m.DeviceGroup[0], 2)
	mustReserve(t, s, held)
	sim := simOf(t, dir)

	for _, code := range append(gpu.ApplicationXIDs(), 92) {
		if err := sim.RaiseXID(h100, code); err != nil {
			t.Fatal(err)
		}
	}
	// Raised after the H100's XIDs: the listing that shows it read those too.
	if err := sim.RaiseDoubleBitECC(a100); err != nil {
		t.Fatal(err)
	}
	m = waitFP(t, ch, "the A100's units say it had a double-bit ECC error", func(m *devicepb.FingerprintResponse) bool {
		return allUnhealthy(group(m, a100), "double-bit ECC error at ")
	})
	if n := emulator.HealthyCount(group(m, h100)); n != 78 {
		t.Fatalf("the H100 has %d healthy units after application XIDs and an ignored one, want all 78: %q", n,
			unhealthyDescs(group(m, h100)))
	}
	wantDocumentedHealth(t, unhealthyDescs(group(m, a100))...)
	if _, err := s.Reserve(context.Background(), ids(group(m, h100), 3)[2:]); err != nil {
		t.Fatalf("Reserve on the H100 after its tenants' own faults: %v", err)
	}

	if err := sim.RaiseXID(h100, 94); err != nil {
		t.Fatal(err)
	}
	if err := sim.RaiseXID(h100, 79); err != nil {
		t.Fatal(err)
	}
	m = waitFP(t, ch, "the H100's units say it raised XID 94", func(m *devicepb.FingerprintResponse) bool {
		return allUnhealthy(group(m, h100), "XID 94 at ")
	})
	descs := unhealthyDescs(group(m, h100))
	wantDocumentedHealth(t, descs...)
	for _, d := range descs {
		// The first critical XID is the mark; the 79 after it does not replace it.
		if !strings.Contains(d, "contained ECC error; kept until this gpufrac process restarts") || strings.Contains(d, "XID 79") {
			t.Errorf("H100 unit description %q: want XID 94's mark alone", d)
		}
	}
	_, err := s.Reserve(context.Background(), []string{h100 + "-10"})
	wantRefused(t, err, codes.Unavailable, "XID 94")
}
