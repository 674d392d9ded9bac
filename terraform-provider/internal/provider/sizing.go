package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// A policy's sizing is the part of it a template's cap and units depend on, with the policy's
// name and namespace, as one object. A template that sets policy_sizing = gpufrac_policy.x.sizing
// gets its units computed in the plan, from values Terraform already knows, so a policy change
// and the units a job spec takes from the template land in the same plan; without the
// reference, nothing in the template's configuration changes when the policy does, and
// Terraform cannot know the template's units are about to change.
var sizingAttrTypes = map[string]attr.Type{
	"name":               types.StringType,
	"namespace":          types.StringType,
	"unit_bytes":         types.Int64Type,
	"cap_margin_percent": types.Float64Type,
	"cap_margin_bytes":   types.Int64Type,
}

// sizing is the Go form of the object.
type sizing struct {
	Name, Namespace  string
	UnitBytes        size.Bytes
	CapMarginPercent float64
	CapMarginBytes   size.Bytes
}

func sizingOf(p policy.Policy, namespace string) sizing {
	return sizing{Name: p.Name, Namespace: namespace, UnitBytes: p.UnitBytes,
		CapMarginPercent: p.CapMarginPercent, CapMarginBytes: p.CapMarginBytes}
}

// apply puts the sizing into a policy; the rest of p is not used to size a template.
func (s sizing) apply(p policy.Policy) policy.Policy {
	p.Name, p.UnitBytes, p.CapMarginPercent, p.CapMarginBytes = s.Name, s.UnitBytes, s.CapMarginPercent, s.CapMarginBytes
	return p
}

func (s sizing) String() string {
	return fmt.Sprintf("policy %q in namespace %q with unit %s, cap_margin_percent %g, cap_margin %s",
		s.Name, s.Namespace, s.UnitBytes, s.CapMarginPercent, s.CapMarginBytes)
}

func (s sizing) object() types.Object {
	return types.ObjectValueMust(sizingAttrTypes, map[string]attr.Value{
		"name":               types.StringValue(s.Name),
		"namespace":          types.StringValue(s.Namespace),
		"unit_bytes":         types.Int64Value(int64(s.UnitBytes)),
		"cap_margin_percent": types.Float64Value(s.CapMarginPercent),
		"cap_margin_bytes":   types.Int64Value(int64(s.CapMarginBytes)),
	})
}

// sizingFrom reads the object; ok is false while it (or any part of it) is null or unknown.
func sizingFrom(ctx context.Context, o types.Object) (sizing, bool, diag.Diagnostics) {
	if o.IsNull() || o.IsUnknown() {
		return sizing{}, false, nil
	}
	var v struct {
		Name             types.String  `tfsdk:"name"`
		Namespace        types.String  `tfsdk:"namespace"`
		UnitBytes        types.Int64   `tfsdk:"unit_bytes"`
		CapMarginPercent types.Float64 `tfsdk:"cap_margin_percent"`
		CapMarginBytes   types.Int64   `tfsdk:"cap_margin_bytes"`
	}
	diags := o.As(ctx, &v, basetypes.ObjectAsOptions{})
	if diags.HasError() {
		return sizing{}, false, diags
	}
	for _, a := range []attr.Value{v.Name, v.Namespace, v.UnitBytes, v.CapMarginPercent, v.CapMarginBytes} {
		if a.IsNull() || a.IsUnknown() {
			return sizing{}, false, diags
		}
	}
	if v.UnitBytes.ValueInt64() <= 0 || v.CapMarginBytes.ValueInt64() < 0 {
		diags.AddAttributeError(pathPolicySizing, "Invalid policy_sizing",
			fmt.Sprintf("policy_sizing has unit_bytes = %d and cap_margin_bytes = %d: set it to gpufrac_policy.<label>.sizing "+
				"rather than writing it by hand.", v.UnitBytes.ValueInt64(), v.CapMarginBytes.ValueInt64()))
		return sizing{}, false, diags
	}
	return sizing{
		Name: v.Name.ValueString(), Namespace: v.Namespace.ValueString(),
		UnitBytes:        size.Bytes(v.UnitBytes.ValueInt64()),
		CapMarginPercent: v.CapMarginPercent.ValueFloat64(),
		CapMarginBytes:   size.Bytes(v.CapMarginBytes.ValueInt64()),
	}, true, diags
}

const sizingDoc = "What a template's cap and units depend on: `name`, `namespace`, `unit_bytes`, " +
	"`cap_margin_percent` and `cap_margin_bytes`. Known at plan time. Pass it to a template's `policy_sizing` " +
	"so the template's `units` follow a change of this policy in the same plan."
