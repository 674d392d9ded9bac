package ledger

import (
	"fmt"
	"slices"

	"github.com/gpufrac/gpufrac/policy"
)

// MaxViolations is how many violations the ledger keeps; older ones are dropped first.
const MaxViolations = 1000

// Profile sources.
const (
	ProfileProbe     = "probe"
	ProfileRun       = "run"
	ProfileViolation = "violation"
)

// RecordViolation appends v, keeping the newest MaxViolations.
func (l *Ledger) RecordViolation(v Violation) error {
	if v.GPU == "" {
		return fmt.Errorf("%w: violation of task %s names no GPU", ErrBadInput, v.Task.String())
	}
	v.CrossedAt, v.ContainedAt = utc(v.CrossedAt), utc(v.ContainedAt)
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, err := l.begin()
	if err != nil {
		return err
	}
	// A new slice every time: the previous state may share the old one (see state.viol).
	keep := l.st.viol
	if len(keep) >= MaxViolations {
		keep = keep[len(keep)-MaxViolations+1:]
	}
	next := make([]Violation, 0, len(keep)+1)
	l.st.viol = append(append(next, keep...), v)
	if err := l.commitViolations(prev); err != nil {
		return err
	}
	l.log.Warn("violation recorded", "gpu", v.GPU, "token", RedactToken(v.Token), "task", v.Task.String(),
		"cap", v.CapBytes.String(), "peak", v.PeakBytes.String(), "action", v.Action)
	return nil
}

// Violations returns the kept violations, oldest first.
func (l *Ledger) Violations() []Violation {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.st.viol)
}

// RecordProfile stores p as its template's latest footprint. A profile raised after a violation
// never lowers the peak: the violation proves the job can use at least the old peak, while the
// violating sample may have been cut short by the stop.
func (l *Ledger) RecordProfile(p Profile) error {
	if p.Template == "" {
		return fmt.Errorf("%w: profile has no template name", ErrBadInput)
	}
	switch p.Source {
	case ProfileProbe, ProfileRun, ProfileViolation:
	default:
		return fmt.Errorf("%w: profile of template %q has source %q; want %q, %q or %q",
			ErrBadInput, p.Template, p.Source, ProfileProbe, ProfileRun, ProfileViolation)
	}
	if p.SMActivePercent != nil {
		if err := policy.CheckSMActive("sm_active_percent", *p.SMActivePercent); err != nil {
			return fmt.Errorf("%w: profile of template %q: %w", ErrBadInput, p.Template, err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, err := l.begin()
	if err != nil {
		return err
	}
	if old, ok := l.st.prof[p.Template]; ok && p.SMActivePercent == nil {
		// A new peak says nothing of the SMs: what was measured of them stays.
		p.SMActivePercent = old.SMActivePercent
	}
	if p.MeasuredAt.IsZero() {
		p.MeasuredAt = l.now()
	}
	p.MeasuredAt = utc(p.MeasuredAt)
	if old, ok := l.st.prof[p.Template]; ok && p.Source == ProfileViolation && old.PeakBytes > p.PeakBytes {
		p.PeakBytes = old.PeakBytes
	}
	l.st.prof[p.Template] = p
	if err := l.commit(prev, false); err != nil {
		return err
	}
	l.log.Info("profile recorded", "template", p.Template, "peak", p.PeakBytes.String(), "source", p.Source)
	return nil
}

// Profile returns a template's latest footprint.
func (l *Ledger) Profile(template string) (Profile, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.st.prof[template]
	return p, ok
}

// Profiles returns every footprint, by template name.
func (l *Ledger) Profiles() []Profile {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st.profiles()
}
