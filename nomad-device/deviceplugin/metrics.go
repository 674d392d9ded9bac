package deviceplugin

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpufrac/gpufrac/gpu"
)

// Metric descriptions. Everything is read from the ledger and the enforcer at scrape time, so a
// restarted plugin reports the same figures (violations included) without a warm-up.
var (
	gpuLabels  = []string{"gpu", "model", "index"}
	taskLabels = []string{"gpu", "alloc_id", "job", "task"}

	descBudget    = prometheus.NewDesc("gpufrac_gpu_budget_bytes", "Memory the policy lets tasks reserve on the GPU (total - headroom - unmanaged).", gpuLabels, nil)
	descReserved  = prometheus.NewDesc("gpufrac_gpu_reserved_bytes", "Sum of the caps of the GPU's reservations.", gpuLabels, nil)
	descUsed      = prometheus.NewDesc("gpufrac_gpu_used_bytes", "Memory in use on the whole GPU, every process and the driver.", gpuLabels, nil)
	descUnmanaged = prometheus.NewDesc("gpufrac_gpu_unmanaged_bytes", "Memory held by processes without a reservation.", gpuLabels, nil)
	descHealthy   = prometheus.NewDesc("gpufrac_gpu_healthy", "1 when the GPU admits tasks, 0 when it does not (see its health description).", gpuLabels, nil)
	descTemp      = prometheus.NewDesc("gpufrac_gpu_temperature_celsius", "Temperature of the GPU die; absent while the backend cannot read it.", gpuLabels, nil)
	descPower     = prometheus.NewDesc("gpufrac_gpu_power_watts", "Power drawn by the GPU and its memory; absent while the backend cannot read it.", gpuLabels, nil)
	descPowerCap  = prometheus.NewDesc("gpufrac_gpu_power_limit_watts", "The GPU's enforced power limit; absent where the driver does not give it.", gpuLabels, nil)
	descTasks     = prometheus.NewDesc("gpufrac_gpu_tasks", "Reservations held on the GPU.", gpuLabels, nil)
	descTaskUsed  = prometheus.NewDesc("gpufrac_task_used_bytes", "GPU memory the task's processes hold.", taskLabels, nil)
	descTaskCap   = prometheus.NewDesc("gpufrac_task_cap_bytes", "The task's hard cap.", taskLabels, nil)
	descViolation = prometheus.NewDesc("gpufrac_violations_total", "Violations recorded in the ledger.", []string{"gpu", "action"}, nil)
	descContain   = prometheus.NewDesc("gpufrac_violation_containment_seconds", "Time from a task passing its cap to none of its processes holding GPU memory.", nil, nil)

	containBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30}
)

type collector struct{ rt *runtime }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBudget, descReserved, descUsed, descUnmanaged, descHealthy, descTasks,
		descTemp, descPower, descPowerCap, descTaskUsed, descTaskCap, descViolation, descContain} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	b, l, enf := c.rt.parts()
	if l == nil {
		return
	}
	down := c.rt.unavailable()
	perGPU := c.rt.gpuDown()
	for _, g := range l.States() {
		lv := []string{g.UUID, g.Model, itoa(g.Index)}
		gauge := func(d *prometheus.Desc, v float64, labels []string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
		}
		gauge(descBudget, float64(g.BudgetBytes), lv)
		gauge(descReserved, float64(g.ReservedBytes), lv)
		gauge(descUnmanaged, float64(g.UnmanagedBytes), lv)
		gauge(descTasks, float64(len(g.Reservations)), lv)
		healthy := 0.0
		if g.Healthy && down == "" && perGPU[g.UUID] == "" {
			healthy = 1
		}
		gauge(descHealthy, healthy, lv)
		if b != nil {
			c.readings(b, g.UUID, lv, gauge)
		}
		for _, r := range g.Reservations {
			tl := []string{g.UUID, r.Task.AllocID, r.Task.JobName, r.Task.TaskName}
			gauge(descTaskCap, float64(r.CapBytes), tl)
			if enf != nil {
				used, _ := enf.TaskUsage(r.Token)
				gauge(descTaskUsed, float64(used), tl)
			}
		}
	}
	counts := map[[2]string]uint64{}
	buckets := map[float64]uint64{}
	var n uint64
	var sum float64
	for _, v := range l.Violations() {
		counts[[2]string{v.GPU, v.Action}]++
		if v.ContainedAt.IsZero() || v.CrossedAt.IsZero() {
			continue
		}
		d := v.ContainedAt.Sub(v.CrossedAt).Seconds()
		n++
		sum += d
		for _, ub := range containBuckets {
			if d <= ub {
				buckets[ub]++
			}
		}
	}
	for k, v := range counts {
		ch <- prometheus.MustNewConstMetric(descViolation, prometheus.CounterValue, float64(v), k[0], k[1])
	}
	ch <- prometheus.MustNewConstHistogram(descContain, n, sum, buckets)
}

// readings are the GPU's own figures; one the backend cannot give is left out, not reported as 0.
func (c collector) readings(b gpu.Backend, uuid string, lv []string, gauge func(*prometheus.Desc, float64, []string)) {
	ctx, cancel := context.WithTimeout(c.rt.ctx, readingTimeout)
	defer cancel()
	if u, err := b.MemoryUsed(ctx, uuid); err == nil {
		gauge(descUsed, float64(u), lv)
	}
	if t, err := b.Temperature(ctx, uuid); err == nil {
		gauge(descTemp, float64(t), lv)
	}
	if p, err := b.Power(ctx, uuid); err == nil {
		gauge(descPower, float64(p.UsageMilliwatts)/1000, lv)
		if p.LimitMilliwatts > 0 {
			gauge(descPowerCap, float64(p.LimitMilliwatts)/1000, lv)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// startMetrics serves /metrics on metrics_addr for the runtime's life. A port in use is logged,
// not fatal: metrics are for people, units must keep being advertised.
func (rt *runtime) startMetrics() {
	if rt.cfg.MetricsAddr == "" {
		return
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{rt: rt})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", rt.cfg.MetricsAddr)
	if err != nil {
		rt.log.Error("metrics not served", "metrics_addr", rt.cfg.MetricsAddr, "error", err)
		return
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	rt.wg.Add(2)
	go func() {
		defer rt.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			rt.log.Error("metrics server stopped", "error", err)
		}
	}()
	go func() {
		defer rt.wg.Done()
		<-rt.ctx.Done()
		_ = srv.Close()
	}()
	rt.log.Info("serving metrics", "address", "http://"+ln.Addr().String()+"/metrics")
}
