package deviceplugin

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufrac/gpufrac/ledger"
)

// violationMetrics counts violations as the ledger records them, in this process. The ledger
// keeps only its newest ledger.MaxViolations, so a figure computed from its list would fall
// once old ones are dropped; these only grow. The ledger's list is read after each violation
// the enforcer reports and at each scrape, and what is new is what follows the newest entry
// counted before. The ones present when the ledger opened were counted by an earlier process:
// the counter starts at 0, as every Prometheus counter does after a restart.
type violationMetrics struct {
	mu      sync.Mutex
	last    ledger.Violation // the newest violation counted (or found at start)
	have    bool
	total   *prometheus.CounterVec
	contain prometheus.Histogram
}

func newViolationMetrics() *violationMetrics {
	return &violationMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpufrac_violations_total",
			Help: "Violations recorded since the plugin started, by GPU and what the enforcer did."}, []string{"gpu", "action"}),
		contain: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpufrac_violation_containment_seconds",
			Help:    "Time from a task passing its cap to none of its processes holding GPU memory, for each violation recorded since the plugin started.",
			Buckets: containBuckets}),
	}
}

// baseline takes the ledger's violations at open as already counted.
func (m *violationMetrics) baseline(vs []ledger.Violation) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(vs) > 0 {
		m.last, m.have = vs[len(vs)-1], true
	}
}

// sync counts the violations of vs (the ledger's list, oldest first) newer than the last one
// counted. When that one has been dropped from the list, every listed one is new; any dropped
// before being seen is lost, which takes more than MaxViolations between two looks.
func (m *violationMetrics) sync(vs []ledger.Violation) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fresh := vs
	if m.have {
		for i := len(vs) - 1; i >= 0; i-- {
			if vs[i] == m.last {
				fresh = vs[i+1:]
				break
			}
		}
	}
	for _, v := range fresh {
		m.total.WithLabelValues(v.GPU, v.Action).Inc()
		if !v.ContainedAt.IsZero() && !v.CrossedAt.IsZero() {
			m.contain.Observe(v.ContainedAt.Sub(v.CrossedAt).Seconds())
		}
	}
	if len(fresh) > 0 {
		m.last, m.have = fresh[len(fresh)-1], true
	}
}

// zero makes the GPU's counters exist at 0 for every action.
func (m *violationMetrics) zero(gpu string) {
	for _, a := range violationActions {
		m.total.WithLabelValues(gpu, a)
	}
}
