package deviceplugin

import (
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/size"
)

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
