package policy

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// Variable paths. Everything gpufrac stores lives under its own root, never under "nomad/"
// (reserved by Nomad; nomad/job-templates is the Nomad UI's own store).
const (
	// PolicyPathPrefix is the Nomad Variable path prefix of every policy.
	PolicyPathPrefix = "gpufrac/policy/"
	// TemplatePathPrefix is the Nomad Variable path prefix of every template.
	TemplatePathPrefix = "gpufrac/templates/"
)

// PolicyPath is the Nomad Variable path of the named policy.
func PolicyPath(name string) string { return PolicyPathPrefix + name }

// TemplatePath is the Nomad Variable path of the named template.
func TemplatePath(name string) string { return TemplatePathPrefix + name }

// SchemaVersion is the item encoding this build writes and the newest it reads.
const SchemaVersion = 1

// MaxItemsBytes is Nomad's fixed limit on one variable: the sum of len(key)+len(value) over
// all items.
const MaxItemsBytes = 64 * 1024

// Item keys. They match the Terraform provider's attribute names one for one.
const (
	KeySchemaVersion    = "schema_version"
	KeyName             = "name"
	KeyHeadroomBytes    = "headroom_bytes"
	KeyCapMarginPercent = "cap_margin_percent"
	KeyCapMarginBytes   = "cap_margin_bytes"
	KeyMaxTasksPerGPU   = "max_tasks_per_gpu"
	KeyUnitBytes        = "unit_bytes"
	KeyMode             = "mode"
	KeyWatchdogInterval = "watchdog_interval"
	KeyUnmanaged        = "unmanaged"
	KeyPolicy           = "policy"
	KeyPeakBytes        = "peak_bytes"
	KeyCapOverrideBytes = "cap_override_bytes"
	KeyDescription      = "description"
	KeySMBudgetPercent  = "sm_budget_percent"
	KeySMActivePercent  = "sm_active_percent"
)

// ErrSchemaTooNew is wrapped when items were written by a newer gpufrac.
var ErrSchemaTooNew = errors.New("schema version too new")

// ErrTooLarge is wrapped when encoded items exceed MaxItemsBytes.
var ErrTooLarge = errors.New("variables are limited to 64KiB in total size")

// ItemsSize is the size Nomad counts against MaxItemsBytes.
func ItemsSize(items map[string]string) int {
	n := 0
	for k, v := range items {
		n += len(k) + len(v)
	}
	return n
}

// EncodePolicy validates p and returns its Nomad Variable items. Every field is written, so
// decoding never depends on this build's defaults.
func EncodePolicy(p Policy) (map[string]string, error) {
	if err := p.Validate(); err != nil {
		return nil, withItemKeys(err)
	}
	items := map[string]string{
		KeySchemaVersion:    strconv.Itoa(SchemaVersion),
		KeyName:             p.Name,
		KeyHeadroomBytes:    formatBytes(p.HeadroomBytes),
		KeyCapMarginPercent: strconv.FormatFloat(p.CapMarginPercent, 'f', -1, 64),
		KeyCapMarginBytes:   formatBytes(p.CapMarginBytes),
		KeyMaxTasksPerGPU:   strconv.Itoa(p.MaxTasksPerGPU),
		KeyUnitBytes:        formatBytes(p.UnitBytes),
		KeyMode:             string(p.Mode),
		KeyWatchdogInterval: p.WatchdogInterval.String(),
		KeyUnmanaged:        string(p.Unmanaged),
	}
	// Off is left out, so policies written before the budget existed read and compare alike.
	if p.SMBudgetPercent != 0 {
		items[KeySMBudgetPercent] = strconv.FormatFloat(p.SMBudgetPercent, 'f', -1, 64)
	}
	return items, checkSize(items)
}

// EncodeTemplate validates t and returns its Nomad Variable items. Optional items are left out
// when empty, so hand-written and encoded variables look alike.
func EncodeTemplate(t Template) (map[string]string, error) {
	if err := t.Validate(); err != nil {
		return nil, withItemKeys(err)
	}
	items := map[string]string{
		KeySchemaVersion: strconv.Itoa(SchemaVersion),
		KeyName:          t.Name,
		KeyPolicy:        t.Policy,
		KeyPeakBytes:     formatBytes(t.PeakBytes),
	}
	if t.CapOverrideBytes != 0 {
		items[KeyCapOverrideBytes] = formatBytes(t.CapOverrideBytes)
	}
	if t.Description != "" {
		items[KeyDescription] = t.Description
	}
	if t.SMActivePercent != nil {
		items[KeySMActivePercent] = strconv.FormatFloat(*t.SMActivePercent, 'f', -1, 64)
	}
	return items, checkSize(items)
}

var (
	policyKeys = keySet{
		required: []string{KeySchemaVersion, KeyName, KeyHeadroomBytes, KeyCapMarginPercent, KeyCapMarginBytes,
			KeyMaxTasksPerGPU, KeyUnitBytes, KeyMode, KeyWatchdogInterval, KeyUnmanaged},
		optional: []string{KeySMBudgetPercent},
	}
	templateKeys = keySet{
		required: []string{KeySchemaVersion, KeyName, KeyPolicy, KeyPeakBytes},
		optional: []string{KeyCapOverrideBytes, KeyDescription, KeySMActivePercent},
	}
)

// DecodePolicy reads policy items written by EncodePolicy (or by hand with the same keys).
// It rejects newer schema versions, missing items, unknown keys and bad numbers, naming each,
// and then runs Validate. Every error wraps ErrInvalid; FieldErrors splits it into parts whose
// Field is the item key.
func DecodePolicy(items map[string]string) (Policy, error) {
	if err := policyKeys.check(items); err != nil {
		return Policy{}, err
	}
	d := decoder{items: items}
	p := Policy{
		Name:             items[KeyName],
		HeadroomBytes:    d.bytes(KeyHeadroomBytes),
		CapMarginPercent: d.float(KeyCapMarginPercent),
		CapMarginBytes:   d.bytes(KeyCapMarginBytes),
		MaxTasksPerGPU:   d.int(KeyMaxTasksPerGPU),
		UnitBytes:        d.bytes(KeyUnitBytes),
		Mode:             Mode(items[KeyMode]),
		WatchdogInterval: d.duration(KeyWatchdogInterval),
		Unmanaged:        Unmanaged(items[KeyUnmanaged]),
	}
	if _, ok := items[KeySMBudgetPercent]; ok {
		p.SMBudgetPercent = d.float(KeySMBudgetPercent)
	}
	if err := errors.Join(d.errs...); err != nil {
		return Policy{}, err
	}
	if err := p.Validate(); err != nil {
		return Policy{}, withItemKeys(err)
	}
	return p, nil
}

// DecodeTemplate reads template items written by EncodeTemplate, with the same checks as
// DecodePolicy. An empty "policy" item means the default policy.
func DecodeTemplate(items map[string]string) (Template, error) {
	if err := templateKeys.check(items); err != nil {
		return Template{}, err
	}
	d := decoder{items: items}
	t := Template{
		Name:        items[KeyName],
		Policy:      items[KeyPolicy],
		PeakBytes:   d.bytes(KeyPeakBytes),
		Description: items[KeyDescription],
	}
	if _, ok := items[KeyCapOverrideBytes]; ok {
		t.CapOverrideBytes = d.bytes(KeyCapOverrideBytes)
	}
	if _, ok := items[KeySMActivePercent]; ok {
		v := d.float(KeySMActivePercent)
		t.SMActivePercent = &v
	}
	if err := errors.Join(d.errs...); err != nil {
		return Template{}, err
	}
	if err := t.Validate(); err != nil {
		return Template{}, withItemKeys(err)
	}
	return t, nil
}

type keySet struct{ required, optional []string }

// check looks at the schema version first: a newer writer may have renamed or added keys, and
// "upgrade gpufrac" is more useful than a list of unknown keys.
func (ks keySet) check(items map[string]string) error {
	if len(items) == 0 {
		return &FieldError{Field: "items", Value: "{}", Reason: "no items: not a gpufrac variable"}
	}
	raw, ok := items[KeySchemaVersion]
	if !ok {
		return &FieldError{Field: KeySchemaVersion, Value: "(missing)", Reason: "required item is missing: not written by gpufrac?"}
	}
	v, err := strconv.ParseUint(raw, 10, 32)
	if err != nil || v == 0 {
		return &FieldError{Field: KeySchemaVersion, Value: strconv.Quote(raw), Reason: "must be a positive integer"}
	}
	if v > SchemaVersion {
		return fmt.Errorf("%w: schema_version %q is newer than this gpufrac understands (%d): upgrade gpufrac: %w",
			ErrInvalid, raw, SchemaVersion, ErrSchemaTooNew)
	}
	var errs []error
	for _, k := range ks.required {
		if _, ok := items[k]; !ok {
			errs = append(errs, &FieldError{Field: k, Value: "(missing)", Reason: "required item is missing"})
		}
	}
	known := make(map[string]bool, len(ks.required)+len(ks.optional))
	for _, k := range ks.required {
		known[k] = true
	}
	for _, k := range ks.optional {
		known[k] = true
	}
	var unknown []string
	for k := range items {
		if !known[k] {
			unknown = append(unknown, strconv.Quote(k))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		errs = append(errs, &FieldError{Field: "items", Value: strings.Join(unknown, ", "),
			Reason: "unknown item key(s); known: " + strings.Join(append(append([]string{}, ks.required...), ks.optional...), ", ")})
	}
	return errors.Join(errs...)
}

// decoder collects every parse error so one decode reports them all.
type decoder struct {
	items map[string]string
	errs  []error
}

func (d *decoder) fail(key, reason string) {
	d.errs = append(d.errs, &FieldError{Field: key, Value: strconv.Quote(d.items[key]), Reason: reason})
}

// bytes accepts only a base-10 byte count: the encoding is exact, and "2GiB" here would mean
// someone bypassed the provider.
func (d *decoder) bytes(key string) size.Bytes {
	v, err := strconv.ParseUint(d.items[key], 10, 64)
	if err != nil {
		d.fail(key, "must be a whole number of bytes in base 10 (e.g. 2147483648)")
		return 0
	}
	return size.Bytes(v)
}

func (d *decoder) int(key string) int {
	v, err := strconv.ParseInt(d.items[key], 10, 32)
	if err != nil {
		d.fail(key, "must be a base-10 integer")
		return 0
	}
	return int(v)
}

func (d *decoder) float(key string) float64 {
	s := d.items[key]
	v, err := strconv.ParseFloat(s, 64)
	// ParseFloat accepts "NaN", "Inf" and hex floats; none is a percentage a person writes.
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || strings.ContainsAny(s, "xXpP_") {
		d.fail(key, "must be a decimal number (e.g. 15 or 12.5)")
		return 0
	}
	return v
}

func (d *decoder) duration(key string) time.Duration {
	v, err := time.ParseDuration(d.items[key])
	if err != nil {
		d.fail(key, `must be a Go duration (e.g. "100ms", "1s")`)
		return 0
	}
	return v
}

func formatBytes(b size.Bytes) string { return strconv.FormatUint(uint64(b), 10) }

func checkSize(items map[string]string) error {
	if n := ItemsSize(items); n > MaxItemsBytes {
		return fmt.Errorf("%w: encoded items are %d bytes, limit %d: %w", ErrInvalid, n, MaxItemsBytes, ErrTooLarge)
	}
	return nil
}
