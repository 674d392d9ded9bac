package gpu_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/size"
)

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
	s, devs := testutil.NewSim(t, "H100=80GiB")
	uuid := devs[0].UUID
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
