package runner

import (
	"fmt"
	"slices"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/progress"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// What the run learns of its templates from their attempts, for the scheduler and the ledger's
// profiles: a probe's footprint (alone, or in place when its window ends) and the SM-active
// share of an attempt metered alone on its GPU. When is the caller's: settle (ladder.go) after an
// attempt, finish after settle, the main loop when an in-place probe's window ends.

// learnShare makes what a metered attempt measured its template's SM-active share, for the
// scheduler's compute budget from now on and in the ledger (probe.Shares.Learn). Called after
// settle, so a probe's new footprint profile is there to carry the share.
func (r *run) learnShare(a *active, at *record.Attempt) {
	done := at.Outcome == record.OutcomeOK || at.Outcome == record.OutcomeProbe
	pct, ok := r.shares.Learn(a.sm, a.smPct, at.Template, a.l.Res.Token, done, r.log.With("job", at.Job, "over", at.End.Sub(at.Start)))
	if !ok {
		return
	}
	r.s.LearnedSM(at.Template, pct)
	r.prog.Line("%-8s %-20s GPU%d  SMs active %.1f%% of its run alone -> SM share of template %s", "learned", at.Job,
		at.GPUIndex, pct, at.Template)
}

// recapProbe ends an in-place probe's window: the footprint it showed becomes its template's
// profile, and its protective cap comes down to the cap that footprint earns, in the ledger,
// where the watchdog reads it at its next sample. The window opened at the job's first GPU
// memory, so it always saw some.
func (r *run) recapProbe(a *active) {
	a.mu.Lock()
	peak, samples := a.peak, slices.Clone(a.snaps)
	a.mu.Unlock()
	j := a.l.Job
	capBytes := r.o.Policy.Cap(peak)
	if a.l.Borrowing {
		// It ran on what it borrowed and goes on so; its template's other jobs get the cap.
		a.windowPeak = peak
		r.s.Recapped(&a.l, a.l.Res, peak)
		a.a.Detail = fmt.Sprintf("probed in place for %s, borrowing past its %s guarantee", a.l.Window, a.l.Res.CapBytes)
		r.recordProfile(j.Template, peak, &record.Attempt{Start: a.a.Start, End: r.o.Now(), Samples: samples}, ledger.ProfileProbe)
		r.prog.Line("%-8s %-20s GPU%d  peak %s in its first %s -> cap %s for its template; runs on, borrowing", "probed", j.Name,
			a.a.GPUIndex, peak, a.l.Window, progress.UnitsLabel(r.o.Policy, capBytes))
		return
	}
	res, err := r.led.Shrink(a.l.Res.Token, min(capBytes, a.l.Res.CapBytes))
	if err != nil {
		r.log.Warn("lowering a probe's cap; it keeps its protective cap", "job", j.Name, "error", err)
		return
	}
	if st, err := r.led.State(res.GPU); err == nil && r.guard != nil {
		if err := r.guard.SyncFence(st); err != nil {
			r.log.Warn("lowering a probe's cap in the fence; the watchdog holds the new cap", "job", j.Name, "error", err)
		}
	}
	from := a.l.Res.CapBytes
	r.s.Recapped(&a.l, res, peak)
	a.a.CapBytes = res.CapBytes
	a.a.CapChanges = append(a.a.CapChanges, record.CapChange{At: r.o.Now(), From: from, To: res.CapBytes})
	a.a.Detail = fmt.Sprintf("probed in place for %s: cap lowered from %s to %s", a.l.Window, from, res.CapBytes)
	r.recordProfile(j.Template, peak, &record.Attempt{Start: a.a.Start, End: r.o.Now(), Samples: samples}, ledger.ProfileProbe)
	r.prog.Line("%-8s %-20s GPU%d  peak %s in its first %s -> cap %s; runs on in place", "probed", j.Name, a.a.GPUIndex,
		peak, a.l.Window, res.CapBytes)
}

func (r *run) learn(t string, at *record.Attempt, source string) {
	r.learnBytes(t, at.PeakBytes, at, source)
}

// learnBytes makes peak, which at measured, template t's footprint.
func (r *run) learnBytes(t string, peak size.Bytes, at *record.Attempt, source string) {
	if peak == 0 {
		// A job that never touches the GPU (or one whose memory is not attributed to it) would
		// be probed again on every job of its template, one at a time; a footprint of nothing
		// lets its jobs pack under the margin alone (never more than a job that used some
		// memory gets), and the watchdog still stops one that turns out to use more.
		c := r.o.Policy.Cap(0)
		u := r.o.Policy.Units(c)
		at.Detail = fmt.Sprintf("probe saw no GPU memory: footprint 0B, cap = the margin alone, %s (%s rounded up to %d units of %s)",
			size.Bytes(u)*r.o.Policy.UnitBytes, c, u, r.o.Policy.UnitBytes)
		r.prog.Line("%-8s %-20s GPU%d  %s for template %s", "probed", at.Job, at.GPUIndex, at.Detail, t)
	}
	r.s.Learned(t, peak)
	r.recordProfile(t, peak, at, source)
}

func (r *run) recordProfile(t string, peak size.Bytes, at *record.Attempt, source string) {
	if peak == 0 {
		return
	}
	n := len(at.Samples)
	p := ledger.Profile{Template: t, PeakBytes: peak, Samples: n, Duration: at.End.Sub(at.Start), MeasuredAt: at.End, Source: source}
	if err := r.led.RecordProfile(p); err != nil {
		r.log.Warn("recording the template's footprint", "template", t, "error", err)
	}
}
