package deviceplugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/gpufrac/gpufrac/acctest/nomad/emulator"
	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/size"
)

// simOf attaches to the simulated GPUs of a newSim server, to inject faults into them.
func simOf(t *testing.T, dir string) *gpu.Simulated {
	t.Helper()
	return testutil.AttachSim(t, filepath.Join(dir, "simgpu"))
}

func uuidOf(g *devicepb.DeviceGroup) string { return g.GetAttributes()[AttrUUID].GetStringVal() }

// group returns the group of GPU uuid in m, or nil.
func group(m *devicepb.FingerprintResponse, uuid string) *devicepb.DeviceGroup {
	for _, g := range m.GetDeviceGroup() {
		if uuidOf(g) == uuid {
			return g
		}
	}
	return nil
}

// allUnhealthy says whether every unit of g is unhealthy and says fragment.
func allUnhealthy(g *devicepb.DeviceGroup, fragment string) bool {
	if g == nil || len(g.GetDevices()) == 0 {
		return false
	}
	for _, d := range g.GetDevices() {
		if d.GetHealthy() || !strings.Contains(d.GetHealthDescription(), fragment) {
			return false
		}
	}
	return true
}

// A GPU that disappears mid-run (fallen off the bus) is reported, not dropped: the one that
// holds a reservation keeps its units listed, all unhealthy with the reason; the one that held
// none (the ledger forgets it) stays listed with one unhealthy stand-in that says why. Reserve
// refuses both with Unavailable, even for IDs from the fingerprint before the fault, so nothing
// is admitted on a GPU no cap can be enforced on. When the GPUs come back, every unit is
// placeable again and the reservation made before the fault is still held.
func TestGPUThatVanishesMidRun(t *testing.T) {
	s, dir := newSim(t, "H100=80GiB,A100=40GiB", `fingerprint_period = "1s"`)
	m, ch := firstFingerprint(t, s)
	h100, a100 := m.DeviceGroup[0], m.DeviceGroup[1]
	held := ids(h100, 2)
	mustReserve(t, s, held)
	_, l, _ := s.runtime().parts()
	token := l.Reservations()[0].Token
	freeH100, freeA100 := ids(h100, 3)[2:], ids(a100, 1)

	sim := simOf(t, dir)
	for _, g := range []*devicepb.DeviceGroup{h100, a100} {
		if err := sim.SetRemoved(uuidOf(g), true, "XID 79: GPU has fallen off the bus"); err != nil {
			t.Fatal(err)
		}
	}
	m = waitFP(t, ch, "both GPUs say they are no longer detected", func(m *devicepb.FingerprintResponse) bool {
		return allUnhealthy(group(m, uuidOf(h100)), "no longer detected") && allUnhealthy(group(m, uuidOf(a100)), "no longer detected")
	})
	if err := emulator.ValidateFingerprint(m); err != nil {
		t.Fatalf("Nomad would reject the fingerprint: %v", err)
	}
	wantDocumentedHealth(t, append(unhealthyDescs(group(m, uuidOf(h100))), unhealthyDescs(group(m, uuidOf(a100)))...)...)
	listed := map[string]bool{}
	for _, d := range group(m, uuidOf(h100)).GetDevices() {
		listed[d.GetID()] = true
	}
	if !listed[held[0]] || !listed[held[1]] {
		t.Errorf("the held units %v are not listed while their GPU is gone", held)
	}
	g := group(m, uuidOf(a100))
	if len(g.GetDevices()) != 1 || g.GetAttributes()[AttrUnits].GetIntVal() != 0 || !strings.Contains(g.GetAttributes()["status"].GetStringVal(), "no longer detected") {
		t.Errorf("the vanished A100's group: %v; want one unhealthy stand-in, 0 units and a status saying why", g)
	}

	for name, req := range map[string][]string{"a free unit of the H100": freeH100, "a unit of the A100": freeA100} {
		_, err := s.Reserve(context.Background(), req)
		wantRefused(t, err, codes.Unavailable, "no longer detected")
		if err != nil && !strings.Contains(err.Error(), req[0][:len(req[0])-2]) {
			t.Errorf("Reserve of %s: %q does not name the GPU", name, err)
		}
	}
	if n := len(l.Reservations()); n != 1 {
		t.Fatalf("%d reservations while the GPUs are gone, want only the one made before", n)
	}

	for _, g := range []*devicepb.DeviceGroup{h100, a100} {
		if err := sim.SetRemoved(uuidOf(g), false, ""); err != nil {
			t.Fatal(err)
		}
	}
	waitFP(t, ch, "both GPUs offer their free units again", func(m *devicepb.FingerprintResponse) bool {
		return emulator.HealthyCount(group(m, uuidOf(h100))) == 78 && emulator.HealthyCount(group(m, uuidOf(a100))) == 38
	})
	if _, ok := l.Reservation(token); !ok {
		t.Error("the reservation made before the fault was lost")
	}
	for name, req := range map[string][]string{"a free unit of the H100": freeH100, "a unit of the A100": freeA100} {
		if _, err := s.Reserve(context.Background(), req); err != nil {
			t.Errorf("Reserve of %s once the GPU is back: %v", name, err)
		}
	}
}

// An MPS control daemon that dies while a task's process runs under it is a GPU-wide fault:
// the GPU's free units go unhealthy saying so, Reserve refuses them with Unavailable (a new
// task there would get no pinned limit), the other GPU is untouched, and once the client has
// exited the daemon is restarted and the GPU takes tasks again.
func TestMPSDaemonDiesMidRun(t *testing.T) {
	control, root := testutil.FakeMPSControl(t), testutil.MPSRoot(t)
	s, dir := newSim(t, "H100=80GiB,A100=40GiB", `gpu_modes = { "0" = "mps" }
		mps_root = "`+root+`"
		mps_control = "`+control+`"`)
	m, ch := firstFingerprint(t, s)
	mps, other := m.DeviceGroup[0], m.DeviceGroup[1]
	held := ids(mps, 2)
	res := mustReserve(t, s, held)
	pipe := res.GetEnvs()[enforcer.EnvMPSPipeDir]
	pidText, err := os.ReadFile(filepath.Join(pipe, "daemon.pid"))
	if err != nil {
		t.Fatalf("no MPS control daemon after Reserve: %v", err)
	}
	daemon, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		t.Fatal(err)
	}

	// The task's process, a client of the daemon holding memory on the GPU.
	task := testutil.StartTask(t, res.GetEnvs())
	if err := simOf(t, dir).SetUsage(uuidOf(mps), task.PID(), size.GiB); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(daemon, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	m = waitFP(t, ch, "the MPS GPU's free units say its daemon died", func(m *devicepb.FingerprintResponse) bool {
		return freeUnhealthy(withoutHeld(group(m, uuidOf(mps)), held), "MPS control daemon died")
	})
	if n := emulator.HealthyCount(group(m, uuidOf(other))); n != 38 {
		t.Errorf("the other GPU has %d healthy units, want all 38", n)
	}
	wantDocumentedHealth(t, unhealthyDescs(group(m, uuidOf(mps)))...)
	_, err = s.Reserve(context.Background(), ids(mps, 3)[2:])
	wantRefused(t, err, codes.Unavailable, "MPS control daemon died")
	if _, err := s.Reserve(context.Background(), ids(other, 1)); err != nil {
		t.Errorf("the other GPU refused a task: %v", err)
	}
	_, l, _ := s.runtime().parts()
	if n := len(l.Reservations()); n != 2 {
		t.Fatalf("%d reservations, want the task's and the other GPU's: nothing admitted on the faulted GPU", n)
	}

	// The client exits: the daemon is restarted and the GPU is placeable again.
	task.Stop()
	m = waitFP(t, ch, "the MPS GPU's free units are healthy again", func(m *devicepb.FingerprintResponse) bool {
		return emulator.HealthyCount(group(m, uuidOf(mps))) == 78
	})
	if _, err := s.Reserve(context.Background(), ids(group(m, uuidOf(mps)), 3)[2:]); err != nil {
		t.Fatalf("Reserve on the MPS GPU once its daemon is back: %v", err)
	}
	if pidText, err := os.ReadFile(filepath.Join(pipe, "daemon.pid")); err != nil || strings.TrimSpace(string(pidText)) == strconv.Itoa(daemon) {
		t.Errorf("daemon pid file %q (%v): want a restarted daemon, not %d", pidText, err, daemon)
	}
}

// withoutHeld is g without the units held (those keep their task's health).
func withoutHeld(g *devicepb.DeviceGroup, held []string) *devicepb.DeviceGroup {
	if g == nil {
		return nil
	}
	out := &devicepb.DeviceGroup{Attributes: g.Attributes}
	for _, d := range g.GetDevices() {
		if !slices.Contains(held, d.GetID()) {
			out.Devices = append(out.Devices, d)
		}
	}
	return out
}

// A disk that fills under the ledger during a Reserve: the refusal says so (ENOSPC, the file,
// ResourceExhausted, the code gRPC gives a file system out of space), the ledger file on disk
// is the one from before, nothing is admitted that was not recorded, and once there is room the
// same units are reserved.
func TestReserveOnAFullDisk(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full to stand in for a full disk")
	}
	s, dir := newSim(t, "H100=80GiB", "")
	m, _ := firstFingerprint(t, s)
	g := m.DeviceGroup[0]
	kept, next := ids(g, 2), ids(g, 4)[2:]
	mustReserve(t, s, kept)
	state := filepath.Join(dir, ledger.StateFile)
	before, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	// The ledger writes a temp file and renames it over the state file; as a link to /dev/full
	// every write of it fails with ENOSPC, as on a full file system.
	tmp := state + ".tmp"
	if err := os.Symlink("/dev/full", tmp); err != nil {
		t.Fatal(err)
	}
	_, err = s.Reserve(context.Background(), next)
	wantRefused(t, err, codes.ResourceExhausted, "no space left on device")
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), tmp) {
		t.Errorf("Reserve on a full disk: %v; want ENOSPC naming %s", err, tmp)
	}
	if after, err := os.ReadFile(state); err != nil || string(after) != string(before) {
		t.Errorf("the ledger file changed under a failed Reserve (%v)", err)
	}
	_, l, _ := s.runtime().parts()
	if rs := l.Reservations(); len(rs) != 1 || !slices.Equal(rs[0].InstanceIDs, kept) {
		t.Fatalf("reservations %+v: want only the one recorded before the disk filled", rs)
	}

	if err := os.Remove(tmp); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(context.Background(), next); err != nil {
		t.Fatalf("Reserve of the same units once there is room: %v", err)
	}
	if n := len(l.Reservations()); n != 2 {
		t.Errorf("%d reservations once there is room, want 2", n)
	}
}

// NVML errors while listing a GPU's processes (the watchdog cannot see its tasks) make every
// unit of that GPU unhealthy with the reason and Reserve refuse it (Unavailable), the other GPU
// untouched; the task that held units keeps them, and at the first good reading the GPU is
// placeable again.
func TestNVMLErrorMidRun(t *testing.T) {
	s, dir := newSim(t, "H100=80GiB,A100=40GiB", `fingerprint_period = "1s"`)
	m, ch := firstFingerprint(t, s)
	h100, a100 := m.DeviceGroup[0], m.DeviceGroup[1]
	held, free := ids(h100, 2), ids(h100, 3)[2:]
	mustReserve(t, s, held)
	sim := simOf(t, dir)
	if err := sim.SetProcessesFault(uuidOf(h100), "NVML_ERROR_UNKNOWN"); err != nil {
		t.Fatal(err)
	}
	const reason = "GPU processes cannot be read"
	m = waitFP(t, ch, "the H100's units say its processes cannot be read", func(m *devicepb.FingerprintResponse) bool {
		return allUnhealthy(group(m, uuidOf(h100)), reason)
	})
	wantDocumentedHealth(t, unhealthyDescs(group(m, uuidOf(h100)))...)
	if n := emulator.HealthyCount(group(m, uuidOf(a100))); n != 38 {
		t.Errorf("the A100 has %d healthy units, want all 38", n)
	}
	_, err := s.Reserve(context.Background(), free)
	wantRefused(t, err, codes.Unavailable, reason)
	_, l, _ := s.runtime().parts()
	if n := len(l.Reservations()); n != 1 {
		t.Fatalf("%d reservations, want only the one made before the fault", n)
	}

	if err := sim.SetProcessesFault(uuidOf(h100), ""); err != nil {
		t.Fatal(err)
	}
	waitFP(t, ch, "the H100 offers its free units again", func(m *devicepb.FingerprintResponse) bool {
		return emulator.HealthyCount(group(m, uuidOf(h100))) == 78
	})
	if _, err := s.Reserve(context.Background(), free); err != nil {
		t.Fatalf("Reserve once NVML answers again: %v", err)
	}
	if n := len(l.Reservations()); n != 2 {
		t.Errorf("%d reservations, want the one from before and the new one", n)
	}
}

// A GPU the backend reports faulty (an error reading it, MIG turned on, a row remapping that
// waits for a reset) or no longer lists shows in the fingerprint within seconds under the
// default fingerprint_period of a minute, with the backend's reason, and comes back as quickly
// once the backend lists it healthy: Nomad must not place tasks for a minute on a GPU already
// known bad.
func TestBackendFaultShowsWithoutWaitingForTheFingerprintPeriod(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
		fault        func(sim *gpu.Simulated, uuid string, on bool) error
	}{
		{"reported unhealthy", "XID 48: double bit ECC error", func(sim *gpu.Simulated, uuid string, on bool) error {
			return sim.SetHealth(uuid, !on, "XID 48: double bit ECC error")
		}},
		{"no longer listed", "no longer detected", func(sim *gpu.Simulated, uuid string, on bool) error {
			return sim.SetRemoved(uuid, on, "XID 79: GPU has fallen off the bus")
		}},
		// Polled, not an event: it clears when the GPU is reset.
		{"row remapping pending", "row remapping pending: reset the GPU to apply it", func(sim *gpu.Simulated, uuid string, on bool) error {
			if !on {
				return sim.SetMemoryErrors(uuid, nil)
			}
			return sim.SetMemoryErrors(uuid, &gpu.MemoryErrors{RemapPending: true})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, dir := newSim(t, "H100=80GiB", "")
			if p := s.config().FingerprintPeriod; p != time.Minute {
				t.Fatalf("fingerprint_period %s, want the default 1m: the test must not lean on a short one", p)
			}
			m, ch := firstFingerprint(t, s)
			uuid := uuidOf(m.DeviceGroup[0])
			sim := simOf(t, dir)
			if err := tc.fault(sim, uuid, true); err != nil {
				t.Fatal(err)
			}
			m = waitFP(t, ch, "every unit says "+tc.reason, func(m *devicepb.FingerprintResponse) bool {
				return allUnhealthy(group(m, uuid), tc.reason)
			})
			if tc.name == "row remapping pending" { // the others' reasons are the test's own words
				wantDocumentedHealth(t, unhealthyDescs(group(m, uuid))...)
			}
			if err := tc.fault(sim, uuid, false); err != nil {
				t.Fatal(err)
			}
			waitFP(t, ch, "the GPU offers its units again", func(m *devicepb.FingerprintResponse) bool {
				return emulator.HealthyCount(group(m, uuid)) == 78
			})
		})
	}
}
