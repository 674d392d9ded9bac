package deviceplugin

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	structspb "github.com/gpufrac/gpufrac/nomad-device/proto/structs"
	"github.com/gpufrac/gpufrac/size"
)

// statsUntil streams stats and returns the first GPU line of unit id that satisfies ok.
func statsUntil(t *testing.T, s *Server, id, what string, ok func(line map[string]*structspb.StatValue) bool) map[string]*structspb.StatValue {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan *devicepb.StatsResponse, 1)
	go s.Stats(ctx, 10*time.Millisecond, func(r *devicepb.StatsResponse) error {
		select {
		case got <- r:
		case <-ctx.Done():
		}
		return nil
	})
	deadline := time.After(15 * time.Second)
	for {
		select {
		case r := <-got:
			if line := r.Groups[0].InstanceStats[id].GetStats().GetAttributes(); ok(line) {
				return line
			}
		case <-deadline:
			t.Fatalf("no stats within 15s where %s", what)
			return nil
		}
	}
}

func intStat(v *structspb.StatValue) (num, den int64, ok bool) {
	if v.GetIntNumeratorVal() == nil {
		return 0, 0, false
	}
	return v.GetIntNumeratorVal().GetValue(), v.GetIntDenominatorVal().GetValue(), true
}

// TestStatsGPULineReadsTemperatureAndPower: the GPU line carries the backend's temperature and
// power under nomad-device-nvidia's names and units, and a reading the backend cannot give
// says N/A with the reason while every other reading is still sent.
func TestStatsGPULineReadsTemperatureAndPower(t *testing.T) {
	s, dir := newSim(t, "H100=80GiB", "")
	m, _ := firstFingerprint(t, s)
	g := m.DeviceGroup[0]
	uuid, unit := g.Attributes[AttrUUID].GetStringVal(), g.Devices[0].ID
	sim, err := gpu.NewSimulated(gpu.SimConfig{Dir: filepath.Join(dir, "simgpu")})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name       string
		do         func() error
		temp       int64 // C; -1: N/A
		power, lim int64 // W; power -1: N/A
		naReason   string
	}{
		{"idle defaults", func() error { return nil }, gpu.SimIdleTemperature, 84, 700, ""},
		{"pinned", func() error {
			return sim.SetSensors(uuid, &gpu.SimSensors{TemperatureC: 71, Power: gpu.Power{UsageMilliwatts: 301499, LimitMilliwatts: 650000}})
		}, 71, 301, 650, ""},
		{"temperature fails", func() error { return sim.SetSensorFault(uuid, gpu.SensorTemperature, "NVML_ERROR_GPU_IS_LOST") }, -1, 301, 650, "NVML_ERROR_GPU_IS_LOST"},
		{"power fails instead", func() error {
			return errors.Join(sim.SetSensorFault(uuid, gpu.SensorTemperature, ""), sim.SetSensorFault(uuid, gpu.SensorPower, "Not Supported"))
		}, 71, -1, 0, "Not Supported"},
		{"limit unknown", func() error {
			return errors.Join(sim.SetSensorFault(uuid, gpu.SensorPower, ""),
				sim.SetSensors(uuid, &gpu.SimSensors{TemperatureC: 40, Power: gpu.Power{UsageMilliwatts: 90000}}))
		}, 40, 90, 0, ""},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		matches := func(v *structspb.StatValue, num, den int64) bool {
			if num < 0 {
				return strings.HasPrefix(v.GetStringVal().GetValue(), "N/A: ") && strings.Contains(v.GetStringVal().GetValue(), st.naReason) &&
					strings.Contains(v.GetDesc(), st.naReason)
			}
			n, d, ok := intStat(v)
			return ok && n == num && d == den
		}
		line := statsUntil(t, s, unit, st.name, func(line map[string]*structspb.StatValue) bool {
			return matches(line[StatTemp], st.temp, 0) && matches(line[StatPower], st.power, st.lim)
		})
		if u := line[StatTemp].GetUnit(); u != "C" {
			t.Errorf("%s: temperature unit %q, want C", st.name, u)
		}
		if u := line[StatPower].GetUnit(); u != "W" {
			t.Errorf("%s: power unit %q, want W", st.name, u)
		}
		// A failed reading costs only itself.
		if n, d, ok := intStat(line[StatGPU]); !ok || n != int64(gpu.SimDriverReserve/size.MiB) || d != 80*1024 {
			t.Errorf("%s: GPU memory %v, want %d / %d MiB", st.name, line[StatGPU], gpu.SimDriverReserve/size.MiB, 80*1024)
		}
		if _, _, ok := intStat(line[StatUtil]); !ok {
			t.Errorf("%s: utilization %v, want a figure", st.name, line[StatUtil])
		}
	}
}

func TestGPULineWithoutBackend(t *testing.T) {
	rt := &runtime{log: hclog.NewNullLogger()}
	line := rt.gpuLine(context.Background(), nil, &ledger.GPUState{GPUInfo: ledger.GPUInfo{UUID: "GPU-x", TotalBytes: 16 * size.GiB}})
	for _, k := range []string{StatGPU, StatUtil, StatTemp, StatPower} {
		if v := line[k].GetStringVal().GetValue(); v != "N/A: "+errNoBackend.Error() {
			t.Errorf("%s = %q without a backend, want N/A with the reason", k, v)
		}
	}
}

// TestReadingFaultsAreLoggedOnce: a reading that keeps failing is logged when it starts failing
// and when its reason changes, and once more when it reads again; not every stats round.
func TestReadingFaultsAreLoggedOnce(t *testing.T) {
	var buf strings.Builder
	rt := &runtime{log: hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info})}
	lost, gone := errors.New("GPU is lost"), errors.New("unknown error")
	rounds := []struct {
		err            error
		warns, recover int // totals so far
	}{
		{nil, 0, 0},
		{lost, 1, 0},
		{lost, 1, 0},
		{gone, 2, 0},
		{nil, 2, 1},
		{nil, 2, 1},
	}
	for i, r := range rounds {
		rt.noteReading("GPU-x", StatTemp, r.err)
		rt.noteReading("GPU-y", StatTemp, nil) // another GPU's good reading changes nothing
		out := buf.String()
		if w := strings.Count(out, "a GPU reading is unavailable"); w != r.warns {
			t.Fatalf("round %d: %d warnings, want %d:\n%s", i, w, r.warns, out)
		}
		if n := strings.Count(out, "a GPU reading is available again"); n != r.recover {
			t.Fatalf("round %d: %d recoveries logged, want %d:\n%s", i, n, r.recover, out)
		}
	}
}

// Stats streams at the interval Nomad asks for, 1s where it asks for none, and never faster
// than minStatsInterval, which a nanosecond interval would otherwise make it.
func TestStatsInterval(t *testing.T) {
	for _, tc := range []struct{ asked, want time.Duration }{
		{0, time.Second},
		{-time.Second, time.Second},
		{time.Nanosecond, minStatsInterval},
		{minStatsInterval - 1, minStatsInterval},
		{minStatsInterval, minStatsInterval},
		{5 * time.Second, 5 * time.Second},
	} {
		if got := statsInterval(tc.asked); got != tc.want {
			t.Errorf("statsInterval(%s) = %s, want %s", tc.asked, got, tc.want)
		}
	}
}
