package provider

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// An all-defaults gpufrac_policy must be exactly policy.Default(): the plugin falls back to
// Default() when no policy is stored, and declaring one with no settings must change nothing.
func TestPolicyDefaultsMatchPolicyPackage(t *testing.T) {
	d := policyDefaults
	m := policyModel{
		Name:             types.StringValue(policy.DefaultName),
		Headroom:         types.StringValue(d.Headroom),
		CapMarginPercent: types.Float64Value(d.CapMarginPercent),
		CapMargin:        types.StringValue(d.CapMargin),
		MaxTasksPerGPU:   types.Int64Value(d.MaxTasksPerGPU),
		Unit:             types.StringValue(d.Unit),
		Mode:             types.StringValue(d.Mode),
		WatchdogInterval: types.StringValue(d.Watchdog),
		Unmanaged:        types.StringValue(d.Unmanaged),
	}
	if got := m.toPolicy(); got != policy.Default() {
		t.Fatalf("defaults give %+v, want policy.Default() %+v", got, policy.Default())
	}
	// The spellings the brief documents.
	if d.CapMargin != "1.5GB" || d.Unit != "1GiB" || d.Watchdog != "100ms" || d.CapMarginPercent != 15 || d.MaxTasksPerGPU != 6 {
		t.Errorf("documented defaults changed: %+v", d)
	}
}

func TestPolicyRoundTripKeepsSpellingAndBytes(t *testing.T) {
	m := policyModel{
		Name:             types.StringValue("training"),
		Headroom:         types.StringValue("4096MiB"),
		CapMarginPercent: types.Float64Value(12.5),
		CapMargin:        types.StringValue("2GB"),
		MaxTasksPerGPU:   types.Int64Value(4),
		Unit:             types.StringValue("512MiB"),
		Mode:             types.StringValue("mps"),
		WatchdogInterval: types.StringValue("0.25s"),
		Unmanaged:        types.StringValue("stop"),
	}
	p := m.toPolicy()
	want := policy.Policy{Name: "training", HeadroomBytes: 4 * size.GiB, CapMarginPercent: 12.5, CapMarginBytes: 2 * size.GB,
		MaxTasksPerGPU: 4, UnitBytes: 512 * size.MiB, Mode: policy.ModeMPS, WatchdogInterval: 250_000_000, Unmanaged: policy.UnmanagedStop}
	if p != want {
		t.Fatalf("toPolicy = %+v, want %+v", p, want)
	}
	// What the provider writes is exactly policy's encoding, and decodes to the same policy.
	items, err := policy.EncodePolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := policy.DecodePolicy(items)
	if err != nil || back != p {
		t.Fatalf("decode = %+v, %v", back, err)
	}
	m.setFromPolicy(back, "ml", 42)
	if m.Headroom.ValueString() != "4096MiB" || m.WatchdogInterval.ValueString() != "0.25s" {
		t.Errorf("spelling not kept: headroom %s, watchdog %s", m.Headroom, m.WatchdogInterval)
	}
	if m.HeadroomBytes.ValueInt64() != int64(4*size.GiB) || m.UnitBytes.ValueInt64() != int64(512*size.MiB) ||
		m.CapMarginBytes.ValueInt64() != 2e9 || m.ModifyIndex.ValueInt64() != 42 || m.ID.ValueString() != "training@ml" {
		t.Errorf("computed values wrong: %+v", m)
	}
	// A change made outside Terraform shows in canonical spelling.
	back.HeadroomBytes = 6 * size.GiB
	m.setFromPolicy(back, "ml", 43)
	if m.Headroom.ValueString() != "6GiB" {
		t.Errorf("drifted headroom shows as %s, want 6GiB", m.Headroom)
	}
}

func TestPolicyValidationDiagnostics(t *testing.T) {
	m := policyModel{
		Name:             types.StringValue("gpu.pool"),
		MaxTasksPerGPU:   types.Int64Value(0),
		Mode:             types.StringValue("mig"),
		Unit:             types.StringValue("1MiB"),
		CapMarginPercent: types.Float64Value(-1),
		WatchdogInterval: types.StringValue("1h"),
		Unmanaged:        types.StringValue("kill"),
		Headroom:         types.StringUnknown(), // from another resource: no false error
	}
	diags := validationDiags(m.toPolicy().Validate(), policyModel{})
	want := map[string]string{
		"name":               `name = "gpu.pool": must be 1-64 letters, digits, '-', '_' or '~'`,
		"max_tasks_per_gpu":  "max_tasks_per_gpu = 0: must be between 1 and 64",
		"mode":               `mode = "mig": must be "mps" or "isolated"`,
		"unit":               "unit = 1MiB: must be between 64MiB and 64GiB",
		"cap_margin_percent": "cap_margin_percent = -1: must be between 0 and 1000",
		"watchdog_interval":  "watchdog_interval = 1h0m0s: must be between 5ms and 1m",
		"unmanaged":          `unmanaged = "kill": must be "report" or "stop"`,
	}
	if len(diags) != len(want) {
		t.Fatalf("got %d diagnostics, want %d: %v", len(diags), len(want), diags)
	}
	for _, d := range diags {
		pd, ok := d.(interface {
			Path() interface{ String() string }
		})
		_ = pd
		_ = ok
		found := false
		for attr, msg := range want {
			if strings.HasPrefix(d.Detail(), msg) && d.Summary() == "Invalid "+attr {
				found = true
			}
		}
		if !found {
			t.Errorf("unexpected diagnostic %q: %q", d.Summary(), d.Detail())
		}
	}
	// Unknown values alone never produce an error.
	all := policyModel{Name: types.StringUnknown(), Headroom: types.StringUnknown(), Mode: types.StringUnknown(),
		MaxTasksPerGPU: types.Int64Unknown(), CapMarginPercent: types.Float64Unknown(), Unit: types.StringUnknown()}
	if d := validationDiags(all.toPolicy().Validate(), policyModel{}); d.HasError() {
		t.Errorf("unknown values produced errors: %v", d)
	}
}

func TestClampIntKeepsOutOfRangeInvalid(t *testing.T) {
	m := policyModel{Name: types.StringValue("x"), MaxTasksPerGPU: types.Int64Value(1<<32 + 3)}
	err := m.toPolicy().Validate()
	if !errors.Is(err, policy.ErrInvalid) {
		t.Errorf("max_tasks_per_gpu 2^32+3 passed validation (wrapped to a small int?)")
	}
	// The error names the value as written, where int can hold it.
	if strconv.IntSize == 64 && !strings.Contains(fmt.Sprint(err), "max_tasks_per_gpu = 4294967299:") {
		t.Errorf("error %q does not name the value written, 4294967299", err)
	}
}

func TestTemplateConversionAndCap(t *testing.T) {
	m := templateModel{
		Name:        types.StringValue("llama-7b"),
		Policy:      types.StringValue("training"),
		Peak:        types.StringValue("20GiB"),
		CapOverride: types.StringNull(),
		Description: types.StringNull(),
	}
	tp := m.toTemplate()
	if tp != (policy.Template{Name: "llama-7b", Policy: "training", PeakBytes: 20 * size.GiB}) {
		t.Fatalf("toTemplate = %+v", tp)
	}
	p := policy.Default()
	m.setFromTemplate(tp, "default", 7)
	m.setCap(tp, p)
	// 20GiB x 1.15 + 1.5GB = 26191716270 bytes -> 25 units of 1GiB.
	wantCap := p.Cap(20 * size.GiB)
	if m.CapBytes.ValueInt64() != int64(wantCap) || m.Units.ValueInt64() != int64(tp.Units(p)) || m.Units.ValueInt64() != 25 {
		t.Errorf("cap %s units %s, want %d and 25", m.CapBytes, m.Units, uint64(wantCap))
	}
	// No description reads as "", the schema's default: the variable cannot tell it from unset.
	if m.Cap.ValueString() != wantCap.String() || !m.CapOverride.IsNull() || m.Description != types.StringValue("") {
		t.Errorf("cap %s override %s description %s", m.Cap, m.CapOverride, m.Description)
	}
	// cap_override wins.
	tp.CapOverrideBytes = 8 * size.GiB
	m.setFromTemplate(tp, "default", 8)
	m.setCap(tp, p)
	if m.Units.ValueInt64() != 8 || m.CapOverride.ValueString() != "8GiB" {
		t.Errorf("override: units %s, cap_override %s", m.Units, m.CapOverride)
	}
}

func TestTemplateValidation(t *testing.T) {
	tests := []struct {
		m    templateModel
		want string
	}{
		{templateModel{Name: types.StringValue("x.y"), Peak: types.StringValue("1GiB")}, `name = "x.y"`},
		{templateModel{Name: types.StringValue("x")}, "peak = 0B: must be set"},
		{templateModel{Name: types.StringValue("x"), Peak: types.StringValue("1GiB"), Policy: types.StringValue("p.q")}, `policy = "p.q"`},
		{templateModel{Name: types.StringValue("x"), Peak: types.StringUnknown()}, ""},
		{templateModel{Name: types.StringValue("x"), Peak: types.StringValue("12 GiBs")}, ""}, // the size validator reports it
		{templateModel{Name: types.StringValue("x"), CapOverride: types.StringValue("4GiB")}, ""},
		// 0 is how the variable says "no override": it would read back as unset.
		{templateModel{Name: types.StringValue("x"), Peak: types.StringValue("1GiB"), CapOverride: types.StringValue("0")},
			`cap_override = "0": must be more than 0 bytes; leave cap_override unset`},
		{templateModel{Name: types.StringValue("x"), Peak: types.StringValue("1GiB"), CapOverride: types.StringValue("0 GiB")},
			`cap_override = "0 GiB": must be more than 0 bytes`},
		{templateModel{Name: types.StringValue("x"), CapOverride: types.StringValue("0")}, "peak = 0B: must be set"},
		{templateModel{Name: types.StringValue("x"), Peak: types.StringValue("1GiB"), CapOverride: types.StringUnknown()}, ""},
		{templateModel{Name: types.StringValue("x"), Peak: types.StringValue("1GiB"), SMActivePercent: types.Float64Value(150)},
			"sm_active_percent = 150: must be a percentage from 0 to 100"},
		{templateModel{Name: types.StringValue("x"), Peak: types.StringValue("1GiB"), Description: types.StringValue(strings.Repeat("d", 4097))}, "must be at most 4096 characters"},
	}
	for i, tt := range tests {
		diags := tt.m.validate()
		got := ""
		if diags.HasError() {
			got = diags.Errors()[0].Detail()
		}
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("case %d: got %q, want %q", i, got, tt.want)
		}
	}
}

// Errors from policy's encoder name item keys ("unit_bytes"); they must still land on the
// attribute people write.
func TestValidationDiagsMapsItemKeysToAttributes(t *testing.T) {
	p := policy.Default()
	p.UnitBytes = size.MiB
	_, err := policy.EncodePolicy(p)
	if err == nil {
		t.Fatal("EncodePolicy accepted a 1MiB unit")
	}
	diags := validationDiags(err, policyModel{})
	if len(diags) != 1 {
		t.Fatalf("got %v", diags)
	}
	d, ok := diags[0].(diag.DiagnosticWithPath)
	if !ok || !d.Path().Equal(path.Root("unit")) {
		t.Errorf("diagnostic %q not attached to unit: %#v", diags[0].Detail(), diags[0])
	}
	if !strings.Contains(d.Detail(), "must be between 64MiB and 64GiB") {
		t.Errorf("detail %q", d.Detail())
	}
	// A plain error still becomes a diagnostic.
	if d := validationDiags(errors.New("boom"), policyModel{}); len(d) != 1 || d[0].Detail() != "boom" {
		t.Errorf("plain error: %v", d)
	}
}

// A template plans a write only when what its variable holds changes: a new unit count, cap or
// policy_sizing, or a size spelt another way, stores the same items.
func TestTemplateStoresSameAs(t *testing.T) {
	sm := 40.0
	var prior templateModel
	prior.setFromTemplate(policy.Template{Name: "llama", Policy: "main", PeakBytes: 20 * size.GiB, Description: "d", SMActivePercent: &sm}, "default", 7)
	prior.setCap(policy.Template{Name: "llama", Policy: "main", PeakBytes: 20 * size.GiB}, policy.Default())
	tests := []struct {
		name string
		mut  func(*templateModel)
		same bool
	}{
		{"unchanged", func(*templateModel) {}, true},
		{"units, cap and policy_sizing", func(m *templateModel) {
			m.Units, m.CapBytes, m.Cap = types.Int64Value(49), types.Int64Unknown(), types.StringUnknown()
			m.PolicySizing = sizingOf(policy.Default(), "default").object()
		}, true},
		{"peak spelt another way", func(m *templateModel) { m.Peak = types.StringValue("20480MiB") }, true},
		{"peak", func(m *templateModel) { m.Peak = types.StringValue("24GiB") }, false},
		{"peak unknown", func(m *templateModel) { m.Peak = types.StringUnknown() }, false},
		{"cap_override", func(m *templateModel) { m.CapOverride = types.StringValue("8GiB") }, false},
		{"description", func(m *templateModel) { m.Description = types.StringValue("e") }, false},
		{"sm_active_percent", func(m *templateModel) { m.SMActivePercent = types.Float64Null() }, false},
		{"policy", func(m *templateModel) { m.Policy = types.StringValue("other") }, false},
	}
	for _, tt := range tests {
		m := prior
		tt.mut(&m)
		if got := m.storesSameAs(prior); got != tt.same {
			t.Errorf("%s: storesSameAs = %v, want %v", tt.name, got, tt.same)
		}
	}
}
