package deviceplugin

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
)

// A GPU added to ignored_gpu_ids while a task holds units on it (an operator handing it to
// nomad-device-nvidia, then restarting the agent): the ledger keeps it for that task, and the
// fingerprint must say it is ignored, not that the GPU is gone, which would send the operator
// to nvidia-smi. Reserve on it is refused with the same reason, as on a GPU ignored from the start.
func TestGPUIgnoredWhileATaskHoldsItSaysSo(t *testing.T) {
	s, dir := newSim(t, "H100=80GiB,A100=40GiB", "")
	m, _ := firstFingerprint(t, s)
	mustReserve(t, s, ids(m.DeviceGroup[1], 3))
	uuid := uuidOf(m.DeviceGroup[1])

	s.Shutdown()
	s2 := NewServer(Options{})
	t.Cleanup(s2.Shutdown)
	if err := s2.SetConfig(encode(t, `config {
		gpu_backend = "simulated"
		simulated_gpus = ["H100=80GiB", "A100=40GiB"]
		state_dir = "`+dir+`"
		ignored_gpu_ids = ["1"]
	}`), APIVersion); err != nil {
		t.Fatal(err)
	}
	m2, _ := firstFingerprint(t, s2)
	if len(m2.DeviceGroup) != 2 || uuidOf(m2.DeviceGroup[1]) != uuid {
		t.Fatalf("%d groups; want GPU 1 kept for the task that holds units on it", len(m2.DeviceGroup))
	}
	g := m2.DeviceGroup[1]
	for _, d := range g.Devices {
		if d.Healthy || d.HealthDescription != descIgnored {
			t.Fatalf("unit %s of the ignored GPU: healthy=%v %q, want unhealthy: %q", d.ID, d.Healthy, d.HealthDescription, descIgnored)
		}
	}
	if st := g.Attributes["status"].GetStringVal(); st != descIgnored {
		t.Errorf("status attribute %q", st)
	}
	wantDocumentedHealth(t, descIgnored)
	_, err := s2.Reserve(context.Background(), ids(m.DeviceGroup[1], 10)[5:])
	wantRefused(t, err, codes.InvalidArgument, "index 1, A100) is listed in ignored_gpu_ids")
}
