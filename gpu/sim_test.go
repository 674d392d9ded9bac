package gpu_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/size"
)

// h100 is the machine most tests here run on: one simulated H100, and its UUID.
func h100(t *testing.T) (*gpu.Simulated, string) {
	t.Helper()
	s, devs := testutil.NewSim(t, "H100=80GiB")
	return s, devs[0].UUID
}

func TestParseSimSpec(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string // a fragment the error must contain, naming the bad entry
	}{
		{in: "H100=80GiB", want: []string{"H100=80GiB"}},
		{in: "H100=80GiB,H100=80GiB", want: []string{"H100=80GiB", "H100=80GiB"}},
		{in: "2xH100=80GiB", want: []string{"H100=80GiB", "H100=80GiB"}},
		{in: " 2xH100 = 80GiB , A10=24GB", want: []string{"H100=80GiB", "H100=80GiB", "A10=24000000000"}},
		{in: "x100=16GiB", want: []string{"x100=16GiB"}},
		{in: "", wantErr: "empty list"},
		{in: "H100", wantErr: `"H100"`},
		{in: "H100=", wantErr: `"H100="`},
		{in: "=80GiB", wantErr: `"=80GiB"`},
		{in: "0xH100=80GiB", wantErr: `"0xH100=80GiB"`},
		{in: "65xH100=80GiB", wantErr: `"65xH100=80GiB"`},
		{in: "H100=80XB", wantErr: `"H100=80XB"`},
		{in: "H100=512MiB", wantErr: "below 1GiB"},
		{in: "H100=2TiB", want: []string{"H100=2TiB"}},
		{in: "H100=16383PiB", wantErr: `"16383PiB" is above 2TiB`},
		{in: "H100=3TiB", wantErr: `"3TiB" is above 2TiB`},
		{in: "a/b=8GiB", wantErr: `"a/b=8GiB"`},
		{in: "2xH100=80GiB,bogus", wantErr: `"bogus"`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := gpu.ParseSimSpec(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseSimSpec(%q) = %v, %v; want an error containing %s", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSimSpec(%q): %v", tc.in, err)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("ParseSimSpec(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestSimUUID(t *testing.T) {
	a := gpu.SimUUID(0, "H100")
	// Pinned: ledger instance IDs and docs/gpu-backends.md depend on this value never changing.
	if a != "GPU-51m00000-e910-b779-4a2f-8a5567ef8a7c" {
		t.Fatalf("SimUUID(0, H100) = %s: it changed, which breaks existing ledgers", a)
	}
	for _, other := range []string{gpu.SimUUID(1, "H100"), gpu.SimUUID(0, "A100")} {
		if other == a {
			t.Fatalf("distinct GPUs share UUID %s", a)
		}
	}
	parts := strings.Split(strings.TrimPrefix(a, "GPU-"), "-")
	lens := []int{}
	for _, p := range parts {
		lens = append(lens, len(p))
	}
	if !strings.HasPrefix(a, "GPU-51m") || len(parts) != 5 || lens[0] != 8 || lens[1] != 4 || lens[4] != 12 {
		t.Fatalf("SimUUID = %q: want GPU-51mNNNNN-xxxx-xxxx-xxxx-xxxxxxxxxxxx", a)
	}
}

func TestSimulatedDevicesAndAttach(t *testing.T) {
	ctx := context.Background()
	s, _ := testutil.NewSim(t, "2xH100=80GiB", "A10=24GiB")
	devs, err := s.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 3 || devs[2].Model != "A10" || devs[2].MemoryBytes != 24*size.GiB || devs[1].Index != 1 || !devs[0].Healthy {
		t.Fatalf("Devices = %+v", devs)
	}
	if s.Kind() != gpu.KindSimulated || s.DriverVersion() != "simulated" {
		t.Fatalf("Kind/DriverVersion = %q/%q", s.Kind(), s.DriverVersion())
	}
	attached := testutil.AttachSim(t, s.Dir())
	again, _ := attached.Devices(ctx)
	if len(again) != 3 || again[1].UUID != devs[1].UUID || again[1].MemoryBytes != devs[1].MemoryBytes {
		t.Fatalf("attached Devices = %+v, want %+v", again, devs)
	}
	// A restart with the same spec keeps the UUIDs (ledger instance IDs depend on them).
	restarted, err := gpu.NewSimulated(gpu.SimConfig{GPUs: []string{"H100=80GiB,H100=80GiB,A10=24GiB"}, Dir: s.Dir()})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := restarted.Devices(ctx); r[2].UUID != devs[2].UUID {
		t.Fatalf("UUID changed across restart: %s vs %s", r[2].UUID, devs[2].UUID)
	}
	_, err = gpu.NewSimulated(gpu.SimConfig{Dir: t.TempDir()})
	if !errors.Is(err, gpu.ErrUnknownDevice) {
		t.Fatalf("attaching to an empty directory: %v, want ErrUnknownDevice", err)
	}
	if _, err := gpu.NewSimulated(gpu.SimConfig{GPUs: []string{"H100=lots"}, Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "H100=lots") {
		t.Fatalf("bad GPU entry: %v", err)
	}
}

func TestSimulatedUsage(t *testing.T) {
	ctx := context.Background()
	s, uuid := h100(t)
	pid := os.Getpid()
	steps := []struct {
		name     string
		do       func() error
		wantProc []gpu.Process
		wantUtil int
	}{
		{"empty", func() error { return nil }, []gpu.Process{}, 0},
		{"set", func() error { return s.SetUsage(uuid, pid, 2*size.GiB) }, []gpu.Process{{PID: pid, UsedBytes: 2 * size.GiB}}, 0},
		{"busy", func() error { return s.SetProcess(uuid, pid, 3*size.GiB, true) }, []gpu.Process{{PID: pid, UsedBytes: 3 * size.GiB}}, 100},
		{"cleared", func() error { return s.ClearProcess(uuid, pid) }, []gpu.Process{}, 0},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		procs, err := s.Processes(ctx, uuid)
		if err != nil {
			t.Fatal(err)
		}
		if len(procs) != len(st.wantProc) || (len(procs) == 1 && procs[0] != st.wantProc[0]) {
			t.Fatalf("%s: Processes = %+v, want %+v", st.name, procs, st.wantProc)
		}
		var sum size.Bytes
		for _, p := range st.wantProc {
			sum += p.UsedBytes
		}
		if used, _ := s.MemoryUsed(ctx, uuid); used != sum+gpu.SimDriverReserve {
			t.Fatalf("%s: MemoryUsed = %s, want %s", st.name, used, sum+gpu.SimDriverReserve)
		}
		if u, _ := s.Utilization(ctx, uuid); u != st.wantUtil {
			t.Fatalf("%s: Utilization = %d, want %d", st.name, u, st.wantUtil)
		}
	}
}

func TestSimulatedUnknownGPU(t *testing.T) {
	ctx := context.Background()
	s, _ := testutil.NewSim(t, "H100=80GiB")
	calls := map[string]func() error{
		"MemoryUsed":     func() error { _, err := s.MemoryUsed(ctx, "GPU-nope"); return err },
		"Processes":      func() error { _, err := s.Processes(ctx, "GPU-nope"); return err },
		"Utilization":    func() error { _, err := s.Utilization(ctx, "GPU-nope"); return err },
		"Temperature":    func() error { _, err := s.Temperature(ctx, "GPU-nope"); return err },
		"Power":          func() error { _, err := s.Power(ctx, "GPU-nope"); return err },
		"SetSensors":     func() error { return s.SetSensors("GPU-nope", &gpu.SimSensors{TemperatureC: 40}) },
		"SetSensorFault": func() error { return s.SetSensorFault("GPU-nope", gpu.SensorPower, "x") },
		"SetUsage":       func() error { return s.SetUsage("GPU-nope", os.Getpid(), size.GiB) },
		"SetHealth":      func() error { return s.SetHealth("GPU-nope", false, "x") },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, gpu.ErrUnknownDevice) || !strings.Contains(err.Error(), "GPU-nope") {
			t.Errorf("%s: %v, want ErrUnknownDevice naming GPU-nope", name, err)
		}
	}
}

// TestSimulatedDeadProcesses: a SIGKILLed child (a zombie until reaped), a reaped one and a
// recycled PID all stop counting, and their entries are removed.
func TestSimulatedDeadProcesses(t *testing.T) {
	ctx := context.Background()
	s, uuid := h100(t)
	cmd := child(t)
	pid := cmd.Process.Pid
	if err := s.SetUsage(uuid, pid, 4*size.GiB); err != nil {
		t.Fatal(err)
	}
	if procs, _ := s.Processes(ctx, uuid); len(procs) != 1 || procs[0].PID != pid {
		t.Fatalf("before kill: %+v", procs)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Not reaped yet: the child is a zombie (or briefly still dying), and must drop out.
	testutil.Eventually(t, 5*time.Second, "the killed process to drop out", func() bool { p, _ := s.Processes(ctx, uuid); return len(p) == 0 })
	if _, err := os.Stat(gpu.ProcPath(s, uuid, pid)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("entry of the killed process was not removed: %v", err)
	}
	cmd.Wait()
	if err := s.SetUsage(uuid, pid, size.GiB); err == nil {
		t.Fatalf("SetUsage for a dead process succeeded")
	}
	// A recycled PID: the entry's start time is not the live process's start time.
	self := os.Getpid()
	if err := os.WriteFile(gpu.ProcPath(s, uuid, self), []byte("1073741824 0 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if procs, _ := s.Processes(ctx, uuid); len(procs) != 0 {
		t.Fatalf("entry with a stale start time counted: %+v", procs)
	}
}

func TestSimulatedHealth(t *testing.T) {
	ctx := context.Background()
	s, devs := testutil.NewSim(t, "2xH100=80GiB")
	other := testutil.AttachSim(t, s.Dir())
	uuid := devs[1].UUID
	if err := s.SetHealth(uuid, false, "ECC errors"); err != nil {
		t.Fatal(err)
	}
	devs, _ = other.Devices(ctx)
	if devs[0].Healthy != true || devs[1].Healthy || devs[1].HealthReason != "ECC errors" {
		t.Fatalf("after SetHealth(false): %+v", devs)
	}
	if err := s.SetHealth(uuid, true, ""); err != nil {
		t.Fatal(err)
	}
	if devs, _ = other.Devices(ctx); !devs[1].Healthy || devs[1].HealthReason != "" {
		t.Fatalf("after SetHealth(true): %+v", devs[1])
	}
}

func TestSimulatedConcurrent(t *testing.T) {
	ctx := context.Background()
	s, uuid := h100(t)
	// A killed, unreaped child: every goroutine below races to drop and remove its entry.
	dead := child(t)
	if err := s.SetUsage(uuid, dead.Process.Pid, size.GiB); err != nil {
		t.Fatal(err)
	}
	dead.Process.Kill()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				var err error
				switch (g + i) % 3 {
				case 0:
					err = s.SetProcess(uuid, os.Getpid(), size.Bytes(i)*size.MiB, i%2 == 0)
				case 1:
					var procs []gpu.Process
					procs, err = s.Processes(ctx, uuid)
					for _, p := range procs {
						if p.PID != os.Getpid() && p.PID != dead.Process.Pid {
							err = errors.New("unexpected process listed: " + strconv.Itoa(p.PID))
						}
					}
				default:
					_, err = s.MemoryUsed(ctx, uuid)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	testutil.Eventually(t, 5*time.Second, "the killed process to drop out", func() bool {
		procs, err := s.Processes(ctx, uuid)
		return err == nil && len(procs) <= 1
	})
	if _, err := os.Stat(gpu.ProcPath(s, uuid, dead.Process.Pid)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the killed process's entry survived: %v", err)
	}
}

func BenchmarkSimProcesses(b *testing.B) {
	ctx := context.Background()
	s, devs := testutil.NewSim(b, "H100=80GiB")
	uuid := devs[0].UUID
	for range 8 {
		if err := s.SetUsage(uuid, child(b).Process.Pid, 2*size.GiB); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		procs, err := s.Processes(ctx, uuid)
		if err != nil || len(procs) != 8 {
			b.Fatalf("Processes = %d, %v", len(procs), err)
		}
	}
}

// BenchmarkSimSetProcess is the cost of one usage report, which a simulated job makes ~50 times a
// second.
func BenchmarkSimSetProcess(b *testing.B) {
	s, devs := testutil.NewSim(b, "H100=80GiB")
	uuid := devs[0].UUID
	pid := os.Getpid()
	for i := 0; b.Loop(); i++ {
		if err := s.SetProcess(uuid, pid, size.Bytes(i)*size.MiB, true); err != nil {
			b.Fatal(err)
		}
	}
}

// Exec tasks get /dev/nvidia<minor>: simulated GPUs number their minors like a typical host.
func TestSimMinorFollowsIndex(t *testing.T) {
	s, err := gpu.NewSimulated(gpu.SimConfig{GPUs: []string{"A100=40GiB", "A100=40GiB"}, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	devs, err := s.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d.Minor != d.Index {
			t.Errorf("GPU %d: minor %d, want %d", d.Index, d.Minor, d.Index)
		}
	}
}

// A removed GPU is gone for every process sharing the directory: not listed, and every query
// about it fails naming the GPU and the reason, while the other GPU is untouched. Brought back,
// it is listed and answers again, with the usage recorded before it went.
func TestSimulatedRemovedGPU(t *testing.T) {
	ctx := context.Background()
	s, devs := testutil.NewSim(t, "2xH100=80GiB")
	other := testutil.AttachSim(t, s.Dir())
	gone, kept := devs[0].UUID, devs[1].UUID
	if err := s.SetUsage(gone, os.Getpid(), size.GiB); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRemoved(gone, true, "XID 79: fell off the bus"); err != nil {
		t.Fatal(err)
	}
	devs, err := other.Devices(ctx)
	if err != nil || len(devs) != 1 || devs[0].UUID != kept {
		t.Fatalf("Devices after the removal: %+v, %v; want only %s", devs, err, kept)
	}
	queries := map[string]func() error{
		"Processes":   func() error { _, err := other.Processes(ctx, gone); return err },
		"MemoryUsed":  func() error { _, err := other.MemoryUsed(ctx, gone); return err },
		"Utilization": func() error { _, err := other.Utilization(ctx, gone); return err },
	}
	for name, q := range queries {
		if err := q(); err == nil || !strings.Contains(err.Error(), gone) || !strings.Contains(err.Error(), "XID 79") ||
			!strings.Contains(err.Error(), "NVML_ERROR_GPU_IS_LOST") {
			t.Errorf("%s of the removed GPU: %v; want an error naming it, NVML's code and the reason", name, err)
		}
	}
	if _, err := other.Processes(ctx, kept); err != nil {
		t.Errorf("Processes of the GPU still there: %v", err)
	}

	if err := s.SetRemoved(gone, false, ""); err != nil {
		t.Fatal(err)
	}
	if devs, err := other.Devices(ctx); err != nil || len(devs) != 2 || devs[0].UUID != gone || !devs[0].Healthy {
		t.Fatalf("Devices once it is back: %+v, %v", devs, err)
	}
	if used, err := other.MemoryUsed(ctx, gone); err != nil || used != size.GiB+gpu.SimDriverReserve {
		t.Fatalf("MemoryUsed once it is back: %s, %v; want the 1GiB recorded plus the driver's", used, err)
	}
	if err := s.SetRemoved("GPU-nope", true, "x"); err == nil {
		t.Error("SetRemoved of an unknown GPU succeeded")
	}
}

// A removed GPU answers no query, even one whose readings a test pinned: as NVML, whose every
// query of a lost GPU fails with GPU_IS_LOST, it must not report a temperature, a power draw or
// GPM figures (a sampler opened before it went included) while Devices no longer lists it.
func TestSimulatedRemovedGPUPinnedReadings(t *testing.T) {
	ctx := context.Background()
	s, devs := testutil.NewSim(t, "H100=80GiB")
	gone := devs[0].UUID
	if err := s.SetSensors(gone, &gpu.SimSensors{TemperatureC: 50, Power: gpu.Power{UsageMilliwatts: 1000, LimitMilliwatts: 2000}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetGPM(gone, &gpu.SimLoad{SMUtil: 40, SMOccupancy: 20}); err != nil {
		t.Fatal(err)
	}
	sampler, err := s.OpenGPM(ctx, gone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sampler.Close() })
	if err := s.SetRemoved(gone, true, "XID 79: fell off the bus"); err != nil {
		t.Fatal(err)
	}
	queries := map[string]func() error{
		"Temperature": func() error { _, err := s.Temperature(ctx, gone); return err },
		"Power":       func() error { _, err := s.Power(ctx, gone); return err },
		"OpenGPM": func() error {
			g, err := s.OpenGPM(ctx, gone)
			if err == nil {
				_ = g.Close()
			}
			return err
		},
		"GPM Read": func() error { _, err := sampler.Read(ctx); return err },
	}
	for name, q := range queries {
		if err := q(); err == nil || !strings.Contains(err.Error(), "NVML_ERROR_GPU_IS_LOST") {
			t.Errorf("%s of the removed GPU with pinned readings: %v; want GPU_IS_LOST", name, err)
		}
	}
}
