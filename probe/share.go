package probe

import (
	"context"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/hashicorp/go-hclog"
)

// A template's SM-active share (policy.Template.SMActivePercent: what the compute budget of
// sched/compute.go counts a job for) is learned in `gpufrac run` as `gpufrac probe` learns it:
// the GPU's performance monitor read over an attempt that had the GPU to itself. GPM measures
// the GPU, not a process, so an attempt that shared its GPU with another job at any moment
// learns nothing: the figure would be the sum of both jobs' work, charged to one template. The
// run knows its own attempts (it marks a meter shared the moment another attempt starts on its
// GPU) and Shares knows the reservations the ledger holds for other processes (at the attempt's
// start and end); a process that holds no reservation and left nothing in the ledger is not seen.

// Shares learns templates' SM-active shares from the attempts of a run that had their GPU alone,
// and stores each in its template's footprint profile in the ledger, where `gpufrac probe` stores
// its measurement and warm runs read it. Open and Learn are called from one goroutine (the run's
// main loop).
type Shares struct {
	backend gpu.Backend
	led     *ledger.Ledger
	off     bool
	// noGPM are the GPUs found without a performance monitor, or whose monitor would not open:
	// not asked again, so their shares stay unknown, never 0.
	noGPM map[string]bool
}

// NewShares learns shares on b's GPUs into led. off: no attempt is metered (a caller that reads
// the monitors itself, as the benchmark does, and wants one reader per GPU).
func NewShares(b gpu.Backend, led *ledger.Ledger, off bool) *Shares {
	return &Shares{backend: b, led: led, off: off, noGPM: map[string]bool{}}
}

// Open starts metering an attempt that launched alone on GPU g, holding reservation token, when
// wanted (a probe attempt, whose measurement is stored with its footprint, or any attempt of a
// template whose share is not known yet) and possible: nil when not metered. The caller reads
// the meter (SMMeter.Ticks, Read), marks it shared (SMMeter.Share) when another attempt starts
// on g, and closes it when the attempt ends.
func (s *Shares) Open(g, token string, wanted bool, log hclog.Logger) *SMMeter {
	if !wanted || s.off || s.noGPM[g] || s.othersHeld(g, token) {
		return nil
	}
	m := OpenSM(context.Background(), s.backend, g, log)
	if m == nil {
		s.noGPM[g] = true
	}
	return m
}

// Learn makes what meter m measured (pct, from its Close) template t's share, in the ledger
// (when the template has a footprint profile to carry it), and says it: ok is false when it
// does not count. Only an attempt that did its work counts (done: it finished, or its probe
// window ended it), since a job that failed or was stopped early ran a different mix than its
// template's jobs do, and only one that had its GPU alone throughout.
func (s *Shares) Learn(m *SMMeter, pct *float64, t, token string, done bool, log hclog.Logger) (share float64, ok bool) {
	if m == nil || pct == nil {
		return 0, false
	}
	log = log.With("template", t, "gpu", m.gpu)
	switch {
	case m.isShared():
		log.Debug("SM-active share not learned: the attempt shared its GPU")
		return 0, false
	case !done:
		return 0, false
	case s.othersHeld(m.gpu, token):
		log.Debug("SM-active share not learned: another process holds a reservation on the GPU")
		return 0, false
	}
	share = *pct
	stored := false
	if p, ok := s.led.Profile(t); ok {
		p.SMActivePercent = &share
		if err := s.led.RecordProfile(p); err != nil {
			log.Warn("recording the template's SM-active share", "error", err)
		} else {
			stored = true
		}
	}
	log.Info("SM-active share learned", "sm_active_percent", share, "stored", stored)
	return share, true
}

// othersHeld says whether the ledger holds a reservation on GPU g other than token's: another
// process's job, which GPM would count with the attempt's.
func (s *Shares) othersHeld(g, token string) bool {
	st, err := s.led.State(g)
	if err != nil {
		return true // unknown: assume shared rather than charge another's work to the template
	}
	for _, res := range st.Reservations {
		if res.Token != token {
			return true
		}
	}
	return false
}
