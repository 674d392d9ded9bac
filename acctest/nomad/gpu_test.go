package nomad_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/acctest/nomad/emulator"
	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/internal/testutil"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/size"
)

func TestGPUFaultMarksUnitsUnhealthyAndKeepsHeldOnes(t *testing.T) {
	dir := t.TempDir()
	c := start(t, agentConfig(dir, `"L4=24GiB", "L4=24GiB"`, `fingerprint_period = "1s"`))
	held, _ := place(t, c, 4)
	g := c.Latest().GetDeviceGroup()[0]
	uuid := g.GetAttributes()["uuid"].GetStringVal()
	sim := simAt(t, dir)
	if err := sim.SetHealth(uuid, false, "XID 79: fell off the bus"); err != nil {
		t.Fatal(err)
	}
	fp, err := c.WaitFingerprint(10*time.Second, func(m *devicepb.FingerprintResponse) bool { return emulator.HealthyCount(m.GetDeviceGroup()[0]) == 0 })
	if err != nil {
		t.Fatalf("units of the faulty GPU: %v", err)
	}
	g = fp.GetDeviceGroup()[0]
	listed := map[string]bool{}
	for _, d := range g.GetDevices() {
		listed[d.GetID()] = true
		if !strings.Contains(d.GetHealthDescription(), "XID 79") {
			t.Errorf("%s: health description %q does not carry the GPU's fault", d.GetID(), d.GetHealthDescription())
			break
		}
	}
	for _, id := range held {
		if !listed[id] {
			t.Errorf("held unit %s dropped from the fingerprint", id)
		}
	}
	if emulator.HealthyCount(fp.GetDeviceGroup()[1]) != 22 {
		t.Errorf("the healthy GPU has %d healthy units, want 22", emulator.HealthyCount(fp.GetDeviceGroup()[1]))
	}
	if err := sim.SetHealth(uuid, true, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitFingerprint(10*time.Second, func(m *devicepb.FingerprintResponse) bool { return emulator.HealthyCount(m.GetDeviceGroup()[0]) == 22 }); err != nil {
		t.Fatalf("units after the GPU recovered: %v", err)
	}
}

func TestStatsShowTheTaskUsageAgainstItsCap(t *testing.T) {
	dir := t.TempDir()
	c := start(t, agentConfig(dir, `"H100=80GiB"`, ""))
	ids, res := place(t, c, 8)
	uuid := res.GetEnvs()[enforcer.EnvGPUUUID]
	// A stand-in task: a real process carrying the reservation's environment, holding 3 GiB
	// on the simulated GPU.
	task := testutil.StartTask(t, res.GetEnvs())
	if err := simAt(t, dir).SetUsage(uuid, task.PID(), 3*size.GiB); err != nil {
		t.Fatal(err)
	}
	st, err := c.WaitStats(15*time.Second, func(s *devicepb.StatsResponse) bool {
		sum := s.GetGroups()[0].GetInstanceStats()[ids[0]].GetSummary()
		return sum.GetIntNumeratorVal().GetValue() == 3*1024 && sum.GetIntDenominatorVal().GetValue() == 8*1024
	})
	if err != nil {
		t.Fatalf("stats of the held unit: %v (latest summary %v)", err, st.GetGroups()[0].GetInstanceStats()[ids[0]].GetSummary())
	}
	// One line per task, as `nomad alloc status -stats` prints one line per unit: the other
	// units point at the first instead of repeating its figure.
	for _, id := range ids[1:] {
		sum := st.GetGroups()[0].GetInstanceStats()[id].GetSummary()
		if sum.GetIntNumeratorVal() != nil || sum.GetStringVal().GetValue() != "held, see "+ids[0] {
			t.Errorf("%s summary %v, want it to point at %s", id, sum, ids[0])
		}
	}
}
