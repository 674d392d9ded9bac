package gpu_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/size"
)

func TestSimHasGPM(t *testing.T) {
	tests := []struct {
		model string
		want  bool
	}{
		{"NVIDIA H200", true}, {"NVIDIA H100 80GB HBM3", true}, {"NVIDIA GH200 480GB", true},
		{"NVIDIA B200", true}, {"h100", true},
		{"NVIDIA A100-SXM4-40GB", false}, {"NVIDIA L40S", false}, {"Tesla T4", false}, {"NVIDIA A10G", false},
	}
	for _, tc := range tests {
		if got := gpu.SimHasGPM(tc.model); got != tc.want {
			t.Errorf("SimHasGPM(%q) = %v, want %v", tc.model, got, tc.want)
		}
	}
}

// sleeper starts a child process that lives for the test, so the simulated GPU has a second live
// process besides the test itself.
func sleeper(t *testing.T) int {
	t.Helper()
	return child(t).Process.Pid
}

// child starts a process the test may kill, and leaves unreaped (a zombie), or reap when it
// chooses; the test's end kills and reaps it if the test has not.
func child(tb testing.TB) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// TestSimulatedGPM walks one GPU's monitor through the loads of its processes: idle, one busy
// process with and without a declared load, two whose loads add up past the SMs, one no longer
// busy, a pinned reading seen through another handle, and back. Every figure is exact: the
// simulated monitor is deterministic, which is what lets the benchmark's arithmetic be tested.
func TestSimulatedGPM(t *testing.T) {
	ctx := context.Background()
	s, devs := testutil.NewSim(t, "H200=140GiB")
	uuid := devs[0].UUID
	peer := testutil.AttachSim(t, s.Dir())
	g, err := peer.OpenGPM(ctx, uuid)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	self, other := os.Getpid(), sleeper(t)
	steps := []struct {
		name      string
		do        func() error
		util, occ float64
	}{
		{"idle", func() error { return nil }, 0, 0},
		{"holding memory, not computing", func() error { return s.SetProcess(uuid, self, size.GiB, false) }, 0, 0},
		{"busy without a declared load", func() error { return s.SetProcess(uuid, self, size.GiB, true) }, gpu.SimBusySMUtil, gpu.SimBusySMOccupancy},
		{"busy with a declared load", func() error {
			return s.SetProcessLoad(uuid, self, gpu.SimLoad{SMUtil: 62.5, SMOccupancy: 30})
		}, 62.5, 30},
		{"a second busy process", func() error {
			return errors.Join(s.SetProcessLoad(uuid, other, gpu.SimLoad{SMUtil: 25, SMOccupancy: 20}),
				s.SetProcess(uuid, other, 2*size.GiB, true))
		}, 87.5, 50},
		{"loads past the SMs are capped", func() error {
			return s.SetProcessLoad(uuid, other, gpu.SimLoad{SMUtil: 70, SMOccupancy: 80})
		}, 100, 100},
		{"one stops computing", func() error { return s.SetProcess(uuid, self, size.GiB, false) }, 70, 80},
		{"pinned", func() error { return s.SetGPM(uuid, &gpu.SimLoad{SMUtil: 58.7, SMOccupancy: 41}) }, 58.7, 41},
		{"unpinned", func() error { return s.SetGPM(uuid, nil) }, 70, 80},
		{"the process leaves", func() error { return s.ClearProcess(uuid, other) }, 0, 0},
	}
	var last time.Time
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		r, err := g.Read(ctx)
		if err != nil {
			t.Fatalf("%s: Read: %v", st.name, err)
		}
		if r.SMUtil != st.util || r.SMOccupancy != st.occ {
			t.Errorf("%s: SM util %g%%, occupancy %g%%; want %g%%, %g%%", st.name, r.SMUtil, r.SMOccupancy, st.util, st.occ)
		}
		if r.End.Before(r.Start) || (!last.IsZero() && !r.Start.Equal(last)) {
			t.Errorf("%s: period %s-%s does not follow the previous one, which ended %s", st.name, r.Start, r.End, last)
		}
		last = r.End
	}
}

// TestSimulatedGPMDeadProcess: the load of a killed process stops counting and its declaration
// is removed, so a later process with the same PID inherits nothing.
func TestSimulatedGPMDeadProcess(t *testing.T) {
	ctx := context.Background()
	s, uuid := h100(t)
	cmd := child(t)
	pid := cmd.Process.Pid
	if err := errors.Join(s.SetProcessLoad(uuid, pid, gpu.SimLoad{SMUtil: 40, SMOccupancy: 10}),
		s.SetProcess(uuid, pid, size.GiB, true)); err != nil {
		t.Fatal(err)
	}
	g, err := s.OpenGPM(ctx, uuid)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if r, err := g.Read(ctx); err != nil || r.SMUtil != 40 {
		t.Fatalf("before the kill: %+v, %v", r, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the killed process's load to stop counting", func() bool {
		r, err := g.Read(ctx)
		return err == nil && r.SMUtil == 0
	})
	if _, err := os.Stat(gpu.LoadPath(s, uuid, pid)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the killed process's load declaration was not removed: %v", err)
	}
}

func TestSimulatedGPMErrors(t *testing.T) {
	ctx := context.Background()
	s, devs := testutil.NewSim(t, "H100=80GiB", "A100=40GiB")
	h100, a100 := devs[0].UUID, devs[1].UUID
	if _, err := s.OpenGPM(ctx, a100); !errors.Is(err, gpu.ErrNoGPM) {
		t.Errorf("OpenGPM on an A100: %v, want ErrNoGPM", err)
	}
	if _, err := s.OpenGPM(ctx, "GPU-nope"); !errors.Is(err, gpu.ErrUnknownDevice) {
		t.Errorf("OpenGPM on an unknown GPU: %v, want ErrUnknownDevice", err)
	}
	g, err := s.OpenGPM(ctx, h100)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetSensorFault(h100, gpu.SensorGPM, "NVML_ERROR_UNKNOWN"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Read(ctx); err == nil || !strings.Contains(err.Error(), "NVML_ERROR_UNKNOWN") {
		t.Errorf("Read with a GPM fault: %v", err)
	}
	if _, err := s.OpenGPM(ctx, h100); err == nil {
		t.Errorf("OpenGPM with a GPM fault succeeded")
	}
	if err := s.SetSensorFault(h100, gpu.SensorGPM, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Read(ctx); err != nil {
		t.Errorf("Read after the fault cleared: %v", err)
	}
	bad := []struct {
		name, want string
		do         func() error
	}{
		{"load above 100", "101", func() error {
			return s.SetProcessLoad(h100, os.Getpid(), gpu.SimLoad{SMUtil: 101})
		}},
		{"negative occupancy", "-1", func() error { return s.SetGPM(h100, &gpu.SimLoad{SMOccupancy: -1}) }},
		{"unknown GPU", "GPU-nope", func() error { return s.SetGPM("GPU-nope", nil) }},
		{"corrupt pinned file", "malformed load", func() error {
			if err := gpu.WriteFileAtomic(gpu.GPMPath(s, h100), []byte("x y\n")); err != nil {
				return err
			}
			_, err := g.Read(ctx)
			return err
		}},
	}
	for _, tc := range bad {
		if err := tc.do(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.name, err, tc.want)
		}
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Read(ctx); err == nil {
		t.Errorf("Read after Close succeeded")
	}
}

// TestSimulatedContention walks one GPU with two busy processes through contention off and on:
// off, each works at full speed whatever they want together (as before contention existed); on,
// demands that fit the SMs still leave each at full speed, demands past them slow each to its
// share less the switching cost, GPM shows the time lost to switching, and a process that stops
// computing neither slows nor is slowed; time-sliced, the processes' needs of the GPU's time
// (SM demand over the kernels' SM share) add up instead, the SMs are never more active than one
// process's kernels keep them, and NVML's utilization is that need (else 100 while any computes).
func TestSimulatedContention(t *testing.T) {
	ctx := context.Background()
	s, devs := testutil.NewSim(t, "H200=140GiB")
	uuid := devs[0].UUID
	g, err := s.OpenGPM(ctx, uuid)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	self, other := os.Getpid(), sleeper(t)
	busy := func(pid int, util float64) func() error {
		return func() error {
			return errors.Join(s.SetProcessLoad(uuid, pid, gpu.SimLoad{SMUtil: util, SMOccupancy: util / 2}),
				s.SetProcess(uuid, pid, size.GiB, true))
		}
	}
	steps := []struct {
		name                string
		do                  func() error
		selfRate, otherRate float64
		util                float64
		gpuBusy             int // NVML utilization
	}{
		{"off, one busy", busy(self, 60), 1, 1, 60, 100},
		{"off, past the SMs", busy(other, 90), 1, 1, 100, 100},
		{"on, past the SMs: each its share less one switch", func() error {
			return s.SetContention(uuid, &gpu.SimContention{SwitchCost: 0.1})
		}, 100.0 / 150 * 0.9, 100.0 / 150 * 0.9, 90, 100},
		{"on, within the SMs", busy(other, 40), 1, 1, 100, 100},
		{"on, the other stops computing", func() error {
			return errors.Join(busy(other, 90)(), s.SetProcess(uuid, other, size.GiB, false))
		}, 1, 1, 60, 100},
		{"on, no switching cost", func() error {
			return errors.Join(s.SetContention(uuid, &gpu.SimContention{}), busy(self, 100)(), busy(other, 100)())
		}, 0.5, 0.5, 100, 100},
		// Time-sliced: one process's kernels at a time, each keeping 90% of the SMs active.
		{"time-sliced, past the GPU's time: each its share less one switch", func() error {
			return errors.Join(s.SetContention(uuid, &gpu.SimContention{SwitchCost: 0.1, KernelSM: 0.9}), busy(self, 60)(), busy(other, 90)())
		}, 100 / (150 / 0.9) * 0.9, 100 / (150 / 0.9) * 0.9, 90 * 0.9, 100},
		{"time-sliced, within the GPU's time", func() error {
			return errors.Join(busy(self, 36)(), busy(other, 54)())
		}, 1, 1, 90, 100},
		{"time-sliced, SM demands within the SMs but not within the GPU's time", func() error {
			return errors.Join(busy(self, 40)(), busy(other, 54)())
		}, 100 / (94 / 0.9) * 0.9, 100 / (94 / 0.9) * 0.9, 90 * 0.9, 100},
		{"time-sliced, one computing: the GPU busy half its time", func() error {
			return errors.Join(busy(self, 45)(), s.SetProcess(uuid, other, size.GiB, false))
		}, 1, 1, 45, 50},
		// The setting as another process sharing the state directory writes it.
		{"a setting from another process: the SMs shared", func() error {
			return errors.Join(os.WriteFile(filepath.Join(s.Dir(), uuid, "contention"), []byte("0.1 0\n"), 0o644), busy(other, 54)())
		}, 1, 1, 99, 100},
		{"off again", func() error { return s.SetContention(uuid, nil) }, 1, 1, 99, 100},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		for _, p := range []struct {
			pid  int
			want float64
		}{{self, st.selfRate}, {other, st.otherRate}} {
			r, err := s.WorkRate(ctx, uuid, p.pid)
			if err != nil || math.Abs(r-p.want) > 1e-9 {
				t.Errorf("%s: WorkRate(%d) = %g, %v; want %g", st.name, p.pid, r, err, p.want)
			}
		}
		r, err := g.Read(ctx)
		if err != nil || math.Abs(r.SMUtil-st.util) > 1e-9 {
			t.Errorf("%s: GPM SM util %g%%, %v; want %g%%", st.name, r.SMUtil, err, st.util)
		}
		if u, err := s.Utilization(ctx, uuid); err != nil || u != st.gpuBusy {
			t.Errorf("%s: Utilization %d%%, %v; want %d%%", st.name, u, err, st.gpuBusy)
		}
	}
}

// TestSimContentionErrors: a bad switch cost is refused naming the value, on set and on read.
func TestSimContentionErrors(t *testing.T) {
	ctx := context.Background()
	s, devs := testutil.NewSim(t, "H200=140GiB")
	uuid := devs[0].UUID
	for _, c := range []float64{-0.1, 1, math.NaN()} {
		err := s.SetContention(uuid, &gpu.SimContention{SwitchCost: c})
		if err == nil || !strings.Contains(err.Error(), "switch cost") {
			t.Errorf("SetContention(%g) = %v, want an error naming the switch cost", c, err)
		}
	}
	for _, k := range []float64{-0.5, 1.5, math.NaN()} {
		err := s.SetContention(uuid, &gpu.SimContention{KernelSM: k})
		if err == nil || !strings.Contains(err.Error(), "kernel SM share") || !strings.Contains(err.Error(), fmt.Sprint(k)) {
			t.Errorf("SetContention(kernel SM %g) = %v, want an error naming the share", k, err)
		}
	}
	if err := s.SetContention("GPU-nope", &gpu.SimContention{}); !errors.Is(err, gpu.ErrUnknownDevice) {
		t.Errorf("SetContention on an unknown GPU = %v, want ErrUnknownDevice", err)
	}
	// The setting's file, as another process sharing the state directory could leave it.
	if err := os.WriteFile(filepath.Join(s.Dir(), uuid, "contention"), []byte("lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WorkRate(ctx, uuid, os.Getpid()); err == nil || !strings.Contains(err.Error(), `"lots"`) {
		t.Errorf("WorkRate with an unreadable setting = %v, want an error naming it", err)
	}
}

// TestSimWorkClock: a job's work clock runs at the GPU's rate, read again as the rate changes.
func TestSimWorkClock(t *testing.T) {
	s, devs := testutil.NewSim(t, "H200=140GiB")
	uuid := devs[0].UUID
	self, other := os.Getpid(), sleeper(t)
	for _, p := range []int{self, other} {
		if err := errors.Join(s.SetProcessLoad(uuid, p, gpu.SimLoad{SMUtil: 100}), s.SetProcess(uuid, p, size.GiB, true)); err != nil {
			t.Fatal(err)
		}
	}
	c := s.WorkClock(uuid, self)
	if got := c.Advance(time.Second); got != time.Second {
		t.Fatalf("without contention a second of running is %s of work, want 1s", got)
	}
	if err := s.SetContention(uuid, &gpu.SimContention{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the clock to read the contended rate", func() bool {
		return c.Advance(time.Second) == 500*time.Millisecond
	})
}

func TestSimPowerLimit(t *testing.T) {
	tests := []struct {
		model string
		watts uint32
	}{
		{"NVIDIA H100 80GB HBM3", 700},
		{"NVIDIA H200", 700},
		{"NVIDIA A100-SXM4-40GB", 400},
		{"NVIDIA A10G", 150},
		{"NVIDIA L40S", 300},
		{"NVIDIA L4", 72},
		{"Tesla T4", 70},
		{"h100", 700},
		{"GeForce RTX 4090", gpu.SimDefaultPowerLimit},
	}
	for _, tc := range tests {
		if got := gpu.SimPowerLimit(tc.model); got != tc.watts*1000 {
			t.Errorf("SimPowerLimit(%q) = %d mW, want %d", tc.model, got, tc.watts*1000)
		}
	}
}

// TestSimulatedSensors walks one GPU through its readings: the defaults idle and busy, pinned
// values seen by another process's handle, a fault in one sensor that leaves the other alone,
// and the way back.
func TestSimulatedSensors(t *testing.T) {
	ctx := context.Background()
	s, devs := testutil.NewSim(t, "H100=80GiB", "T4=16GiB")
	uuid, other := devs[0].UUID, devs[1].UUID
	// A second handle on the directory, as the plugin and a test in another process have.
	peer := testutil.AttachSim(t, s.Dir())
	pid := os.Getpid()
	steps := []struct {
		name      string
		do        func() error
		wantTemp  int
		wantPower gpu.Power
		tempErr   string // a fragment of Temperature's error; "" for none
		powerErr  string
	}{
		{"idle", func() error { return nil }, gpu.SimIdleTemperature, gpu.Power{UsageMilliwatts: 84000, LimitMilliwatts: 700000}, "", ""},
		{"busy", func() error { return s.SetProcess(uuid, pid, size.GiB, true) }, gpu.SimBusyTemperature, gpu.Power{UsageMilliwatts: 546000, LimitMilliwatts: 700000}, "", ""},
		{"pinned", func() error {
			return s.SetSensors(uuid, &gpu.SimSensors{TemperatureC: 81, Power: gpu.Power{UsageMilliwatts: 612345, LimitMilliwatts: 650000}})
		}, 81, gpu.Power{UsageMilliwatts: 612345, LimitMilliwatts: 650000}, "", ""},
		{"temperature fault", func() error {
			return s.SetSensorFault(uuid, gpu.SensorTemperature, "NVML_ERROR_UNKNOWN")
		}, 0, gpu.Power{UsageMilliwatts: 612345, LimitMilliwatts: 650000}, "temperature: NVML_ERROR_UNKNOWN", ""},
		{"power fault too", func() error {
			return s.SetSensorFault(uuid, gpu.SensorPower, "GPU is lost")
		}, 0, gpu.Power{}, "NVML_ERROR_UNKNOWN", "power: GPU is lost"},
		{"faults cleared", func() error {
			return errors.Join(s.SetSensorFault(uuid, gpu.SensorTemperature, ""), s.SetSensorFault(uuid, gpu.SensorPower, ""))
		}, 81, gpu.Power{UsageMilliwatts: 612345, LimitMilliwatts: 650000}, "", ""},
		{"unpinned", func() error { return s.SetSensors(uuid, nil) }, gpu.SimBusyTemperature, gpu.Power{UsageMilliwatts: 546000, LimitMilliwatts: 700000}, "", ""},
		{"idle again", func() error { return s.ClearProcess(uuid, pid) }, gpu.SimIdleTemperature, gpu.Power{UsageMilliwatts: 84000, LimitMilliwatts: 700000}, "", ""},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		temp, err := peer.Temperature(ctx, uuid)
		if !matches(err, st.tempErr) || (st.tempErr == "" && temp != st.wantTemp) {
			t.Errorf("%s: Temperature = %d, %v; want %d, error %q", st.name, temp, err, st.wantTemp, st.tempErr)
		}
		p, err := peer.Power(ctx, uuid)
		if !matches(err, st.powerErr) || (st.powerErr == "" && p != st.wantPower) {
			t.Errorf("%s: Power = %+v, %v; want %+v, error %q", st.name, p, err, st.wantPower, st.powerErr)
		}
		// Nothing done to one GPU shows on the other.
		if temp, err := peer.Temperature(ctx, other); err != nil || temp != gpu.SimIdleTemperature {
			t.Errorf("%s: the other GPU's temperature %d, %v", st.name, temp, err)
		}
		if p, err := peer.Power(ctx, other); err != nil || p != (gpu.Power{UsageMilliwatts: 8400, LimitMilliwatts: 70000}) {
			t.Errorf("%s: the other GPU's power %+v, %v", st.name, p, err)
		}
	}
}

func TestSimulatedSensorsRefuse(t *testing.T) {
	s, uuid := h100(t)
	tests := []struct {
		name, want string
		call       func() error
	}{
		{"unknown sensor", `no sensor "fan"`, func() error { return s.SetSensorFault(uuid, "fan", "x") }},
		{"absurd temperature", "-300 C", func() error { return s.SetSensors(uuid, &gpu.SimSensors{TemperatureC: -300}) }},
		{"corrupt readings", "malformed readings", func() error {
			if err := gpu.WriteFileAtomic(s.Dir()+"/"+uuid+"/"+gpu.SimSensorsFile, []byte("hot 1 2\n")); err != nil {
				return err
			}
			_, err := s.Temperature(context.Background(), uuid)
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !matches(err, tc.want) || err == nil {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// matches says whether err is nil when fragment is empty, or else mentions fragment.
func matches(err error, fragment string) bool {
	if fragment == "" {
		return err == nil
	}
	return err != nil && strings.Contains(err.Error(), fragment)
}
