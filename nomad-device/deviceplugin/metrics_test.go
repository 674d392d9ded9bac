package deviceplugin

import (
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/size"
)

// metrics_addr = ":port" listens on every interface, as Prometheus exporters do, so a
// Prometheus on another host can scrape it.
func TestMetricsServedOnEveryInterface(t *testing.T) {
	port := testutil.FreePort(t)
	s, _ := newSim(t, "H100=80GiB", `metrics_addr = ":`+port+`"`)
	if got := s.config().MetricsAddr; got != ":"+port {
		t.Fatalf("metrics_addr %q resolved to %q, want every interface", ":"+port, got)
	}
	m, _ := firstFingerprint(t, s)
	mustReserve(t, s, ids(m.DeviceGroup[0], 3))
	hosts := []string{"127.0.0.1"}
	if ip := nonLoopbackIP(); ip != "" {
		hosts = append(hosts, ip)
	}
	var body string
	for _, h := range hosts {
		body = scrape(t, "http://"+net.JoinHostPort(h, port)+"/metrics")
	}
	for _, want := range []string{
		`gpufrac_gpu_budget_bytes{gpu="` + m.DeviceGroup[0].Attributes[AttrUUID].GetStringVal() + `",index="0",model="H100"} 8.3751862272e+10`,
		`gpufrac_gpu_reserved_bytes{`,
		`gpufrac_gpu_healthy{`,
		`gpufrac_gpu_temperature_celsius{gpu="` + m.DeviceGroup[0].Attributes[AttrUUID].GetStringVal() + `",index="0",model="H100"} ` + strconv.Itoa(gpu.SimIdleTemperature),
		`gpufrac_gpu_power_watts{`,
		`gpufrac_task_cap_bytes{`,
		`gpufrac_violation_containment_seconds_count 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
}

// nonLoopbackIP is an address of this host other than loopback, or "" when it has none.
func nonLoopbackIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// scrape GETs url until the server answers (it starts in the background), and fails the test
// unless the answer is 200.
func scrape(t *testing.T, url string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
			}
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gatherer reads the plugin's metrics as a scrape would: each gauge and counter summed over its
// labels under its name, and a histogram as name_count and name_sum.
func gatherer(t *testing.T, s *Server) func() map[string]float64 {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{rt: s.runtime()})
	return func() map[string]float64 {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range fams {
			for _, mt := range f.GetMetric() {
				switch {
				case mt.GetGauge() != nil:
					got[f.GetName()] += mt.GetGauge().GetValue()
				case mt.GetCounter() != nil:
					got[f.GetName()] += mt.GetCounter().GetValue()
				case mt.GetHistogram() != nil:
					got[f.GetName()+"_count"] += float64(mt.GetHistogram().GetSampleCount())
					got[f.GetName()+"_sum"] += mt.GetHistogram().GetSampleSum()
				}
			}
		}
		return got
	}
}

func TestMetricsFigures(t *testing.T) {
	s, dir := newSim(t, "H100=80GiB", "")
	m, _ := firstFingerprint(t, s)
	mustReserve(t, s, ids(m.DeviceGroup[0], 3))
	sim, err := gpu.NewSimulated(gpu.SimConfig{Dir: filepath.Join(dir, "simgpu")})
	if err != nil {
		t.Fatal(err)
	}
	uuid := m.DeviceGroup[0].Attributes[AttrUUID].GetStringVal()
	if err := sim.SetSensors(uuid, &gpu.SimSensors{TemperatureC: 71, Power: gpu.Power{UsageMilliwatts: 301500, LimitMilliwatts: 650000}}); err != nil {
		t.Fatal(err)
	}
	gather := gatherer(t, s)
	steps := []struct {
		name   string
		do     func() error
		want   map[string]float64
		absent []string
	}{
		{"pinned readings", func() error { return nil }, map[string]float64{
			"gpufrac_gpu_budget_bytes":        float64(78 * size.GiB),
			"gpufrac_gpu_reserved_bytes":      float64(3 * size.GiB),
			"gpufrac_gpu_used_bytes":          float64(gpu.SimDriverReserve),
			"gpufrac_task_cap_bytes":          float64(3 * size.GiB),
			"gpufrac_gpu_tasks":               1,
			"gpufrac_gpu_healthy":             1,
			"gpufrac_task_used_bytes":         0,
			"gpufrac_gpu_temperature_celsius": 71,
			"gpufrac_gpu_power_watts":         301.5,
			"gpufrac_gpu_power_limit_watts":   650,
		}, nil},
		// A reading the backend cannot give is left out rather than reported as 0.
		{"power fails", func() error { return sim.SetSensorFault(uuid, gpu.SensorPower, "Not Supported") }, map[string]float64{
			"gpufrac_gpu_temperature_celsius": 71,
			"gpufrac_gpu_used_bytes":          float64(gpu.SimDriverReserve),
		}, []string{"gpufrac_gpu_power_watts", "gpufrac_gpu_power_limit_watts"}},
		{"temperature fails too", func() error { return sim.SetSensorFault(uuid, gpu.SensorTemperature, "GPU is lost") }, map[string]float64{
			"gpufrac_gpu_used_bytes": float64(gpu.SimDriverReserve),
		}, []string{"gpufrac_gpu_temperature_celsius", "gpufrac_gpu_power_watts"}},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got := gather()
		for k, v := range st.want {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%s: %s = %v (present %v), want %v", st.name, k, g, ok, v)
			}
		}
		for _, k := range st.absent {
			if v, ok := got[k]; ok {
				t.Errorf("%s: %s = %v, want it left out", st.name, k, v)
			}
		}
	}
}

// The metrics follow what the watchdog sees: a task's memory under its cap and a stranger's
// unmanaged memory as they are used, then the task's violation once it breaks its cap and is
// stopped, with its time to containment.
func TestMetricsFollowTasksAndViolations(t *testing.T) {
	s, dir := newSim(t, "H100=80GiB", "")
	m, _ := firstFingerprint(t, s)
	res := mustReserve(t, s, ids(m.DeviceGroup[0], 3))
	uuid := uuidOf(m.DeviceGroup[0])
	sim := simOf(t, dir)
	task := testutil.StartTask(t, res.GetEnvs())
	stranger := testutil.StartTask(t, nil)
	if err := sim.SetUsage(uuid, task.PID(), size.GiB); err != nil {
		t.Fatal(err)
	}
	if err := sim.SetUsage(uuid, stranger.PID(), 2*size.GiB); err != nil {
		t.Fatal(err)
	}
	gather := gatherer(t, s)
	var got map[string]float64
	testutil.Eventually(t, 20*time.Second, "the task's 1GiB and the stranger's 2GiB in the metrics", func() bool {
		got = gather()
		return got["gpufrac_task_used_bytes"] == float64(size.GiB) && got["gpufrac_gpu_unmanaged_bytes"] == float64(2*size.GiB)
	})
	if got["gpufrac_violations_total"] != 0 || got["gpufrac_violation_containment_seconds_count"] != 0 {
		t.Fatalf("violations %v before any: %v", got["gpufrac_violations_total"], got)
	}

	// Past its 3GiB cap: the watchdog stops it and records the violation.
	if err := sim.SetUsage(uuid, task.PID(), 5*size.GiB); err != nil {
		t.Fatal(err)
	}
	select {
	case <-task.Exited():
	case <-time.After(20 * time.Second):
		t.Fatal("the task over its cap was not stopped within 20s")
	}
	testutil.Eventually(t, 20*time.Second, "the violation and its containment time in the metrics", func() bool {
		got = gather()
		return got["gpufrac_violations_total"] == 1 && got["gpufrac_violation_containment_seconds_count"] == 1
	})
	_, l, _ := s.runtime().parts()
	vs := l.Violations()
	if len(vs) != 1 {
		t.Fatalf("violations %+v, want the task's", vs)
	}
	if want := vs[0].ContainedAt.Sub(vs[0].CrossedAt).Seconds(); want <= 0 || got["gpufrac_violation_containment_seconds_sum"] != want {
		t.Errorf("containment sum %v, want the violation's %vs from crossing to contained", got["gpufrac_violation_containment_seconds_sum"], want)
	}
}
