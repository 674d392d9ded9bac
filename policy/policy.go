package policy

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// Mode is how caps are enforced on one GPU.
type Mode string

const (
	// ModeMPS runs the GPU under an MPS control daemon: caps bite at allocation time, but a
	// forced stop of a busy client can fault its neighbours (see docs/enforcement.md).
	ModeMPS Mode = "mps"
	// ModeIsolated keeps separate CUDA contexts: stops are safe, caps are enforced after the fact
	// by the watchdog and headroom absorbs the overshoot.
	ModeIsolated Mode = "isolated"
)

// Unmanaged says what happens to GPU processes that hold no reservation.
type Unmanaged string

const (
	// UnmanagedReport measures them, subtracts them from the budget and reports them.
	UnmanagedReport Unmanaged = "report"
	// UnmanagedStop does the same and also stops them.
	UnmanagedStop Unmanaged = "stop"
)

// Defaults, from the cap rule cap = peak x 1.15 + 1.5 GB.
const (
	DefaultName             = "default"
	DefaultCapMarginPercent = 15.0
	DefaultCapMarginBytes   = 1500 * size.MB
	DefaultMaxTasksPerGPU   = 6
	DefaultUnitBytes        = size.GiB
	DefaultHeadroomBytes    = 2 * size.GiB
	DefaultMode             = ModeIsolated
	DefaultWatchdogInterval = 100 * time.Millisecond
	DefaultUnmanaged        = UnmanagedReport
)

// Policy is the headroom policy for every GPU of the nodes that read it.
type Policy struct {
	// Name selects the policy; it is the last segment of its Nomad Variable path.
	Name string `json:"name"`
	// HeadroomBytes is kept free on every GPU: drivers, contexts and fragmentation live here.
	HeadroomBytes size.Bytes `json:"headroom_bytes"`
	// CapMarginPercent and CapMarginBytes turn a measured peak into a cap.
	CapMarginPercent float64    `json:"cap_margin_percent"`
	CapMarginBytes   size.Bytes `json:"cap_margin_bytes"`
	// MaxTasksPerGPU bounds how many reservations one GPU holds at once.
	MaxTasksPerGPU int `json:"max_tasks_per_gpu"`
	// UnitBytes is the memory behind one Nomad device instance.
	UnitBytes size.Bytes `json:"unit_bytes"`
	// Mode is the enforcement mode of GPUs that have no mode of their own in the ledger.
	Mode Mode `json:"mode"`
	// WatchdogInterval is how often the watchdog samples NVML.
	WatchdogInterval time.Duration `json:"watchdog_interval"`
	// Unmanaged decides the fate of GPU processes that hold no reservation.
	Unmanaged Unmanaged `json:"unmanaged"`
	// SMBudgetPercent bounds the SM-active demands (Template.SMActivePercent) of the jobs a GPU
	// runs at once, summed, in percent of one GPU's SMs: 150 lets three jobs that each keep the
	// SMs 50% active alone share a GPU. 0 is off, the default until a GPU has measured a value
	// worth setting (docs/policy.md).
	SMBudgetPercent float64 `json:"sm_budget_percent,omitempty"`
}

// Default returns the policy used when none is declared.
func Default() Policy {
	return Policy{
		Name:             DefaultName,
		HeadroomBytes:    DefaultHeadroomBytes,
		CapMarginPercent: DefaultCapMarginPercent,
		CapMarginBytes:   DefaultCapMarginBytes,
		MaxTasksPerGPU:   DefaultMaxTasksPerGPU,
		UnitBytes:        DefaultUnitBytes,
		Mode:             DefaultMode,
		WatchdogInterval: DefaultWatchdogInterval,
		Unmanaged:        DefaultUnmanaged,
	}
}

// FieldError names the field and the value that failed validation.
type FieldError struct {
	Field  string
	Value  any
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s = %v: %s", e.Field, e.Value, e.Reason)
}

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid")

// Is lets errors.Is(err, ErrInvalid) match any FieldError.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// Validate returns every problem at once, joined, each naming its field and value.
func (p Policy) Validate() error {
	var errs []error
	bad := func(field string, v any, reason string) { errs = append(errs, &FieldError{field, v, reason}) }
	if !ValidName(p.Name) {
		bad("name", fmt.Sprintf("%q", p.Name), "must be "+NameRule)
	}
	if p.CapMarginPercent < 0 || p.CapMarginPercent > 1000 || math.IsNaN(p.CapMarginPercent) {
		bad("cap_margin_percent", p.CapMarginPercent, "must be between 0 and 1000")
	}
	if p.MaxTasksPerGPU < 1 || p.MaxTasksPerGPU > 64 {
		bad("max_tasks_per_gpu", p.MaxTasksPerGPU, "must be between 1 and 64")
	}
	if p.UnitBytes < 64*size.MiB || p.UnitBytes > 64*size.GiB {
		bad("unit", p.UnitBytes, "must be between 64MiB and 64GiB")
	}
	if p.HeadroomBytes > 1*size.TiB {
		bad("headroom", p.HeadroomBytes, "must be at most 1TiB")
	}
	if p.CapMarginBytes > 1*size.TiB {
		bad("cap_margin", p.CapMarginBytes, "must be at most 1TiB")
	}
	switch p.Mode {
	case ModeMPS, ModeIsolated:
	default:
		bad("mode", fmt.Sprintf("%q", p.Mode), `must be "mps" or "isolated"`)
	}
	if p.WatchdogInterval < 5*time.Millisecond || p.WatchdogInterval > time.Minute {
		bad("watchdog_interval", p.WatchdogInterval, "must be between 5ms and 1m")
	}
	switch p.Unmanaged {
	case UnmanagedReport, UnmanagedStop:
	default:
		bad("unmanaged", fmt.Sprintf("%q", p.Unmanaged), `must be "report" or "stop"`)
	}
	if !(p.SMBudgetPercent == 0 || (p.SMBudgetPercent >= 1 && p.SMBudgetPercent <= MaxSMBudgetPercent)) {
		bad("sm_budget_percent", p.SMBudgetPercent, fmt.Sprintf("must be 0 (off) or between 1 and %d", MaxSMBudgetPercent))
	}
	return errors.Join(errs...)
}

// Cap turns a measured peak into a hard cap: peak x (1 + margin%) + margin bytes, rounded up
// to a whole byte. This is the one place the cap formula lives.
func (p Policy) Cap(peak size.Bytes) size.Bytes {
	scaled := math.Ceil(float64(peak) * (1 + p.CapMarginPercent/100))
	// Past 2^64 the conversion has no uint64 to give and the sum wraps: a peak no GPU has (a
	// typo, a damaged profile) came out with a cap below it. The largest size says "more than
	// any GPU", which every admission refuses.
	if scaled >= 1<<64 {
		return math.MaxUint64
	}
	c := size.Bytes(scaled) + p.CapMarginBytes
	if c < p.CapMarginBytes {
		return math.MaxUint64
	}
	return c
}

// CapFormula writes Cap's formula for people, with peak standing for the peak: "peak x 1.15 +
// 1.5GB", or with a measured one, "12GiB x 1.15 + 1.5GB". Every output that explains a cap
// says it in these words, so they cannot drift from Cap.
func (p Policy) CapFormula(peak string) string {
	return fmt.Sprintf("%s x %.2f + %s", peak, 1+p.CapMarginPercent/100, p.CapMarginBytes.SI())
}

// Units is the number of memory units (Nomad device instances) that hold cap bytes.
func (p Policy) Units(capBytes size.Bytes) int {
	if p.UnitBytes == 0 {
		return 0
	}
	// Divided before rounding up, so a cap near the largest size does not wrap to few units.
	n := capBytes / p.UnitBytes
	if capBytes%p.UnitBytes != 0 {
		n++
	}
	return int(n)
}

// Granted is what the ledger grants for capBytes: its Units whole (the largest size where those
// pass it).
func (p Policy) Granted(capBytes size.Bytes) size.Bytes {
	g := size.Bytes(p.Units(capBytes)) * p.UnitBytes
	if p.UnitBytes != 0 && g < capBytes {
		return math.MaxUint64
	}
	return g
}

// Template is a kind of job with a measured footprint.
type Template struct {
	// Name identifies the template; it is the last segment of its Nomad Variable path.
	Name string `json:"name"`
	// Policy names the policy whose margins size this template's cap.
	Policy string `json:"policy"`
	// PeakBytes is the measured peak GPU memory of the whole job (all its processes).
	PeakBytes size.Bytes `json:"peak_bytes"`
	// CapOverrideBytes, when not zero, replaces the computed cap.
	CapOverrideBytes size.Bytes `json:"cap_override_bytes,omitempty"`
	// Description is free text for people.
	Description string `json:"description,omitempty"`
	// SMActivePercent is the percent of its run the job kept the SMs active alone on a GPU
	// (GPM SM_UTIL, measured by gpufrac probe): its compute demand for Policy.SMBudgetPercent.
	// nil is unknown (never measured, or the GPU had no performance monitor), which is not 0.
	SMActivePercent *float64 `json:"sm_active_percent,omitempty"`
}

// MaxSMBudgetPercent bounds Policy.SMBudgetPercent: 64 jobs (max_tasks_per_gpu's bound) that
// each keep the SMs fully active.
const MaxSMBudgetPercent = 6400

// CheckSMActive is nil when v is a percentage of SM-active time (0 to 100), else a FieldError
// naming field and v.
func CheckSMActive(field string, v float64) error {
	if !(v >= 0 && v <= 100) {
		return &FieldError{field, v, "must be a percentage from 0 to 100"}
	}
	return nil
}

// Validate returns every problem at once, each naming its field and value.
// MaxTemplateBytes bounds a template's peak and cap override, and any peak a cap is asked for.
const MaxTemplateBytes = 64 * size.TiB

func (t Template) Validate() error {
	var errs []error
	if !ValidName(t.Name) {
		errs = append(errs, &FieldError{"name", fmt.Sprintf("%q", t.Name), "must be " + NameRule})
	}
	if t.Policy != "" && !ValidName(t.Policy) {
		errs = append(errs, &FieldError{"policy", fmt.Sprintf("%q", t.Policy), "must be " + NameRule})
	}
	if t.PeakBytes == 0 && t.CapOverrideBytes == 0 {
		errs = append(errs, &FieldError{"peak", t.PeakBytes, "must be set (measure it with `gpufrac probe`) unless cap_override is"})
	}
	// No GPU holds 64TiB: past it a value is a typo (80TB for 80GB), not a footprint.
	if t.PeakBytes > MaxTemplateBytes {
		errs = append(errs, &FieldError{"peak", t.PeakBytes, "must be at most 64TiB"})
	}
	if t.CapOverrideBytes > MaxTemplateBytes {
		errs = append(errs, &FieldError{"cap_override", t.CapOverrideBytes, "must be at most 64TiB"})
	}
	if t.SMActivePercent != nil {
		if err := CheckSMActive("sm_active_percent", *t.SMActivePercent); err != nil {
			errs = append(errs, err)
		}
	}
	if len(t.Description) > 4096 {
		errs = append(errs, &FieldError{"description", fmt.Sprintf("(%d characters)", len(t.Description)), "must be at most 4096 characters"})
	}
	return errors.Join(errs...)
}

// Cap is the template's cap under p: the override when set, else p.Cap(peak).
func (t Template) Cap(p Policy) size.Bytes {
	if t.CapOverrideBytes != 0 {
		return t.CapOverrideBytes
	}
	return p.Cap(t.PeakBytes)
}

// Units is the number of memory units a Nomad job of this template must request under p.
func (t Template) Units(p Policy) int { return p.Units(t.Cap(p)) }
