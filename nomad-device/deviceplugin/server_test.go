package deviceplugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/acctest/nomad/emulator"
	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/size"
)

// newSim returns a configured server on simulated GPUs in a temp state_dir.
func newSim(t *testing.T, gpus string, extra string) (*Server, string) {
	t.Helper()
	return newSimWith(t, Options{}, gpus, extra)
}

// newSimWith is newSim with server options (a logger); devRoot is always the temp dir's.
func newSimWith(t *testing.T, opts Options, gpus string, extra string) (*Server, string) {
	t.Helper()
	dir := t.TempDir()
	return newSimIn(t, dir, opts, gpus, extra), dir
}

// newSimIn is newSimWith on the state_dir dir, which an earlier server (or another writer of the
// ledger) may have left: a restart.
func newSimIn(t *testing.T, dir string, opts Options, gpus string, extra string) *Server {
	t.Helper()
	var quoted []string
	for _, g := range strings.Split(gpus, ",") {
		quoted = append(quoted, strconv.Quote(g))
	}
	hcl := `config {
		gpu_backend = "simulated"
		simulated_gpus = [` + strings.Join(quoted, ",") + `]
		state_dir = "` + dir + `"
		` + extra + `
	}`
	opts.devRoot = filepath.Join(dir, "dev")
	s := NewServer(opts)
	t.Cleanup(s.Shutdown)
	if err := s.SetConfig(encode(t, hcl), APIVersion); err != nil {
		t.Fatal(err)
	}
	return s
}

// firstFingerprint opens the stream and returns its first message and a channel of the rest.
func firstFingerprint(t *testing.T, s *Server) (*devicepb.FingerprintResponse, <-chan *devicepb.FingerprintResponse) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch := make(chan *devicepb.FingerprintResponse, 64)
	errc := make(chan error, 1)
	go func() {
		errc <- s.Fingerprint(ctx, func(m *devicepb.FingerprintResponse) error { ch <- m; return nil })
	}()
	select {
	case m := <-ch:
		if err := emulator.ValidateFingerprint(m); err != nil {
			t.Fatalf("Nomad would reject the fingerprint: %v", err)
		}
		return m, ch
	case err := <-errc:
		t.Fatalf("Fingerprint returned %v before its first message", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no fingerprint within 10s")
	}
	return nil, nil
}

// mustReserve is Reserve of ids on s, which the test needs to succeed.
func mustReserve(t *testing.T, s *Server, ids []string) *devicepb.ContainerReservation {
	t.Helper()
	res, err := s.Reserve(context.Background(), ids)
	if err != nil {
		t.Fatalf("Reserve(%v): %v", ids, err)
	}
	return res
}

func ids(g *devicepb.DeviceGroup, n int) []string {
	var out []string
	for _, d := range g.GetDevices() {
		if d.GetHealthy() && len(out) < n {
			out = append(out, d.GetID())
		}
	}
	return out
}

func TestFingerprintOneGroupPerGPU(t *testing.T) {
	s, _ := newSim(t, "H100=80GiB,A100=40GiB", "")
	m, _ := firstFingerprint(t, s)
	if len(m.DeviceGroup) != 2 {
		t.Fatalf("%d groups, want one per GPU (2)", len(m.DeviceGroup))
	}
	wantUnits := []int{78, 38} // (total - 2GiB default headroom) / 1GiB
	for i, g := range m.DeviceGroup {
		uuid := g.Attributes[AttrUUID].GetStringVal()
		if g.Vendor != "nvidia" || g.DeviceType != "gpumem" || !strings.HasSuffix(g.DeviceName, "-"+strconv.Itoa(i)) {
			t.Errorf("group %d is %s/%s/%s", i, g.Vendor, g.DeviceType, g.DeviceName)
		}
		if uuid != gpu.SimUUID(i, g.Attributes[AttrModel].GetStringVal()) {
			t.Errorf("group %d uuid attribute %q", i, uuid)
		}
		if got := g.Attributes[AttrUnitSize]; got.GetIntVal() != 1024 || got.GetUnit() != "MiB" {
			t.Errorf("unit_size = %v", got)
		}
		if got := g.Attributes[AttrIndex].GetIntVal(); got != int64(i) {
			t.Errorf("index = %d", got)
		}
		if len(g.Devices) != wantUnits[i] {
			t.Errorf("group %d: %d instances, want %d", i, len(g.Devices), wantUnits[i])
		}
		for k, d := range g.Devices {
			if d.ID != ledger.InstanceID(uuid, k) || !d.Healthy {
				t.Errorf("instance %d = %s healthy=%v", k, d.ID, d.Healthy)
				break
			}
		}
		if g.Attributes[AttrBudget].GetIntVal() != int64(wantUnits[i])*1024 {
			t.Errorf("budget = %v", g.Attributes[AttrBudget])
		}
	}
	if m.DeviceGroup[0].DeviceName != "h100-0" || m.DeviceGroup[1].DeviceName != "a100-1" {
		t.Errorf("names %s, %s", m.DeviceGroup[0].DeviceName, m.DeviceGroup[1].DeviceName)
	}
}

func TestReserveReturnsTheTaskEnvironment(t *testing.T) {
	s, _ := newSim(t, "H100=80GiB,A100=40GiB", `docker_runtime = true`)
	m, _ := firstFingerprint(t, s)
	g := m.DeviceGroup[1]
	uuid := g.Attributes[AttrUUID].GetStringVal()
	res := mustReserve(t, s, ids(g, 4))
	env := res.GetEnvs()
	want := map[string]string{
		enforcer.EnvCUDADevices:    uuid,
		enforcer.EnvGPUUUID:        uuid,
		enforcer.EnvNVIDIADevices:  uuid,
		enforcer.EnvCapBytes:       strconv.FormatUint(uint64(4*size.GiB), 10),
		enforcer.EnvMemoryFraction: "0.1000",
		enforcer.EnvXLAFraction:    "0.0750",
		enforcer.EnvMode:           "isolated",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if len(env[enforcer.EnvReservation]) < 16 {
		t.Errorf("reservation token %q is too short to be secret", env[enforcer.EnvReservation])
	}
	if _, ok := env[enforcer.EnvMPSMemLimit]; ok {
		t.Error("MPS limit set on an isolated GPU")
	}
}

func TestReserveRefusals(t *testing.T) {
	s, _ := newSim(t, "H100=80GiB,A100=40GiB", "")
	m, _ := firstFingerprint(t, s)
	a, b := ids(m.DeviceGroup[0], 2), ids(m.DeviceGroup[1], 2)
	tests := []struct {
		name string
		ids  []string
		want string
	}{
		{"two GPUs", []string{a[0], b[0]}, string(ledger.ReasonMixedGPUs)},
		{"unknown", []string{"GPU-nope-1"}, string(ledger.ReasonUnknownIDs)},
		{"malformed", []string{"nonsense"}, "nonsense"},
		{"beyond the units", []string{ledger.InstanceID(m.DeviceGroup[0].Attributes[AttrUUID].GetStringVal(), 500)}, "-500"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Reserve(context.Background(), tt.ids)
			if err == nil {
				t.Fatalf("Reserve(%v) succeeded", tt.ids)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
			if tt.name == "two GPUs" && !errors.Is(err, ledger.ErrDenied) {
				t.Errorf("error does not wrap ErrDenied: %v", err)
			}
		})
	}
	res, err := s.Reserve(context.Background(), nil)
	if err != nil || res == nil || len(res.Envs)+len(res.Mounts)+len(res.Devices) != 0 {
		t.Errorf("empty request: %v, %v; want an empty reservation", res, err)
	}
}

func TestDisabledPlugin(t *testing.T) {
	s, _ := newSim(t, "H100=80GiB", "enabled = false")
	if err := s.Fingerprint(context.Background(), func(*devicepb.FingerprintResponse) error { return nil }); !errors.Is(err, ErrDisabled) {
		t.Errorf("Fingerprint of a disabled plugin: %v", err)
	}
	if _, err := s.Reserve(context.Background(), []string{"x-0"}); !errors.Is(err, ErrDisabled) {
		t.Errorf("Reserve of a disabled plugin: %v", err)
	}
}

func TestDeviceNodesForExecTasks(t *testing.T) {
	s, dir := newSim(t, "H100=80GiB", "")
	dev := filepath.Join(dir, "dev")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	// nvidia-uvm-tools is absent on purpose: a node that does not exist must not be listed.
	for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia0"} {
		if err := os.WriteFile(filepath.Join(dev, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, _ := firstFingerprint(t, s)
	res := mustReserve(t, s, ids(m.DeviceGroup[0], 1))
	var got []string
	for _, d := range res.Devices {
		got = append(got, d.TaskPath+"="+d.HostPath+":"+d.Permissions)
	}
	want := []string{"/dev/nvidiactl=" + dev + "/nvidiactl:rw", "/dev/nvidia-uvm=" + dev + "/nvidia-uvm:rw", "/dev/nvidia0=" + dev + "/nvidia0:rw"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("devices\n got %v\nwant %v", got, want)
	}
}

func TestFingerprintFollowsReservations(t *testing.T) {
	// A policy that leaves 3 units makes the budget edge visible: reserving all of them leaves
	// no healthy instance, and the stream must say so without being asked.
	s, _ := newSim(t, "T4=5GiB", "")
	m, ch := firstFingerprint(t, s)
	g := m.DeviceGroup[0]
	if len(g.Devices) != 3 {
		t.Fatalf("%d units on a 5GiB GPU with 2GiB headroom, want 3", len(g.Devices))
	}
	mustReserve(t, s, ids(g, 3))
	// Held units stay listed and healthy (Nomad's accounter, not health, keeps them busy), so
	// the reservation sends nothing. Rather than wait some time for a message that should not
	// come, make a change Nomad does see: the next message must be that one, not one for the
	// reservation before it.
	_, l, _ := s.runtime().parts()
	if err := l.SetHealth(g.Attributes[AttrUUID].GetStringVal(), false, "drained by the test"); err != nil {
		t.Fatal(err)
	}
	select {
	case m2 := <-ch:
		if d := m2.DeviceGroup[0].Devices; len(d) != 3 || d[0].Healthy || !strings.Contains(d[0].HealthDescription, "drained by the test") {
			t.Fatalf("the first fingerprint after the reservation is %v; want only the drain, the reservation changes nothing Nomad sees", m2)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no fingerprint within 10s of draining the GPU")
	}
	if err := l.SetHealth(g.Attributes[AttrUUID].GetStringVal(), true, ""); err != nil {
		t.Fatal(err)
	}
	_, err := s.Reserve(context.Background(), ids(g, 1))
	if err != nil {
		// The scheduler reused unit 0: the old reservation ends first and this one fits.
		t.Fatalf("reusing a unit: %v", err)
	}
}

func TestStatsReportReservationUse(t *testing.T) {
	s, _ := newSim(t, "H100=80GiB", "")
	m, _ := firstFingerprint(t, s)
	held := ids(m.DeviceGroup[0], 2)
	mustReserve(t, s, held)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan *devicepb.StatsResponse, 4)
	go s.Stats(ctx, 10*time.Millisecond, func(r *devicepb.StatsResponse) error { got <- r; return nil })
	var r *devicepb.StatsResponse
	select {
	case r = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("no stats")
	}
	if err := emulator.ValidateStats(r); err != nil {
		t.Fatal(err)
	}
	inst := r.Groups[0].InstanceStats
	if len(inst) != 78 {
		t.Errorf("%d instance stats, want 78", len(inst))
	}
	// One line per task: the reservation's first unit carries its cap, its other unit points
	// there, and a free unit reads "free" rather than a figure that looks like its own use.
	if st := inst[held[0]].GetStats().GetAttributes()[StatCap]; st.GetIntNumeratorVal().GetValue() != 2048 {
		t.Errorf("%s: cap stat %v, want 2048 MiB", held[0], st)
	}
	if sum := inst[held[0]].GetSummary(); sum.GetIntDenominatorVal().GetValue() != 2048 {
		t.Errorf("%s: summary %v, want the task's use against its 2048 MiB cap", held[0], sum)
	}
	if sum := inst[held[1]].GetSummary(); sum.GetStringVal().GetValue() != "held, see "+held[0] || sum.GetIntNumeratorVal() != nil {
		t.Errorf("%s: summary %v, want it to point at %s", held[1], sum, held[0])
	}
	free := inst[ids(m.DeviceGroup[0], 3)[2]]
	if free.GetSummary().GetStringVal().GetValue() != "free" {
		t.Errorf("free unit summary %v, want \"free\"", free.GetSummary())
	}
	// Every unit carries its GPU's line, named as nomad-device-nvidia names it.
	gpuMem := free.GetStats().GetAttributes()[StatGPU]
	if gpuMem.GetIntDenominatorVal().GetValue() != 80*1024 || gpuMem.GetIntNumeratorVal().GetValue() != int64(gpu.SimDriverReserve/size.MiB) {
		t.Errorf("GPU memory %v, want the GPU's %d/%d MiB", gpuMem, gpu.SimDriverReserve/size.MiB, 80*1024)
	}
	for _, k := range []string{StatUtil, StatTemp, StatPower} {
		if _, ok := free.GetStats().GetAttributes()[k]; !ok {
			t.Errorf("no %q in the GPU's line", k)
		}
	}
	if u := free.GetStats().GetAttributes()[StatUtil]; u.GetUnit() != "%" || u.GetIntNumeratorVal() == nil {
		t.Errorf("GPU utilization %v, want a percentage from the backend", u)
	}
}

func TestSetConfigTouchesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	s := NewServer(Options{})
	defer s.Shutdown()
	hcl := `config {
		state_dir = "` + dir + `"
		policy { address = "http://127.0.0.1:1" }
	}`
	if err := s.SetConfig(encode(t, hcl), APIVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("SetConfig created or touched state_dir %s (%v)", dir, err)
	}
}

func TestLockedLedgerStillFingerprints(t *testing.T) {
	s, dir := newSim(t, "H100=80GiB", `fingerprint_period = "1s"`)
	other, err := ledger.Open(dir, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, ch := firstFingerprint(t, s)
	if len(m.DeviceGroup) != 1 {
		t.Fatalf("%d groups while the ledger is locked, want the GPU shown with no units", len(m.DeviceGroup))
	}
	g := m.DeviceGroup[0]
	if len(g.Devices) != 0 || !strings.Contains(g.Attributes["status"].GetStringVal(), "ledger") {
		t.Errorf("locked ledger: %d units, status %q", len(g.Devices), g.Attributes["status"].GetStringVal())
	}
	other.Close()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case m := <-ch:
			if err := emulator.ValidateFingerprint(m); err != nil {
				t.Fatal(err)
			}
			if len(m.DeviceGroup) == 1 && len(m.DeviceGroup[0].Devices) == 78 {
				return
			}
		case <-deadline:
			t.Fatal("units not advertised within 5s of the ledger lock being released")
		}
	}
}

// restartBackendDown shuts s down and starts its second life on the same state_dir, but with a
// simulated backend that cannot start (its directory is a file).
func restartBackendDown(t *testing.T, s *Server, dir string) *Server {
	t.Helper()
	s.Shutdown()
	bad := filepath.Join(dir, "not-a-dir")
	if err := os.WriteFile(bad, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s2 := NewServer(Options{})
	t.Cleanup(s2.Shutdown)
	hcl := `config {
		gpu_backend = "simulated"
		state_dir = "` + dir + `"
		simulated_dir = "` + bad + `"
	}`
	if err := s2.SetConfig(encode(t, hcl), APIVersion); err != nil {
		t.Fatal(err)
	}
	return s2
}

func TestBackendLostAfterRestartMarksUnitsUnhealthy(t *testing.T) {
	// First life: simulated GPUs recorded in the ledger, one reservation.
	s, dir := newSim(t, "A100=40GiB", "")
	m, _ := firstFingerprint(t, s)
	held := ids(m.DeviceGroup[0], 2)
	mustReserve(t, s, held)

	m2, _ := firstFingerprint(t, restartBackendDown(t, s, dir))
	if len(m2.DeviceGroup) != 1 {
		t.Fatalf("%d groups, want the GPU the ledger remembers", len(m2.DeviceGroup))
	}
	for _, d := range m2.DeviceGroup[0].Devices {
		isHeld := d.ID == held[0] || d.ID == held[1]
		if !isHeld && (d.Healthy || !strings.Contains(d.HealthDescription, "GPU backend")) {
			t.Fatalf("free unit %s healthy=%v %q while the backend is down", d.ID, d.Healthy, d.HealthDescription)
		}
	}
}
