package gpu_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
)

// health lists the GPUs through b and returns each one's reason, "" for a healthy one.
func health(t *testing.T, b *gpu.Simulated) []string {
	t.Helper()
	devs, err := b.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(devs))
	for i, d := range devs {
		if d.Healthy != (d.HealthReason == "") {
			t.Fatalf("GPU %d: healthy %v with reason %q", i, d.Healthy, d.HealthReason)
		}
		if d.Healthy && !d.EventAt.IsZero() {
			t.Fatalf("GPU %d: healthy, with an event's time %s", i, d.EventAt)
		}
		out[i] = d.HealthReason
	}
	return out
}

// Raised events reach every handle open before them, as NVML's reach the processes registered
// for them: an application's XID leaves the GPU in service, a critical one or a double-bit ECC
// error marks only the GPU that raised it, the first mark stays, and a handle opened after the
// events (a gpufrac process started after them) sees none.
func TestSimulatedXIDMarks(t *testing.T) {
	s, devs := testutil.NewSim(t, "2xH100=80GiB")
	other := testutil.AttachSim(t, s.Dir())
	g0, g1 := devs[0].UUID, devs[1].UUID

	for _, code := range gpu.ApplicationXIDs() {
		if err := s.RaiseXID(g0, code); err != nil {
			t.Fatal(err)
		}
	}
	if h := health(t, other); h[0] != "" || h[1] != "" {
		t.Fatalf("after application XIDs: %q; want both GPUs in service", h)
	}
	before := time.Now()
	if err := s.RaiseXID(g0, 79); err != nil {
		t.Fatal(err)
	}
	raised := time.Now()
	if err := s.RaiseXID(g0, 48); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]*gpu.Simulated{"the raising handle": s, "another process's": other} {
		// The time of the event that marked the GPU says which failures it explains.
		devs, err := b.Devices(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if at := devs[0].EventAt; at.Before(before) || at.After(raised) {
			t.Errorf("%s: GPU0's event at %s, want XID 79's, between %s and %s", name, at, before, raised)
		}
		h := health(t, b)
		if !strings.HasPrefix(h[0], "XID 79 at ") || !strings.Contains(h[0], "GPU has fallen off the bus; kept until this gpufrac process restarts") {
			t.Errorf("%s: GPU0 %q, want the first critical XID's mark (79)", name, h[0])
		}
		if h[1] != "" {
			t.Errorf("%s: GPU1 %q, want it untouched", name, h[1])
		}
	}
	if err := other.RaiseDoubleBitECC(g1); err != nil {
		t.Fatal(err)
	}
	if h := health(t, s); !strings.HasPrefix(h[1], "double-bit ECC error at ") {
		t.Errorf("GPU1 after a double-bit ECC error: %q", h[1])
	}
	if h := health(t, testutil.AttachSim(t, s.Dir())); h[0] != "" || h[1] != "" {
		t.Errorf("a handle opened after the events: %q; want no mark (marks live as long as the process that saw them)", h)
	}

	if err := s.RaiseXID(g0, 0); err == nil || !strings.Contains(err.Error(), "XID 0") {
		t.Errorf("RaiseXID(0): %v, want an error naming XID 0", err)
	}
	if err := s.RaiseXID("GPU-51m99999-none", 79); !errors.Is(err, gpu.ErrUnknownDevice) {
		t.Errorf("RaiseXID on an unknown GPU: %v, want ErrUnknownDevice", err)
	}
}

// A handle that ignores an XID leaves its GPU in service where another handle marks it; XID 0,
// which does not exist, is refused by name.
func TestSimulatedIgnoredXIDs(t *testing.T) {
	s, devs := testutil.NewSim(t, "H100=80GiB")
	ignoring, err := gpu.NewSimulated(gpu.SimConfig{Dir: s.Dir(), Health: gpu.HealthOptions{IgnoredXIDs: []uint64{92}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RaiseXID(devs[0].UUID, 92); err != nil {
		t.Fatal(err)
	}
	if h := health(t, ignoring); h[0] != "" {
		t.Errorf("the handle ignoring XID 92: %q, want the GPU in service", h[0])
	}
	if h := health(t, s); !strings.HasPrefix(h[0], "XID 92 at ") {
		t.Errorf("the handle ignoring nothing: %q, want XID 92's mark", h[0])
	}
	_, err = gpu.NewSimulated(gpu.SimConfig{Dir: s.Dir(), Health: gpu.HealthOptions{IgnoredXIDs: []uint64{0}}})
	if err == nil || !strings.Contains(err.Error(), "XID 0") {
		t.Errorf("ignoring XID 0: %v, want an error naming it", err)
	}
}

// What the memory says of itself is read at each listing, by every handle, whenever it opened
// (the driver's counters), and clears with them; uncorrectable errors count from a handle's
// first reading, so a count a GPU already had when gpufrac started does not drain it.
func TestSimulatedMemoryErrors(t *testing.T) {
	s, devs := testutil.NewSim(t, "H100=80GiB")
	uuid := devs[0].UUID
	early := testutil.AttachSim(t, s.Dir())
	if h := health(t, early); h[0] != "" {
		t.Fatalf("a clean GPU: %q", h[0])
	}
	for _, tc := range []struct {
		m    gpu.MemoryErrors
		want string
	}{
		{gpu.MemoryErrors{RemapPending: true}, "row remapping pending: reset the GPU to apply it"},
		{gpu.MemoryErrors{RemapFailed: true}, "row remapping failed"},
		{gpu.MemoryErrors{Uncorrectable: 2}, "uncorrectable ECC errors since gpufrac started (2)"},
	} {
		if err := s.SetMemoryErrors(uuid, &tc.m); err != nil {
			t.Fatal(err)
		}
		if h := health(t, early); !strings.HasPrefix(h[0], tc.want) {
			t.Errorf("%+v: %q, want %q", tc.m, h[0], tc.want)
		}
		// A handle opened now sees the remapper's state, but errors counted before it are history.
		late := health(t, testutil.AttachSim(t, s.Dir()))[0]
		if tc.m.Uncorrectable > 0 && late != "" {
			t.Errorf("%+v, a handle opened after the errors: %q, want the GPU in service", tc.m, late)
		}
		if tc.m.Uncorrectable == 0 && !strings.HasPrefix(late, tc.want) {
			t.Errorf("%+v, a handle opened after: %q, want %q", tc.m, late, tc.want)
		}
	}
	pinMemory(t, s, early, uuid, &gpu.MemoryErrors{Uncorrectable: 3}, "uncorrectable ECC errors since gpufrac started (3)")
	pinMemory(t, s, early, uuid, nil, "") // the reset
	// Counting starts again from the reset.
	pinMemory(t, s, early, uuid, &gpu.MemoryErrors{Uncorrectable: 1}, "uncorrectable ECC errors since gpufrac started (1)")
}

// pinMemory pins uuid's memory state to m (nil: a clean memory) and wants b's next listing of the
// GPU to begin with want ("": in service).
func pinMemory(t *testing.T, s, b *gpu.Simulated, uuid string, m *gpu.MemoryErrors, want string) {
	t.Helper()
	if err := s.SetMemoryErrors(uuid, m); err != nil {
		t.Fatal(err)
	}
	if h := health(t, b)[0]; (want == "" && h != "") || !strings.HasPrefix(h, want) {
		t.Errorf("memory %+v: %q, want %q", m, h, want)
	}
}

// A listing that cannot read the memory's state says so and leaves the count of uncorrectable
// errors where it was: the errors the GPU had when the handle first read them stay history
// once the state reads again, as the NVML backend keeps its baseline when a query fails.
func TestSimulatedMemoryErrorsUnreadableKeepsTheBaseline(t *testing.T) {
	s, devs := testutil.NewSim(t, "H100=80GiB")
	uuid := devs[0].UUID
	if err := s.SetMemoryErrors(uuid, &gpu.MemoryErrors{Uncorrectable: 5}); err != nil {
		t.Fatal(err)
	}
	b := testutil.AttachSim(t, s.Dir())
	if h := health(t, b); h[0] != "" {
		t.Fatalf("5 errors from before the handle opened: %q, want the GPU in service", h[0])
	}
	path := filepath.Join(s.Dir(), uuid, "memory-errors")
	if err := os.WriteFile(path, []byte("garbled\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if h := health(t, b); !strings.HasPrefix(h[0], "cannot read simulated health: ") {
		t.Fatalf("an unreadable memory state: %q, want the GPU out of service saying so", h[0])
	}
	// The same 5 errors readable again: none since the first reading.
	pinMemory(t, s, b, uuid, &gpu.MemoryErrors{Uncorrectable: 5}, "")
	// One error after the first reading is counted alone.
	pinMemory(t, s, b, uuid, &gpu.MemoryErrors{Uncorrectable: 6}, "uncorrectable ECC errors since gpufrac started (1)")
}
