package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
)

// waitFP reads fingerprints from ch until ok holds.
func waitFP(t *testing.T, ch <-chan *devicepb.FingerprintResponse, what string, ok func(*devicepb.FingerprintResponse) bool) *devicepb.FingerprintResponse {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case m := <-ch:
			if ok(m) {
				return m
			}
		case <-deadline:
			t.Fatalf("no fingerprint within 15s where %s", what)
		}
	}
}

// wantRefused checks that a Reserve error carries the gRPC code and names the reason.
func wantRefused(t *testing.T, err error, code codes.Code, fragment string) {
	t.Helper()
	if err == nil {
		t.Fatalf("Reserve succeeded; want a %s refusal mentioning %q", code, fragment)
	}
	if got := status.Code(grpcError(err)); got != code {
		t.Errorf("gRPC code %s, want %s (error %q)", got, code, err)
	}
	if !strings.Contains(err.Error(), fragment) {
		t.Errorf("error %q does not mention %q", err, fragment)
	}
}

func freeUnhealthy(g *devicepb.DeviceGroup, fragment string) bool {
	n := 0
	for _, d := range g.GetDevices() {
		if d.GetHealthy() || !strings.Contains(d.GetHealthDescription(), fragment) {
			return false
		}
		n++
	}
	return n > 0
}

func TestReserveRefusesWhenTheGPUIsNotFullyManaged(t *testing.T) {
	t.Run("no valid policy yet", func(t *testing.T) {
		s, _ := newSim(t, "H100=80GiB", `policy { address = "http://127.0.0.1:1" }`)
		m, _ := firstFingerprint(t, s)
		g := m.DeviceGroup[0]
		if !freeUnhealthy(g, "waiting for the first valid policy") {
			t.Fatalf("units while no policy has loaded: %v", g.Devices[:1])
		}
		wantDocumentedHealth(t, unhealthyDescs(g)...)
		_, err := s.Reserve(context.Background(), []string{g.Devices[0].ID})
		wantRefused(t, err, codes.Unavailable, "waiting for the first valid policy")
	})
	t.Run("enforcer not running", func(t *testing.T) {
		s, _ := newSim(t, "H100=80GiB", "")
		m, ch := firstFingerprint(t, s)
		rt := s.runtime()
		rt.mu.Lock()
		rt.enf, rt.enforcerErr = nil, errors.New("stopped by the test")
		rt.mu.Unlock()
		rt.notify()
		down := waitFP(t, ch, "free units say the enforcer is not running", func(m *devicepb.FingerprintResponse) bool {
			return freeUnhealthy(m.DeviceGroup[0], "enforcer is not running")
		})
		wantDocumentedHealth(t, unhealthyDescs(down.DeviceGroup[0])...)
		_, err := s.Reserve(context.Background(), ids(m.DeviceGroup[0], 1))
		wantRefused(t, err, codes.Unavailable, "stopped by the test")
	})
	t.Run("MPS daemon cannot start", func(t *testing.T) {
		root := testutil.MPSRoot(t)
		missing := filepath.Join(t.TempDir(), "nvidia-cuda-mps-control")
		s, _ := newSim(t, "H100=80GiB,A100=40GiB", `gpu_modes = { "0" = "mps" }
			mps_root = "`+root+`"
			mps_control = "`+missing+`"`)
		m, ch := firstFingerprint(t, s)
		healthyA100 := ids(m.DeviceGroup[1], 1)
		// The enforcer's first try at the daemon can come before the first fingerprint (on a loaded
		// machine it did): then that one already says so, and no later one changes.
		cannotStart := func(m *devicepb.FingerprintResponse) bool {
			return freeUnhealthy(m.DeviceGroup[0], "MPS control daemon cannot start")
		}
		if !cannotStart(m) {
			m = waitFP(t, ch, "the mps GPU's units say its daemon cannot start", cannotStart)
		}
		if freeUnhealthy(m.DeviceGroup[1], "MPS") {
			t.Error("the isolated GPU's units went unhealthy too")
		}
		wantDocumentedHealth(t, unhealthyDescs(m.DeviceGroup[0])...)
		_, err := s.Reserve(context.Background(), []string{m.DeviceGroup[0].Devices[0].ID})
		wantRefused(t, err, codes.Unavailable, "(mps mode) for the task: GPU not fully managed: enforcer: prepare GPU")
		if !strings.Contains(err.Error(), missing) {
			t.Errorf("error %q does not name the control binary that failed", err)
		}
		if _, err := s.Reserve(context.Background(), healthyA100); err != nil {
			t.Errorf("the isolated GPU refused a task: %v", err)
		}
	})
	t.Run("fence configured but its library missing", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "libgpufrac-fence.so")
		s, _ := newSim(t, "H100=80GiB", `fence_library = "`+missing+`"`)
		m, ch := firstFingerprint(t, s)
		says := func(m *devicepb.FingerprintResponse) bool {
			return freeUnhealthy(m.DeviceGroup[0], "allocation fence is configured (fence = true) but cannot run")
		}
		if !says(m) {
			m = waitFP(t, ch, "free units say the fence cannot run", says)
		}
		wantDocumentedHealth(t, unhealthyDescs(m.DeviceGroup[0])...)
		_, err := s.Reserve(context.Background(), []string{m.DeviceGroup[0].Devices[0].ID})
		wantRefused(t, err, codes.Unavailable, missing)
	})
	t.Run("backend down", func(t *testing.T) {
		s, dir := newSim(t, "A100=40GiB", "")
		m, _ := firstFingerprint(t, s)
		free := ids(m.DeviceGroup[0], 1)
		s2 := restartBackendDown(t, s, dir)
		m2, _ := firstFingerprint(t, s2)
		for _, g := range m2.DeviceGroup {
			wantDocumentedHealth(t, unhealthyDescs(g)...)
		}
		_, err := s2.Reserve(context.Background(), free)
		wantRefused(t, err, codes.Unavailable, "GPU backend")
	})
}

func TestReserveErrorCodes(t *testing.T) {
	s, _ := newSim(t, "H100=80GiB,A100=40GiB", "")
	m, _ := firstFingerprint(t, s)
	a, b := m.DeviceGroup[0], m.DeviceGroup[1]
	mustReserve(t, s, ids(b, 38))
	tests := []struct {
		name     string
		ids      []string
		code     codes.Code
		fragment string
	}{
		{"two GPUs", []string{a.Devices[0].ID, a.Devices[1].ID, ledger.InstanceID(b.Attributes[AttrUUID].GetStringVal(), 0)}, codes.InvalidArgument, "more than one GPU"},
		{"malformed", []string{"nonsense"}, codes.InvalidArgument, "nonsense"},
		{"repeated", []string{a.Devices[0].ID, a.Devices[0].ID}, codes.InvalidArgument, "more than once"},
		{"beyond the units", []string{ledger.InstanceID(a.Attributes[AttrUUID].GetStringVal(), 500)}, codes.InvalidArgument, "-500"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Reserve(context.Background(), tt.ids)
			wantRefused(t, err, tt.code, tt.fragment)
		})
	}
	// Six one-unit tasks fill max_tasks_per_gpu (6 by default); the seventh is a full GPU.
	for i := range 6 {
		mustReserve(t, s, []string{a.Devices[i].ID})
	}
	_, err := s.Reserve(context.Background(), []string{a.Devices[10].ID})
	wantRefused(t, err, codes.ResourceExhausted, "max_tasks_per_gpu = 6")
	if got := status.Code(grpcError(ErrDisabled)); got != codes.Unavailable {
		t.Errorf("disabled plugin: code %s, want Unavailable", got)
	}
}

func TestMaxTasksPerGPUShowsInTheFingerprint(t *testing.T) {
	s, _ := newSim(t, "H100=80GiB,A100=40GiB", "")
	m, ch := firstFingerprint(t, s)
	g := m.DeviceGroup[0]
	for i := range 6 {
		mustReserve(t, s, []string{g.Devices[i].ID})
	}
	m = waitFP(t, ch, "the GPU at max_tasks_per_gpu has no healthy free unit", func(m *devicepb.FingerprintResponse) bool {
		for _, d := range m.DeviceGroup[0].Devices[6:] {
			if d.Healthy || !strings.Contains(d.HealthDescription, "max_tasks_per_gpu = 6") {
				return false
			}
		}
		return true
	})
	for _, d := range m.DeviceGroup[0].Devices[:6] {
		if !d.Healthy {
			t.Errorf("held unit %s unhealthy: %q", d.ID, d.HealthDescription)
		}
	}
	wantDocumentedHealth(t, unhealthyDescs(m.DeviceGroup[0])...)
	if n := len(ids(m.DeviceGroup[1], 100)); n != 38 {
		t.Errorf("the other GPU has %d healthy units, want 38", n)
	}
}

func TestGPUWithNoUnitsSaysWhy(t *testing.T) {
	tests := []struct {
		name, gpus, extra, want string
	}{
		{"headroom as large as the GPU", "T4=2GiB", "", "headroom (2GiB) is not smaller than the GPU's memory (2GiB)"},
		{"budget below one unit", "T4=3GiB", `unit = "2GiB"`, "smaller than one unit (2GiB)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newSim(t, tt.gpus, tt.extra)
			m, _ := firstFingerprint(t, s)
			g := m.DeviceGroup[0]
			if len(g.Devices) != 1 || g.Devices[0].Healthy || !strings.Contains(g.Devices[0].HealthDescription, tt.want) {
				t.Fatalf("devices %v; want one unhealthy stand-in saying %q", g.Devices, tt.want)
			}
			wantDocumentedHealth(t, unhealthyDescs(g)...)
			if got := g.Attributes[AttrUnits].GetIntVal(); got != 0 {
				t.Errorf("units attribute %d, want 0", got)
			}
			if !strings.Contains(g.Attributes["status"].GetStringVal(), tt.want) {
				t.Errorf("status attribute %q", g.Attributes["status"].GetStringVal())
			}
			_, err := s.Reserve(context.Background(), []string{g.Devices[0].ID})
			wantRefused(t, err, codes.InvalidArgument, "outside the 0 units")
			if id := g.Devices[0].ID; strings.Contains(err.Error(), id[:len(id)-1]+"-1") {
				t.Errorf("error %q gives a range of IDs that runs backwards", err)
			}
		})
	}
}

func TestSecondReserveOfALiveTasksUnits(t *testing.T) {
	s, _ := newSim(t, "H100=80GiB", "")
	m, _ := firstFingerprint(t, s)
	held := ids(m.DeviceGroup[0], 2)
	res := mustReserve(t, s, held)
	task := testutil.StartTask(t, res.Envs)
	// The task carries its token once its exec is done: until then /proc shows the test's own
	// environment (a loaded machine stretches that moment).
	environ := fmt.Sprintf("/proc/%d/environ", task.PID())
	testutil.Eventually(t, 10*time.Second, "the task's environment in "+environ, func() bool {
		b, err := os.ReadFile(environ)
		return err == nil && strings.Contains(string(b), res.Envs[enforcer.EnvReservation])
	})

	_, err := s.Reserve(context.Background(), held[1:])
	wantRefused(t, err, codes.ResourceExhausted, "still runs")
	if !errors.Is(err, ErrInUse) {
		t.Errorf("error does not wrap ErrInUse: %v", err)
	}
	_, l, _ := s.runtime().parts()
	if n := len(l.Reservations()); n != 1 {
		t.Fatalf("%d reservations after the refused Reserve, want the live task's one", n)
	}

	// Once the task has exited, its units go to whoever Nomad gives them next.
	task.Stop()
	if _, err := s.Reserve(context.Background(), held[1:]); err != nil {
		t.Fatalf("Reserve after the holder exited: %v", err)
	}
	rs := l.Reservations()
	if len(rs) != 1 || len(rs[0].InstanceIDs) != 1 || rs[0].InstanceIDs[0] != held[1] {
		t.Errorf("reservations %v, want only the new one on %s", rs, held[1])
	}
}
