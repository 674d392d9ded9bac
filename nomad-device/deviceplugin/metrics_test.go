package deviceplugin

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"google.golang.org/protobuf/proto"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
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

// Two tasks reserved on one GPU whose processes have not started yet (an image pull, a job
// with count = 2) know no allocation, job or task: the scrape still answers 200, with one
// series per reservation.
func TestScrapeDuringTwoUnstartedTasks(t *testing.T) {
	port := testutil.FreePort(t)
	s, _ := newSim(t, "H100=80GiB", `metrics_addr = "127.0.0.1:`+port+`"`)
	m, _ := firstFingerprint(t, s)
	free := ids(m.DeviceGroup[0], 5)
	firsts := []string{free[0], free[2]}
	for _, held := range [][]string{free[:2], free[2:]} {
		mustReserve(t, s, held)
	}
	body := scrape(t, "http://127.0.0.1:"+port+"/metrics")
	series := regexp.MustCompile(`(?m)^gpufrac_task_cap_bytes\{(.*)\} (\S+)$`).FindAllStringSubmatch(body, -1)
	if len(series) != 2 {
		t.Fatalf("%d gpufrac_task_cap_bytes series, want one per reservation:\n%s", len(series), body)
	}
	for i, want := range firsts {
		if !strings.Contains(series[0][1]+series[1][1], `reservation="`+want+`"`) {
			t.Errorf("reservation %d (first unit %s) has no series of its own: %q", i, want, series)
		}
	}
	if series[0][1] == series[1][1] {
		t.Errorf("the two reservations share the labels %s", series[0][1])
	}
}

// A task's Nomad names are read from its processes' environment, which the task may fill with
// any bytes: a name that is not UTF-8 reaches the labels with U+FFFD for each bad byte (as the
// ledger file stores it), the scrape answers 200 instead of crashing the plugin, and the stats
// Nomad reads still encode.
func TestScrapeWithTaskNamesThatAreNotUTF8(t *testing.T) {
	port := testutil.FreePort(t)
	s, _ := newSim(t, "H100=80GiB", `metrics_addr = "127.0.0.1:`+port+`"`)
	m, _ := firstFingerprint(t, s)
	res := mustReserve(t, s, ids(m.DeviceGroup[0], 2))
	testutil.StartTask(t, res.GetEnvs(), "NOMAD_JOB_NAME=tr\xffain", "NOMAD_TASK_NAME=ma\xc3in", "NOMAD_ALLOC_ID=\xfe\xfe")
	_, l, _ := s.runtime().parts()
	testutil.Eventually(t, 20*time.Second, "the watchdog to learn the task's names", func() bool {
		rs := l.Reservations()
		return len(rs) == 1 && rs[0].Task.JobName != ""
	})
	body := scrape(t, "http://127.0.0.1:"+port+"/metrics")
	if want := "alloc_id=\"\uFFFD\uFFFD\",gpu=\"" + uuidOf(m.DeviceGroup[0]) + "\",job=\"tr\uFFFDain\",reservation=\"" +
		ids(m.DeviceGroup[0], 1)[0] + "\",task=\"ma\uFFFDin\""; !strings.Contains(body, "gpufrac_task_cap_bytes{"+want+"}") {
		t.Errorf("no cap series labelled %s:\n%s", want, body)
	}
	if _, err := proto.Marshal(s.runtime().stats(context.Background())); err != nil {
		t.Errorf("the stats message cannot be sent to Nomad: %v", err)
	}
}

// series reads every sample of one metric family, keyed by its label values joined with ","
// in the order of the label names (action before gpu; gpu, index, model).
func series(t *testing.T, s *Server, name string) map[string]float64 {
	t.Helper()
	fams, err := s.runtime().newRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, mt := range f.GetMetric() {
			var lv []string
			for _, l := range mt.GetLabel() {
				lv = append(lv, l.GetValue())
			}
			switch {
			case mt.GetCounter() != nil:
				out[strings.Join(lv, ",")] = mt.GetCounter().GetValue()
			case mt.GetGauge() != nil:
				out[strings.Join(lv, ",")] = mt.GetGauge().GetValue()
			case mt.GetHistogram() != nil:
				out["count"] = float64(mt.GetHistogram().GetSampleCount())
				out["buckets"] = float64(len(mt.GetHistogram().GetBucket()))
			}
		}
	}
	return out
}

// The violation counter is present at 0 for every GPU and action before the first violation,
// the containment histogram has its buckets from the start, and neither ever goes down, also
// after the ledger, which keeps only its newest 1,000 violations, drops the oldest.
func TestViolationCounterNeverDecreases(t *testing.T) {
	s, _ := newSim(t, "H100=80GiB", "")
	m, _ := firstFingerprint(t, s)
	uuid := uuidOf(m.DeviceGroup[0])
	before := series(t, s, "gpufrac_violations_total")
	for _, a := range violationActions {
		if v, ok := before[a+","+uuid]; !ok || v != 0 {
			t.Errorf("gpufrac_violations_total{gpu=%q,action=%q} = %v (present %v) before any violation, want 0", uuid, a, v, ok)
		}
	}
	if h := series(t, s, "gpufrac_violation_containment_seconds"); h["buckets"] != float64(len(containBuckets)) || h["count"] != 0 {
		t.Errorf("containment histogram before any violation: %v, want its %d buckets and no sample", h, len(containBuckets))
	}

	// The 1,500 go to a ledger in memory (a file write each would take minutes under -race),
	// read by the same collector through a runtime holding it.
	l, err := ledger.Open("", ledger.Options{NoPersist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s = &Server{rt: &runtime{led: l, ctx: context.Background(), viol: newViolationMetrics()}}
	const n = 1500
	start := time.Now().UTC()
	last := map[string]float64{}
	check := func(i int) {
		now := series(t, s, "gpufrac_violations_total")
		for k, v := range last {
			if now[k] < v {
				t.Fatalf("after %d violations: %s went down from %v to %v", i, k, v, now[k])
			}
		}
		last = now
	}
	for i := range n {
		// The first 1,000 were stopped with SIGINT, the next 500 failed in their process: the
		// ledger ends up holding 500 of the first kind and all of the second.
		action := enforcer.ActionSIGINT
		if i >= 1000 {
			action = enforcer.ActionOOMInProcess
		}
		crossed := start.Add(time.Duration(i) * time.Second)
		if err := l.RecordViolation(ledger.Violation{Token: "tok", GPU: uuid, Action: action, CapBytes: size.GiB,
			PeakBytes: 2 * size.GiB, CrossedAt: crossed, ContainedAt: crossed.Add(300 * time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
		if i%37 == 0 {
			check(i)
		}
	}
	check(n)
	if got := len(l.Violations()); got != ledger.MaxViolations {
		t.Fatalf("the ledger keeps %d violations, want %d: the test no longer makes it drop any", got, ledger.MaxViolations)
	}
	if last[enforcer.ActionSIGINT+","+uuid] != 1000 || last[enforcer.ActionOOMInProcess+","+uuid] != 500 {
		t.Errorf("counters %v, want 1000 sigint and 500 oom-in-process", last)
	}
	if h := series(t, s, "gpufrac_violation_containment_seconds"); h["count"] != n {
		t.Errorf("containment histogram counts %v violations, want %d", h["count"], n)
	}
}

// The plugin's metrics pass Prometheus' own lint rules, with every family present: a task
// that borrows, a violation.
func TestMetricsPassPromlint(t *testing.T) {
	s, dir := newSim(t, "H100=80GiB", `borrow = "now"`)
	m, _ := firstFingerprint(t, s)
	g := m.DeviceGroup[0]
	res := mustReserve(t, s, ids(g, 4))
	r := reservation(t, s, res)
	c, err := fence.Attach(filepath.Join(dir, "fence"), uuidOf(g), r.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Detach()
	if got := c.Charge(6 * size.GiB); got != fence.Charged {
		t.Fatalf("borrowing 2GiB past a 4GiB guarantee: %v", got)
	}
	_, l, _ := s.runtime().parts()
	now := time.Now()
	if err := l.RecordViolation(ledger.Violation{Token: "t", GPU: uuidOf(g), Action: enforcer.ActionSIGKILL,
		CrossedAt: now.Add(-time.Second), ContainedAt: now}); err != nil {
		t.Fatal(err)
	}
	// The fence's table is read by the watchdog: wait until the borrowing shows.
	testutil.Eventually(t, 20*time.Second, "the 2GiB borrowed in gpufrac_gpu_borrowed_bytes", func() bool {
		return series(t, s, "gpufrac_gpu_borrowed_bytes")[uuidOf(g)+",0,H100"] == float64(2*size.GiB)
	})
	fams, err := s.runtime().newRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range fams {
		names = append(names, f.GetName())
	}
	for _, want := range []string{"gpufrac_task_borrowed_bytes", "gpufrac_violations_total", "gpufrac_gpu_free_units"} {
		if !slices.Contains(names, want) {
			t.Fatalf("no %s among %v: the lint would not see it", want, names)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(fams).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// Free memory, free units and borrowed memory per GPU: what a dashboard stacks beside the
// reserved and unmanaged memory.
func TestFreeAndBorrowedMetrics(t *testing.T) {
	s, dir := newSim(t, "H100=80GiB", `borrow = "now"`)
	m, _ := firstFingerprint(t, s)
	g := m.DeviceGroup[0]
	key := uuidOf(g) + ",0,H100"
	res := mustReserve(t, s, ids(g, 4))
	steps := []struct {
		name                 string
		borrow               size.Bytes
		freeBytes, freeUnits float64
	}{
		{"a 4-unit guarantee of the 78-unit budget", 0, float64(74 * size.GiB), 74},
		// 6 GiB used on a 4 GiB guarantee: 2 GiB borrowed, and two free units withheld.
		{"2GiB borrowed past it", 6 * size.GiB, float64(72 * size.GiB), 72},
	}
	r := reservation(t, s, res)
	c, err := fence.Attach(filepath.Join(dir, "fence"), uuidOf(g), r.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Detach()
	for _, st := range steps {
		if st.borrow > 0 && c.Charge(st.borrow) != fence.Charged {
			t.Fatalf("%s: the fence refused the charge", st.name)
		}
		testutil.Eventually(t, 20*time.Second, st.name, func() bool {
			return series(t, s, "gpufrac_gpu_free_bytes")[key] == st.freeBytes &&
				series(t, s, "gpufrac_gpu_free_units")[key] == st.freeUnits &&
				series(t, s, "gpufrac_gpu_borrowed_bytes")[key] == float64(sub(st.borrow, 4*size.GiB))
		})
	}
}

// A task that may borrow reports, beside its use, what it holds past its cap.
func TestTaskBorrowedMetric(t *testing.T) {
	s, dir := newSim(t, "H100=80GiB", `borrow = "now"`)
	m, _ := firstFingerprint(t, s)
	g := m.DeviceGroup[0]
	res := mustReserve(t, s, ids(g, 4))
	task := testutil.StartTask(t, res.GetEnvs())
	if err := simOf(t, dir).SetUsage(uuidOf(g), task.PID(), 6*size.GiB); err != nil {
		t.Fatal(err)
	}
	first := ids(g, 1)[0]
	testutil.Eventually(t, 20*time.Second, "the task's 6GiB used and 2GiB borrowed past its 4GiB cap", func() bool {
		for k, v := range series(t, s, "gpufrac_task_borrowed_bytes") {
			if strings.Contains(k, first) && v == float64(2*size.GiB) {
				return series(t, s, "gpufrac_task_used_bytes")[k] == float64(6*size.GiB)
			}
		}
		return false
	})
}

// While another gpufrac holds the ledger's lock the plugin admits nothing, and its metrics say
// so: each GPU the fingerprint shows is still reported, gpufrac_gpu_healthy 0 beside its memory
// and the backend's readings, so that an alert on the health fires instead of finding the
// series gone; the violation counters stay at 0 for it. Once the lock is free and the ledger
// opens, the GPU is healthy again.
func TestMetricsWhileTheLedgerIsLocked(t *testing.T) {
	port := testutil.FreePort(t)
	s, dir := newSim(t, "H100=80GiB", `metrics_addr = "127.0.0.1:`+port+`"
		fingerprint_period = "1s"`)
	holder, err := ledger.Open(dir, ledger.Options{}) // gpufrac run on the node's state directory
	if err != nil {
		t.Fatal(err)
	}
	m, _ := firstFingerprint(t, s)
	uuid := uuidOf(m.DeviceGroup[0])
	if msg := s.runtime().unavailable(); !strings.Contains(msg, "ledger") {
		holder.Close()
		t.Fatalf("the plugin is not held back by the locked ledger: %q", msg)
	}
	labels := `{gpu="` + uuid + `",index="0",model="H100"}`
	body := scrape(t, "http://127.0.0.1:"+port+"/metrics")
	for _, want := range []string{
		"gpufrac_gpu_healthy" + labels + " 0",
		"gpufrac_gpu_memory_bytes" + labels + " 8.589934592e+10",
		"gpufrac_gpu_temperature_celsius" + labels + " ",
		`gpufrac_violations_total{action="sigint",gpu="` + uuid + `"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics while the ledger is locked lack %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "gpufrac_gpu_reserved_bytes") {
		t.Errorf("a ledger figure is reported while no ledger answers:\n%s", body)
	}
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the GPU healthy once the ledger opens", func() bool {
		return strings.Contains(scrape(t, "http://127.0.0.1:"+port+"/metrics"), "gpufrac_gpu_healthy"+labels+" 1")
	})
}

// A GPU that falls off the bus while no task holds a unit of it leaves the ledger, but the
// fingerprint keeps it, unhealthy, with a stand-in that says it is no longer detected: its
// health series must read 0 until it is back, not vanish, or an alert on
// gpufrac_gpu_healthy == 0 stays silent for the one fault that takes a GPU away.
func TestMetricsKeepAGPUThatVanished(t *testing.T) {
	port := testutil.FreePort(t)
	s, dir := newSim(t, "H100=80GiB,A100=40GiB", `metrics_addr = "127.0.0.1:`+port+`"
		fingerprint_period = "1s"`)
	m, ch := firstFingerprint(t, s)
	a100 := uuidOf(m.DeviceGroup[1])
	labels := `{gpu="` + a100 + `",index="1",model="A100"}`
	url := "http://127.0.0.1:" + port + "/metrics"
	if body := scrape(t, url); !strings.Contains(body, "gpufrac_gpu_healthy"+labels+" 1") {
		t.Fatalf("the A100 is not healthy before the fault:\n%s", body)
	}
	sim := simOf(t, dir)
	if err := sim.SetRemoved(a100, true, "XID 79: GPU has fallen off the bus"); err != nil {
		t.Fatal(err)
	}
	waitFP(t, ch, "the A100 is a stand-in saying it is no longer detected", func(m *devicepb.FingerprintResponse) bool {
		g := group(m, a100)
		return g != nil && len(g.Devices) == 1 && g.Devices[0].HealthDescription == descVanished
	})
	body := scrape(t, url)
	for _, want := range []string{
		"gpufrac_gpu_healthy" + labels + " 0",
		"gpufrac_gpu_memory_bytes" + labels + " 4.294967296e+10",
		`gpufrac_violations_total{action="sigkill",gpu="` + a100 + `"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics of the vanished GPU lack %q:\n%s", want, body)
		}
	}
	if err := sim.SetRemoved(a100, false, ""); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the A100 healthy again once it is back", func() bool {
		return strings.Contains(scrape(t, url), "gpufrac_gpu_healthy"+labels+" 1")
	})
}
