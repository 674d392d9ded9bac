package provider

import (
	"context"
	"fmt"
	"maps"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpufrac/gpufrac/policy"
)

// templateModel is gpufrac_template in state and in the gpufrac_template data source.
type templateModel struct {
	ID               types.String  `tfsdk:"id"`
	Name             types.String  `tfsdk:"name"`
	Namespace        types.String  `tfsdk:"namespace"`
	Policy           types.String  `tfsdk:"policy"`
	Peak             types.String  `tfsdk:"peak"`
	PeakBytes        types.Int64   `tfsdk:"peak_bytes"`
	CapOverride      types.String  `tfsdk:"cap_override"`
	CapOverrideBytes types.Int64   `tfsdk:"cap_override_bytes"`
	Description      types.String  `tfsdk:"description"`
	SMActivePercent  types.Float64 `tfsdk:"sm_active_percent"`
	CapBytes         types.Int64   `tfsdk:"cap_bytes"`
	Cap              types.String  `tfsdk:"cap"`
	Units            types.Int64   `tfsdk:"units"`
	ModifyIndex      types.Int64   `tfsdk:"modify_index"`
	PolicySizing     types.Object  `tfsdk:"policy_sizing"`
}

// toTemplate converts known values to a policy.Template; unknown or unparsable values are left
// zero (validators report bad spellings; Validate reports what is missing).
func (m templateModel) toTemplate() policy.Template {
	t := policy.Template{Policy: policy.DefaultName}
	if known(m.Name) {
		t.Name = m.Name.ValueString()
	}
	if known(m.Policy) {
		t.Policy = m.Policy.ValueString()
	}
	if b, ok := knownSize(m.Peak); ok {
		t.PeakBytes = b
	}
	if b, ok := knownSize(m.CapOverride); ok {
		t.CapOverrideBytes = b
	}
	if known(m.Description) {
		t.Description = m.Description.ValueString()
	}
	if known(m.SMActivePercent) {
		v := m.SMActivePercent.ValueFloat64()
		t.SMActivePercent = &v
	}
	return t
}

// storesSameAs says whether m, planned, stores what prior does: the same items in the variable.
// Unknown values may store anything.
func (m templateModel) storesSameAs(prior templateModel) bool {
	for _, v := range []attr.Value{m.Name, m.Namespace, m.Policy, m.Peak, m.CapOverride, m.Description, m.SMActivePercent} {
		if v.IsUnknown() {
			return false
		}
	}
	if !m.Namespace.Equal(prior.Namespace) {
		return false
	}
	a, errA := policy.EncodeTemplate(m.toTemplate())
	b, errB := policy.EncodeTemplate(prior.toTemplate())
	return errA == nil && errB == nil && maps.Equal(a, b)
}

// validateTemplateConfig runs Template.Validate on configuration, skipping the "peak or
// cap_override must be set" rule while either is unknown (it may come from another resource).
func (m templateModel) validate() diag.Diagnostics {
	t := m.toTemplate()
	if m.Name.IsUnknown() {
		t.Name = "unknown"
	}
	if m.Policy.IsUnknown() {
		t.Policy = policy.DefaultName
	}
	if m.Peak.IsUnknown() || m.CapOverride.IsUnknown() {
		if t.PeakBytes == 0 && t.CapOverrideBytes == 0 {
			t.PeakBytes = 1
		}
	}
	// A size that did not parse is already reported by its validator; do not also call it missing.
	if known(m.Peak) && t.PeakBytes == 0 {
		if _, err := parseSize(m.Peak.ValueString()); err != nil {
			t.PeakBytes = 1
		}
	}
	if known(m.CapOverride) {
		if _, err := parseSize(m.CapOverride.ValueString()); err != nil && t.PeakBytes == 0 {
			t.PeakBytes = 1
		}
	}
	diags := validationDiags(t.Validate(), templateModel{})
	diags.Append(m.zeroCapOverride()...)
	return diags
}

// zeroCapOverride refuses cap_override = "0". The variable stores no override as 0, so a zero
// override would read back as unset: apply would fail with "inconsistent result" after writing.
func (m templateModel) zeroCapOverride() diag.Diagnostics {
	var diags diag.Diagnostics
	if b, ok := knownSize(m.CapOverride); ok && b == 0 {
		diags.AddAttributeError(pathCapOverride, "Invalid cap_override",
			fmt.Sprintf("cap_override = %q: must be more than 0 bytes; leave cap_override unset (null) to use the computed cap.",
				m.CapOverride.ValueString()))
	}
	return diags
}

// setFromTemplate writes a stored template into the model, keeping the spelling of sizes that
// mean the same bytes.
func (m *templateModel) setFromTemplate(t policy.Template, namespace string, modifyIndex uint64) {
	m.Name = types.StringValue(t.Name)
	m.Namespace = types.StringValue(namespace)
	m.ID = types.StringValue(objectID(t.Name, namespace))
	pol := t.Policy
	if pol == "" {
		pol = policy.DefaultName
	}
	m.Policy = types.StringValue(pol)
	if t.PeakBytes == 0 && m.Peak.IsNull() {
		m.PeakBytes = types.Int64Null()
	} else {
		m.Peak = keepSpelling(m.Peak, t.PeakBytes, parseSize, humanSize(t.PeakBytes))
		m.PeakBytes = types.Int64Value(int64(t.PeakBytes))
	}
	if t.CapOverrideBytes == 0 {
		m.CapOverride = types.StringNull()
		m.CapOverrideBytes = types.Int64Null()
	} else {
		m.CapOverride = keepSpelling(m.CapOverride, t.CapOverrideBytes, parseSize, humanSize(t.CapOverrideBytes))
		m.CapOverrideBytes = types.Int64Value(int64(t.CapOverrideBytes))
	}
	m.Description = types.StringValue(t.Description)
	// Absent is "never measured", which is not 0.
	m.SMActivePercent = types.Float64Null()
	if t.SMActivePercent != nil {
		m.SMActivePercent = types.Float64Value(*t.SMActivePercent)
	}
	m.ModifyIndex = types.Int64Value(int64(modifyIndex))
}

// setCap fills the cap and unit count of t under p: the same formula the plugin uses.
func (m *templateModel) setCap(t policy.Template, p policy.Policy) {
	c := t.Cap(p)
	m.CapBytes = types.Int64Value(int64(c))
	m.Cap = types.StringValue(c.String())
	m.Units = types.Int64Value(int64(t.Units(p)))
}

// refreshSizing records s, the sizing of the stored policy the cap and units were just computed
// from, as policy_sizing. A value state already holds that means the same is kept as it is: the
// number it holds came from state or configuration and need not be the float64 Nomad gives back
// (see semEqual), and replacing it would show a refresh that changed nothing as a change.
func (m *templateModel) refreshSizing(s sizing) {
	if o := s.object(); !semEqual(m.PolicySizing, o) {
		m.PolicySizing = o
	}
}

// lookupPolicy reads the policy a template names. A missing policy is an error that says how to
// order the two resources.
func lookupPolicy(ctx context.Context, c *client, namespace, name string, diags *diag.Diagnostics) (policy.Policy, bool) {
	p, _, err := c.store.GetPolicy(ctx, namespace, name)
	if isNotFound(err) {
		diags.AddAttributeError(pathPolicy, "Policy not found",
			fmt.Sprintf("The template names policy %q, but Nomad Variable %q does not exist in namespace %q. The "+
				"policy must exist before the template's units can be computed: declare a gpufrac_policy and refer "+
				"to it (policy = gpufrac_policy.<label>.name) so Terraform writes it first.",
				name, policy.PolicyPath(name), namespace))
		return policy.Policy{}, false
	}
	if err != nil {
		storeError(diags, "read", policyKind, namespace, name, err)
		return policy.Policy{}, false
	}
	return p, true
}
