package probe

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/hashicorp/go-hclog"
)

// DefaultGPMInterval is how often a probe reads the GPU's performance monitor: NVML's GPM
// figures need periods of at least about 100 ms, and a job's phases last seconds.
const DefaultGPMInterval = 500 * time.Millisecond

// minGPMPeriod is the shortest last period a probe closes: a shorter one says little.
const minGPMPeriod = 100 * time.Millisecond

// SMMeter sums a GPU's SM activity over a job's run. GPM measures the GPU, not a process: the
// figure is the job's only when the job ran alone on the GPU for the whole measurement, which
// the caller must see to (probe.Run's job runs alone; the runner meters only attempts alone,
// through Shares, and marks a meter shared when another attempt joins its GPU).
type SMMeter struct {
	s       gpu.GPMSampler
	gpu     string
	log     hclog.Logger
	active  float64 // percent x seconds
	covered time.Duration
	last    time.Time
	errs    int

	mu     sync.Mutex
	shared bool
}

// OpenSM starts measuring GPU uuid's SM activity; nil when the GPU has no performance monitor
// (its share is then unknown, never 0). The caller reads it every DefaultGPMInterval or so.
func OpenSM(ctx context.Context, b gpu.Backend, uuid string, log hclog.Logger) *SMMeter {
	s, err := b.OpenGPM(ctx, uuid)
	if err != nil {
		if errors.Is(err, gpu.ErrNoGPM) {
			log.Info("the GPU has no performance monitor: the job's SM-active share stays unknown", "gpu", uuid)
		} else {
			log.Warn("cannot read the GPU's performance monitor: the job's SM-active share stays unknown", "gpu", uuid, "error", err)
		}
		return nil
	}
	return &SMMeter{s: s, gpu: uuid, log: log, last: time.Now()}
}

// Share notes that another job ran on the GPU while m measured: what it measures is no longer
// one job's (Shares.Learn then learns nothing from it). A nil meter measures nothing to spoil.
func (m *SMMeter) Share() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.shared = true
}

func (m *SMMeter) isShared() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shared
}

// Read closes the current period and adds it to the measurement.
func (m *SMMeter) Read(ctx context.Context) {
	g, err := m.s.Read(ctx)
	m.last = time.Now()
	if err != nil {
		// A failed period is left out of the share, not counted as idle.
		if m.errs++; m.errs == 1 {
			m.log.Warn("cannot read the GPU's performance monitor", "error", err)
		}
		return
	}
	d := g.End.Sub(g.Start)
	m.active += g.SMUtil * d.Seconds()
	m.covered += d
}

// Ticks paces the meter's reads every iv; on a nil meter (not measuring) it never ticks. stop
// releases the ticker.
func (m *SMMeter) Ticks(iv time.Duration) (tick <-chan time.Time, stop func()) {
	if m == nil {
		return nil, func() {}
	}
	t := time.NewTicker(iv)
	return t.C, t.Stop
}

// Close reads the last period (when long enough to mean something) and returns the share of
// the covered time the SMs were active, in percent; nil when nothing was covered.
func (m *SMMeter) Close(ctx context.Context) *float64 {
	if m == nil {
		return nil
	}
	if time.Since(m.last) >= minGPMPeriod {
		m.Read(ctx)
	}
	_ = m.s.Close()
	if m.covered <= 0 {
		return nil
	}
	pct := min(100, max(0, m.active/m.covered.Seconds()))
	return &pct
}
