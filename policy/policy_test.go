package policy

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

func TestCapAndUnits(t *testing.T) {
	d := Default()
	tests := []struct {
		name  string
		p     Policy
		peak  size.Bytes
		cap   size.Bytes
		units int
	}{
		{"default 10GiB", d, 10 * size.GiB, 13848030976, 13},
		{"default 14.5GiB", d, size.MustParse("14.5GiB"), 19404644916, 19},
		{"zero peak is the fixed margin", d, 0, 1500 * size.MB, 2},
		{"no margins", Policy{UnitBytes: size.GiB}, 3 * size.GiB, 3 * size.GiB, 3},
		{"rounds up a fraction of a byte", Policy{CapMarginPercent: 10, UnitBytes: size.GiB}, 1, 2, 1},
		{"512MiB units", Policy{CapMarginPercent: 0, CapMarginBytes: 0, UnitBytes: 512 * size.MiB}, 3 * size.GiB / 2, 3 * size.GiB / 2, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Cap(tc.peak); got != tc.cap {
				t.Fatalf("Cap(%d) = %d, want %d", tc.peak, got, tc.cap)
			}
			if got := tc.p.Units(tc.cap); got != tc.units {
				t.Fatalf("Units(%d) = %d, want %d", tc.cap, got, tc.units)
			}
		})
	}
	if got := (Policy{}).Units(size.GiB); got != 0 {
		t.Fatalf("Units with a zero unit = %d", got)
	}
	tpl := Template{Name: "x", PeakBytes: 10 * size.GiB, CapOverrideBytes: 5 * size.GiB}
	if tpl.Cap(d) != 5*size.GiB || tpl.Units(d) != 5 {
		t.Fatalf("override: cap %d units %d", tpl.Cap(d), tpl.Units(d))
	}
}

// A peak no GPU has (a typo, a damaged ledger's profile) must not wrap the cap below the peak
// or the units below the cap: 16000PiB x 1.15 passed uint64 and came out as 8192PiB.
func TestCapAndUnitsDoNotWrap(t *testing.T) {
	d := Default()
	tests := []struct {
		name string
		peak size.Bytes
	}{
		{"16000PiB", 16000 * size.PiB},
		{"the largest size", math.MaxUint64},
		{"just below where x1.15 passes uint64", math.MaxUint64 / 115 * 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := d.Cap(tc.peak)
			if c < tc.peak {
				t.Fatalf("Cap(%d) = %d, below the peak", tc.peak, c)
			}
			if u := d.Units(c); size.Bytes(u) < c/d.UnitBytes {
				t.Fatalf("Units(%d) = %d, fewer than the %d whole units in the cap", c, u, c/d.UnitBytes)
			}
			if g := d.Granted(c); g < c {
				t.Fatalf("Granted(%d) = %d, below the cap", c, g)
			}
		})
	}
}

func TestCapFormula(t *testing.T) {
	if got, want := Default().CapFormula("peak"), "peak x 1.15 + 1.5GB"; got != want {
		t.Errorf("CapFormula of the default policy = %q, want %q", got, want)
	}
	p := Policy{CapMarginPercent: 20, CapMarginBytes: 2 * size.GB}
	if got, want := p.CapFormula((10 * size.GiB).String()), "10GiB x 1.20 + 2GB"; got != want {
		t.Errorf("CapFormula = %q, want %q", got, want)
	}
}

func TestValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default() invalid: %v", err)
	}
	tests := []struct {
		name   string
		mutate func(*Policy)
		want   string
	}{
		{"name", func(p *Policy) { p.Name = "a/b" }, `name = "a/b"`},
		{"empty name", func(p *Policy) { p.Name = "" }, `name = ""`},
		{"percent", func(p *Policy) { p.CapMarginPercent = -1 }, "cap_margin_percent = -1"},
		{"tasks", func(p *Policy) { p.MaxTasksPerGPU = 65 }, "max_tasks_per_gpu = 65"},
		{"unit", func(p *Policy) { p.UnitBytes = size.MiB }, "unit = 1MiB"},
		{"headroom", func(p *Policy) { p.HeadroomBytes = 2 * size.TiB }, "headroom = 2TiB"},
		{"mode", func(p *Policy) { p.Mode = "" }, `mode = ""`},
		{"watchdog", func(p *Policy) { p.WatchdogInterval = time.Millisecond }, "watchdog_interval = 1ms"},
		{"unmanaged", func(p *Policy) { p.Unmanaged = "kill" }, `unmanaged = "kill"`},
		{"sm budget below 1", func(p *Policy) { p.SMBudgetPercent = 0.5 }, "sm_budget_percent = 0.5"},
		{"sm budget too large", func(p *Policy) { p.SMBudgetPercent = 7000 }, "sm_budget_percent = 7000"},
		{"sm budget negative", func(p *Policy) { p.SMBudgetPercent = -100 }, "sm_budget_percent = -100"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := Default()
			tc.mutate(&p)
			err := p.Validate()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
}

func TestConflictErrorText(t *testing.T) {
	tests := []struct {
		e    ConflictError
		want string
	}{
		{ConflictError{Path: "p", CAS: 4}, "expected modify index 4, but it does not exist"},
		{ConflictError{Path: "p", CAS: 0, Current: Meta{ModifyIndex: 9}}, "expected it not to exist, but it does (modify index 9)"},
		{ConflictError{Path: "p", CAS: 4, Current: Meta{ModifyIndex: 9}}, "expected modify index 4, found 9"},
	}
	for _, tc := range tests {
		if got := tc.e.Error(); !strings.Contains(got, tc.want) || !strings.Contains(got, "p:") {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
		if !errors.Is(&tc.e, ErrConflict) {
			t.Errorf("errors.Is(%v, ErrConflict) false", &tc.e)
		}
	}
}

// A template's peak and cap override are bounded alike: "80TB" for "80GB" is a typo, refused
// with the field and the value, not a cap no GPU could give.
func TestTemplateSizesAreBounded(t *testing.T) {
	tests := []struct {
		name string
		tpl  Template
		want string // "" = valid
	}{
		{"peak at the bound", Template{Name: "a", PeakBytes: 64 * size.TiB}, ""},
		{"peak past it", Template{Name: "a", PeakBytes: 80 * size.TB}, "peak = 72.76TiB"},
		{"override at the bound", Template{Name: "a", CapOverrideBytes: 64 * size.TiB}, ""},
		{"override past it", Template{Name: "a", CapOverrideBytes: 80 * size.TB}, "cap_override = 72.76TiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.tpl.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}
