package provider

import (
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// policyModel is gpufrac_policy in state and in the gpufrac_policy data source.
type policyModel struct {
	ID               types.String  `tfsdk:"id"`
	Name             types.String  `tfsdk:"name"`
	Namespace        types.String  `tfsdk:"namespace"`
	Headroom         types.String  `tfsdk:"headroom"`
	HeadroomBytes    types.Int64   `tfsdk:"headroom_bytes"`
	CapMarginPercent types.Float64 `tfsdk:"cap_margin_percent"`
	CapMargin        types.String  `tfsdk:"cap_margin"`
	CapMarginBytes   types.Int64   `tfsdk:"cap_margin_bytes"`
	MaxTasksPerGPU   types.Int64   `tfsdk:"max_tasks_per_gpu"`
	Unit             types.String  `tfsdk:"unit"`
	UnitBytes        types.Int64   `tfsdk:"unit_bytes"`
	Mode             types.String  `tfsdk:"mode"`
	WatchdogInterval types.String  `tfsdk:"watchdog_interval"`
	Unmanaged        types.String  `tfsdk:"unmanaged"`
	SMBudgetPercent  types.Float64 `tfsdk:"sm_budget_percent"`
	ModifyIndex      types.Int64   `tfsdk:"modify_index"`
	Sizing           types.Object  `tfsdk:"sizing"`
}

// policyDefaults are the schema defaults, taken from policy.Default() so the provider and the
// plugin cannot disagree about what an unset attribute means.
var policyDefaults = struct {
	Headroom, CapMargin, Unit, Watchdog, Mode, Unmanaged string
	CapMarginPercent, SMBudgetPercent                    float64
	MaxTasksPerGPU                                       int64
}{
	Headroom:         humanSize(policy.Default().HeadroomBytes),
	CapMargin:        humanSize(policy.Default().CapMarginBytes),
	Unit:             humanSize(policy.Default().UnitBytes),
	Watchdog:         policy.Default().WatchdogInterval.String(),
	Mode:             string(policy.Default().Mode),
	Unmanaged:        string(policy.Default().Unmanaged),
	CapMarginPercent: policy.Default().CapMarginPercent,
	SMBudgetPercent:  policy.Default().SMBudgetPercent,
	MaxTasksPerGPU:   int64(policy.Default().MaxTasksPerGPU),
}

// toPolicy converts known values to a policy.Policy. Null or unknown attributes take the
// default, so the result can be validated at plan time even when some values come from other
// resources; a default is always valid, so it never invents an error. Values that do not parse
// are reported by the attribute validators; here they become the default too.
func (m policyModel) toPolicy() policy.Policy {
	p := policy.Default()
	if known(m.Name) {
		p.Name = m.Name.ValueString()
	}
	if b, ok := knownSize(m.Headroom); ok {
		p.HeadroomBytes = b
	}
	if known(m.CapMarginPercent) {
		p.CapMarginPercent = m.CapMarginPercent.ValueFloat64()
	}
	if b, ok := knownSize(m.CapMargin); ok {
		p.CapMarginBytes = b
	}
	if known(m.MaxTasksPerGPU) {
		p.MaxTasksPerGPU = clampInt(m.MaxTasksPerGPU.ValueInt64())
	}
	if b, ok := knownSize(m.Unit); ok {
		p.UnitBytes = b
	}
	if known(m.Mode) {
		p.Mode = policy.Mode(m.Mode.ValueString())
	}
	if known(m.WatchdogInterval) {
		if d, err := parseDuration(m.WatchdogInterval.ValueString()); err == nil {
			p.WatchdogInterval = d
		}
	}
	if known(m.Unmanaged) {
		p.Unmanaged = policy.Unmanaged(m.Unmanaged.ValueString())
	}
	if known(m.SMBudgetPercent) {
		p.SMBudgetPercent = m.SMBudgetPercent.ValueFloat64()
	}
	return p
}

// setFromPolicy writes a stored policy into the model. The human forms keep the spelling the
// model already has when it means the same bytes, so a refresh never rewrites "1024MiB" into
// "1GiB"; a real change (made outside Terraform) shows its canonical spelling.
func (m *policyModel) setFromPolicy(p policy.Policy, namespace string, modifyIndex uint64) {
	m.Name = types.StringValue(p.Name)
	m.Namespace = types.StringValue(namespace)
	m.ID = types.StringValue(objectID(p.Name, namespace))
	m.Headroom = keepSpelling(m.Headroom, p.HeadroomBytes, parseSize, humanSize(p.HeadroomBytes))
	m.HeadroomBytes = types.Int64Value(int64(p.HeadroomBytes))
	m.CapMarginPercent = types.Float64Value(p.CapMarginPercent)
	m.CapMargin = keepSpelling(m.CapMargin, p.CapMarginBytes, parseSize, humanSize(p.CapMarginBytes))
	m.CapMarginBytes = types.Int64Value(int64(p.CapMarginBytes))
	m.MaxTasksPerGPU = types.Int64Value(int64(p.MaxTasksPerGPU))
	m.Unit = keepSpelling(m.Unit, p.UnitBytes, parseSize, humanSize(p.UnitBytes))
	m.UnitBytes = types.Int64Value(int64(p.UnitBytes))
	m.Mode = types.StringValue(string(p.Mode))
	m.WatchdogInterval = keepSpelling(m.WatchdogInterval, p.WatchdogInterval, parseDuration, p.WatchdogInterval.String())
	m.Unmanaged = types.StringValue(string(p.Unmanaged))
	m.SMBudgetPercent = types.Float64Value(p.SMBudgetPercent)
	m.ModifyIndex = types.Int64Value(int64(modifyIndex))
	m.Sizing = sizingOf(p, namespace).object()
}

// plannedSizing is the sizing object of a planned policy: known as soon as the values it holds
// are, which for a policy written in configuration is at plan time.
func (m policyModel) plannedSizing() types.Object {
	for _, v := range []attr.Value{m.Name, m.Namespace, m.Unit, m.CapMarginPercent, m.CapMargin} {
		if v.IsNull() || v.IsUnknown() {
			return types.ObjectUnknown(sizingAttrTypes)
		}
	}
	if _, err := parseSize(m.Unit.ValueString()); err != nil {
		return types.ObjectUnknown(sizingAttrTypes)
	}
	if _, err := parseSize(m.CapMargin.ValueString()); err != nil {
		return types.ObjectUnknown(sizingAttrTypes)
	}
	return sizingOf(m.toPolicy(), m.Namespace.ValueString()).object()
}

// validationDiags turns a policy/template Validate (or encode) error into one attribute
// diagnostic per field, each saying which value is wrong and what is allowed. model names the
// schema (a policyModel or templateModel); an item key such as "unit_bytes" lands on the
// attribute people write ("unit").
func validationDiags(err error, model any) diag.Diagnostics {
	var diags diag.Diagnostics
	if err == nil {
		return diags
	}
	attrs := attributeNames(model)
	fes := policy.FieldErrors(err)
	for _, fe := range fes {
		a := fe.Field
		// "unit_bytes" is computed; the value came from "unit".
		if h := strings.TrimSuffix(a, "_bytes"); h != a && attrs[h] {
			a = h
		}
		msg := fmt.Sprintf("%s = %v: %s.", a, fe.Value, fe.Reason)
		if attrs[a] {
			diags.AddAttributeError(path.Root(a), "Invalid "+a, msg)
		} else {
			diags.AddError("Invalid "+a, msg)
		}
	}
	if len(fes) == 0 {
		diags.AddError("Invalid configuration", err.Error())
	}
	return diags
}

// attributeNames lists a model's attribute names from its tfsdk tags.
func attributeNames(model any) map[string]bool {
	t := reflect.TypeOf(model)
	names := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		if tag := t.Field(i).Tag.Get("tfsdk"); tag != "" {
			names[tag] = true
		}
	}
	return names
}

// known says whether a configured value is there to read: neither null nor unknown at plan.
func known(v attr.Value) bool { return !v.IsNull() && !v.IsUnknown() }

func knownSize(v types.String) (size.Bytes, bool) {
	if !known(v) {
		return 0, false
	}
	b, err := parseSize(v.ValueString())
	return b, err == nil
}

// clampInt keeps an out-of-range int64 out of range after conversion to int, so validation
// still rejects it instead of wrapping around to something valid. Only values int cannot hold
// are clamped, so a validation error names the value as written wherever int is 64 bits.
func clampInt(v int64) int {
	switch {
	case v > math.MaxInt:
		return math.MaxInt
	case v < math.MinInt:
		return math.MinInt
	}
	return int(v)
}
