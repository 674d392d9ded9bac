package runner

import (
	"context"

	"github.com/gpufrac/gpufrac/probe"
	"github.com/gpufrac/gpufrac/record"
)

// A template's SM-active share (policy.Template.SMActivePercent: what the compute budget of
// sched/compute.go counts a job for) is learned here, in the run, as `gpufrac probe` learns it:
// the GPU's performance monitor read over an attempt that had the GPU to itself. GPM measures
// the GPU, not a process, so an attempt that shared its GPU with another job at any moment
// learns nothing: the figure would be the sum of both jobs' work, charged to one template. The
// run knows its own attempts (smJoin marks a metered attempt shared the moment another starts on
// its GPU) and the reservations the ledger holds for other processes (at the attempt's start and
// end); a process that holds no reservation and left nothing in the ledger is not seen.

// smMetered says whether an attempt launching alone on its GPU is worth metering: a probe
// attempt (what it learns is stored with its footprint), or any attempt of a template whose
// share the run does not know yet.
func (r *run) smMetered(a *active) bool {
	if r.o.GPMInterval < 0 || r.noGPM[a.l.GPU] {
		return false
	}
	_, known := r.s.SMDemand(a.l.Job.Template)
	return a.l.Probe || !known
}

// smJoin is called, with r.mu held, as attempt a joins the running ones: every metered attempt
// already on its GPU now shares it, and a itself is alone only when nothing else runs there.
func (r *run) smJoin(a *active) (alone bool) {
	alone = true
	for o := range r.active {
		if o.l.GPU != a.l.GPU {
			continue
		}
		alone = false
		if o.sm != nil {
			o.mu.Lock()
			o.smShared = true
			o.mu.Unlock()
		}
	}
	return alone
}

// smOpen starts metering attempt a when it launched alone and is worth it. A GPU without a
// performance monitor (or whose monitor would not open) is not asked again during the run:
// its shares stay unknown, never 0.
func (r *run) smOpen(a *active, alone bool) {
	if !alone || !r.smMetered(a) || r.othersHeld(a) {
		return
	}
	a.sm = probe.OpenSM(context.Background(), r.o.Backend, a.l.GPU, r.log.With("job", a.l.Job.Name))
	if a.sm == nil {
		r.noGPM[a.l.GPU] = true
	}
}

// othersHeld says whether the ledger holds a reservation on a's GPU other than a's own: another
// process's job, which GPM would count with a's.
func (r *run) othersHeld(a *active) bool {
	st, err := r.led.State(a.l.GPU)
	if err != nil {
		return true // unknown: assume shared rather than charge another's work to a's template
	}
	for _, res := range st.Reservations {
		if res.Token != a.l.Res.Token {
			return true
		}
	}
	return false
}

// learnShare makes what a metered attempt measured its template's share: for the scheduler's
// compute budget from now on, and in the template's footprint profile in the ledger, where
// `gpufrac probe` stores its measurement and warm runs read it. Only an attempt that did its
// work counts (it finished, or its probe window ended it): a job that failed or was stopped
// early ran a different mix than its template's jobs do. Called after settle, so a probe's new
// footprint profile is there to carry the share.
func (r *run) learnShare(a *active, at *record.Attempt) {
	if a.sm == nil || a.smPct == nil {
		return
	}
	a.mu.Lock()
	shared := a.smShared
	a.mu.Unlock()
	t := at.Template
	switch {
	case shared:
		r.log.Debug("SM-active share not learned: the attempt shared its GPU", "job", at.Job, "template", t)
		return
	case at.Outcome != record.OutcomeOK && at.Outcome != record.OutcomeProbe:
		return
	case r.othersHeld(a):
		r.log.Debug("SM-active share not learned: another process holds a reservation on the GPU", "job", at.Job, "template", t)
		return
	}
	pct := *a.smPct
	r.s.LearnedSM(t, pct)
	stored := false
	if p, ok := r.led.Profile(t); ok {
		p.SMActivePercent = &pct
		if err := r.led.RecordProfile(p); err != nil {
			r.log.Warn("recording the template's SM-active share", "template", t, "error", err)
		} else {
			stored = true
		}
	}
	r.log.Info("SM-active share learned", "template", t, "job", at.Job, "gpu", a.l.GPU, "sm_active_percent", pct,
		"over", at.End.Sub(at.Start), "stored", stored)
	r.prog.Line("%-8s %-20s GPU%d  SMs active %.1f%% of its run alone -> SM share of template %s", "learned", at.Job,
		at.GPUIndex, pct, t)
}
