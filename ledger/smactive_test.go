package ledger

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/size"
)

// TestProfileSMActive: a profile's SM-active share is kept through a later peak that says
// nothing of the SMs, replaced by a new measurement, refused out of range naming the value, and
// read back from the file by a new ledger.
func TestProfileSMActive(t *testing.T) {
	l, dir := newTest(t, Options{})
	pct := func(v float64) *float64 { return &v }
	steps := []struct {
		p       Profile
		want    *float64
		wantErr string
	}{
		{Profile{Template: "lora", PeakBytes: 10 * size.GiB, Source: ProfileProbe}, nil, ""},
		{Profile{Template: "lora", PeakBytes: 10 * size.GiB, Source: ProfileProbe, SMActivePercent: pct(50)}, pct(50), ""},
		{Profile{Template: "lora", PeakBytes: 12 * size.GiB, Source: ProfileViolation}, pct(50), ""},
		{Profile{Template: "lora", PeakBytes: 12 * size.GiB, Source: ProfileRun, SMActivePercent: pct(0)}, pct(0), ""},
		{Profile{Template: "lora", PeakBytes: 12 * size.GiB, Source: ProfileProbe, SMActivePercent: pct(120)}, pct(0), "sm_active_percent = 120"},
	}
	for i, s := range steps {
		err := l.RecordProfile(s.p)
		if s.wantErr != "" {
			if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), s.wantErr) {
				t.Errorf("step %d: err = %v, want ErrBadInput naming %q", i, err, s.wantErr)
			}
		} else if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		got, _ := l.Profile("lora")
		if (got.SMActivePercent == nil) != (s.want == nil) || (s.want != nil && *got.SMActivePercent != *s.want) {
			t.Errorf("step %d: SM active %v, want %v", i, fmtPct(got.SMActivePercent), fmtPct(s.want))
		}
	}
	l.Close()
	again, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got, ok := again.Profile("lora"); !ok || got.SMActivePercent == nil || *got.SMActivePercent != 0 {
		t.Fatalf("after reopening: %+v, want SM active 0%% (measured, not unknown)", got)
	}
}

func fmtPct(p *float64) string {
	if p == nil {
		return "unknown"
	}
	return fmt.Sprintf("%g%%", *p)
}
