package deviceplugin

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// Metric descriptions. Gauges are read from the ledger, the watchdog and the fence at scrape
// time; the violation counter and the containment histogram are kept by this process (see
// violationMetrics), so they only ever grow while it runs.
var (
	gpuLabels = []string{"gpu", "model", "index"}
	// taskLabels carry reservation, the ID of the reservation's first unit: the one label that
	// tells two reservations apart before their tasks start (alloc_id, job and task are empty
	// until a process of the task carries its token), and that is no secret (Nomad shows it).
	taskLabels = []string{"gpu", "reservation", "alloc_id", "job", "task"}

	descMemory    = prometheus.NewDesc("gpufrac_gpu_memory_bytes", "Total memory of the GPU.", gpuLabels, nil)
	descBudget    = prometheus.NewDesc("gpufrac_gpu_budget_bytes", "Memory the policy lets tasks reserve on the GPU (total - headroom - unmanaged).", gpuLabels, nil)
	descReserved  = prometheus.NewDesc("gpufrac_gpu_reserved_bytes", "Sum of the caps of the GPU's reservations.", gpuLabels, nil)
	descBorrowed  = prometheus.NewDesc("gpufrac_gpu_borrowed_bytes", "Memory tasks hold past their guarantees (borrow on), as the allocation fence counts it; 0 without borrowing.", gpuLabels, nil)
	descFree      = prometheus.NewDesc("gpufrac_gpu_free_bytes", "Budget neither reserved nor borrowed: budget - reserved - borrowed, never below 0.", gpuLabels, nil)
	descFreeUnits = prometheus.NewDesc("gpufrac_gpu_free_units", "Units Nomad may place a task on now: advertised healthy and held by no task.", gpuLabels, nil)
	descUsed      = prometheus.NewDesc("gpufrac_gpu_used_bytes", "Memory in use on the whole GPU, every process and the driver.", gpuLabels, nil)
	descUnmanaged = prometheus.NewDesc("gpufrac_gpu_unmanaged_bytes", "Memory held by processes without a reservation.", gpuLabels, nil)
	descHealthy   = prometheus.NewDesc("gpufrac_gpu_healthy", "1 when the GPU admits tasks, 0 when it does not (see its health description).", gpuLabels, nil)
	descTemp      = prometheus.NewDesc("gpufrac_gpu_temperature_celsius", "Temperature of the GPU die; absent while the backend cannot read it.", gpuLabels, nil)
	descPower     = prometheus.NewDesc("gpufrac_gpu_power_watts", "Power drawn by the GPU and its memory; absent while the backend cannot read it.", gpuLabels, nil)
	descPowerCap  = prometheus.NewDesc("gpufrac_gpu_power_limit_watts", "The GPU's enforced power limit; absent where the driver does not give it.", gpuLabels, nil)
	descTasks     = prometheus.NewDesc("gpufrac_gpu_tasks", "Reservations held on the GPU.", gpuLabels, nil)
	descTaskUsed  = prometheus.NewDesc("gpufrac_task_used_bytes", "GPU memory the task's processes hold.", taskLabels, nil)
	descTaskCap   = prometheus.NewDesc("gpufrac_task_cap_bytes", "The task's hard cap (its guarantee when it may borrow).", taskLabels, nil)
	descTaskLent  = prometheus.NewDesc("gpufrac_task_borrowed_bytes", "Memory the task holds past its cap, up to its borrowing limit; 0 for a task that may not borrow.", taskLabels, nil)

	containBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30}
	// violationActions are every action the enforcer records, so that each GPU's counters
	// exist at 0 before its first violation: rate() and increase() need the zero.
	violationActions = []string{enforcer.ActionOOMInProcess, enforcer.ActionSIGINT, enforcer.ActionSIGKILL, enforcer.ActionReported}
)

type collector struct{ rt *runtime }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMemory, descBudget, descReserved, descBorrowed, descFree, descFreeUnits, descUsed,
		descUnmanaged, descHealthy, descTasks, descTemp, descPower, descPowerCap, descTaskUsed, descTaskCap, descTaskLent} {
		ch <- d
	}
	c.rt.viol.total.Describe(ch)
	c.rt.viol.contain.Describe(ch)
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	b, l, enf := c.rt.parts()
	if l != nil {
		c.collectGPUs(ch, b, l, enf)
		c.rt.viol.sync(l.Violations())
	} else {
		c.collectUnavailable(ch, b)
	}
	c.rt.viol.total.Collect(ch)
	c.rt.viol.contain.Collect(ch)
}

func (c collector) collectGPUs(ch chan<- prometheus.Metric, b gpu.Backend, l *ledger.Ledger, enf taskEnforcer) {
	states := l.States()
	// Free units are counted on what the fingerprint would advertise now, so the metric and
	// Nomad's view agree (withheld for borrowers, unhealthy while a part is missing).
	down, perGPU := c.rt.unavailable(), c.rt.gpuDown()
	adv := buildFingerprint(states, groupInfo{unavailable: down, gpuDown: perGPU})
	for i := range states {
		g := &states[i]
		lv := []string{g.UUID, g.Model, strconv.Itoa(g.Index)}
		gauge := gaugeTo(ch)
		c.rt.viol.zero(g.UUID)
		lent := g.BorrowedBytes // as the watchdog last read the fence's table into the ledger
		gauge(descMemory, float64(g.TotalBytes), lv)
		gauge(descBudget, float64(g.BudgetBytes), lv)
		gauge(descReserved, float64(g.ReservedBytes), lv)
		gauge(descBorrowed, float64(lent), lv)
		gauge(descFree, float64(sub(g.BudgetBytes, g.ReservedBytes+lent)), lv)
		gauge(descFreeUnits, float64(freeUnits(adv.DeviceGroup[i].Devices, g.Instances)), lv)
		gauge(descUnmanaged, float64(g.UnmanagedBytes), lv)
		gauge(descTasks, float64(len(g.Reservations)), lv)
		healthy := 0.0
		if g.Healthy && down == "" && (g.Mode != policy.ModeMPS || perGPU[g.UUID] == "") {
			healthy = 1
		}
		gauge(descHealthy, healthy, lv)
		if b != nil {
			c.readings(b, g.UUID, lv, gauge)
		}
		for _, r := range g.Reservations {
			tl := []string{g.UUID, firstUnit(r), r.Task.AllocID, r.Task.JobName, r.Task.TaskName}
			gauge(descTaskCap, float64(r.CapBytes), tl)
			if enf != nil {
				used, _ := enf.TaskUsage(r.Token)
				gauge(descTaskUsed, float64(used), tl)
				gauge(descTaskLent, float64(min(sub(used, r.CapBytes), sub(r.Limit(), r.CapBytes))), tl)
			}
		}
	}
	// A GPU that vanished with no reservation has left the ledger, but the fingerprint still
	// shows it unhealthy: its health series must read 0, not go, so an alert on it fires. It
	// has no readings to give.
	for _, d := range c.rt.vanishedGPUs() {
		if slices.ContainsFunc(states, func(st ledger.GPUState) bool { return st.UUID == d.UUID }) {
			continue
		}
		lv := []string{d.UUID, d.Model, strconv.Itoa(d.Index)}
		c.rt.viol.zero(d.UUID)
		gauge := gaugeTo(ch)
		gauge(descMemory, float64(d.MemoryBytes), lv)
		gauge(descHealthy, 0, lv)
	}
}

// gaugeTo sends gauges to ch.
func gaugeTo(ch chan<- prometheus.Metric) func(d *prometheus.Desc, v float64, labels []string) {
	return func(d *prometheus.Desc, v float64, labels []string) {
		// A label that is not UTF-8 makes MustNewConstMetric panic in the scrape, which ends
		// the plugin: task names are made text where they are read (attribution), and what
		// else reaches a label (the backend's model) is made text here.
		for j, s := range labels {
			labels[j] = ledger.ValidText(s)
		}
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
}

// collectUnavailable reports the GPUs while the ledger cannot be opened (another gpufrac holds
// its lock, its directory is unwritable): those the fingerprint shows, from the ledger's last
// committed file or else the backend's listing, each unhealthy (no unit of it is placeable),
// with its memory and the backend's readings. An alert on gpufrac_gpu_healthy == 0 must fire
// now, not find the series gone. The ledger's figures (reserved, free...) are left out: no
// ledger answers for them.
func (c collector) collectUnavailable(ch chan<- prometheus.Metric, b gpu.Backend) {
	gauge := gaugeTo(ch)
	for _, g := range c.rt.knownGPUs() {
		lv := []string{g.UUID, g.Model, strconv.Itoa(g.Index)}
		c.rt.viol.zero(g.UUID)
		gauge(descMemory, float64(g.MemoryBytes), lv)
		gauge(descHealthy, 0, lv)
		if b != nil {
			c.readings(b, g.UUID, lv, gauge)
		}
	}
}

// freeUnits counts the advertised units that are healthy and held by no task. devs are built
// from instances one for one, except the stand-in of a GPU without units, which is unhealthy.
func freeUnits(devs []*devicepb.DetectedDevice, instances []ledger.Instance) int {
	n := 0
	for j, d := range devs {
		if d.GetHealthy() && j < len(instances) && instances[j].Token == "" {
			n++
		}
	}
	return n
}

// sub is a-b, or 0 when b is larger (sizes are unsigned).
func sub(a, b size.Bytes) size.Bytes {
	if b >= a {
		return 0
	}
	return a - b
}

// firstUnit is the lowest-numbered unit of r: stable for the reservation's life, unique among
// live reservations (a unit has one holder), and what `nomad alloc status` shows the task on.
func firstUnit(r ledger.Reservation) string {
	if len(r.InstanceIDs) == 0 {
		return ledger.RedactToken(r.Token) // not made by Reserve; never seen from Nomad
	}
	return slices.MinFunc(r.InstanceIDs, func(a, b string) int { return cmp.Compare(unitNumber(a), unitNumber(b)) })
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

// newRegistry is the registry /metrics serves: the plugin's collector alone.
func (rt *runtime) newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{rt: rt})
	return reg
}

// startMetrics serves /metrics on metrics_addr for the runtime's life. A port in use is logged,
// not fatal: metrics are for people, units must keep being advertised.
func (rt *runtime) startMetrics() {
	if rt.cfg.MetricsAddr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(rt.newRegistry(), promhttp.HandlerOpts{}))
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
