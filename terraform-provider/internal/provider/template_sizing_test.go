package provider

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/storetest"
	"github.com/gpufrac/gpufrac/size"
)

// templateOnStore is a template resource whose store is a Variables server holding pol and a
// 20GiB template "llama" naming it, as someone wrote them outside Terraform.
func templateOnStore(t *testing.T, pol policy.Policy) (*templateResource, tfsdk.State) {
	t.Helper()
	s := varserver.New(varserver.Options{})
	t.Cleanup(s.Close)
	s.Put("default", policy.PolicyPath(pol.Name), storetest.EncodePolicy(t, pol))
	items, err := policy.EncodeTemplate(policy.Template{Name: "llama", Policy: pol.Name, PeakBytes: 20 * size.GiB})
	if err != nil {
		t.Fatal(err)
	}
	s.Put("default", policy.TemplatePath("llama"), items)
	st, err := newNomadStore(storeConfig{Address: s.URL(), Namespace: "default", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := &templateResource{client: &client{store: st}}
	var sr resource.SchemaResponse
	r.Schema(context.Background(), resource.SchemaRequest{}, &sr)
	if sr.Diagnostics.HasError() {
		t.Fatal(sr.Diagnostics)
	}
	return r, tfsdk.State{Schema: sr.Schema, Raw: tftypes.NewValue(sr.Schema.Type().TerraformType(context.Background()), nil)}
}

func noErrors(t *testing.T, what string, d diag.Diagnostics) {
	t.Helper()
	if d.HasError() {
		t.Fatalf("%s: %v", what, d)
	}
}

// raw is m as a value of empty's schema, for a configuration or a plan.
func raw(t *testing.T, empty tfsdk.State, m *templateModel) tftypes.Value {
	t.Helper()
	st := empty
	noErrors(t, "value of the schema", st.Set(context.Background(), m))
	return st.Raw
}

// importAndRead is `terraform import gpufrac_template.x llama@default`: the import sets the
// identity and Read fills the rest from Nomad.
func importAndRead(t *testing.T, r *templateResource, empty tfsdk.State) tfsdk.State {
	t.Helper()
	ctx := context.Background()
	imp := resource.ImportStateResponse{State: empty}
	r.ImportState(ctx, resource.ImportStateRequest{ID: "llama@default"}, &imp)
	noErrors(t, "import", imp.Diagnostics)
	read := resource.ReadResponse{State: imp.State}
	r.Read(ctx, resource.ReadRequest{State: imp.State}, &read)
	noErrors(t, "read", read.Diagnostics)
	return read.State
}

// Right after an import, a configuration that passes the stored policy's sizing plans the state
// as it is, and so does one that leaves the sizing out. The configured sizing holds its margin
// as the policy's state does, the decimal Terraform wrote, which is not the float64 Nomad gives
// back for 12.3: the same value all the same.
func TestTemplateImportThenPlanKeepsState(t *testing.T) {
	ctx := context.Background()
	for _, pct := range []string{"15", "12.3"} {
		for _, configured := range []bool{true, false} {
			pol := withPolicy(func(p *policy.Policy) { p.CapMarginPercent = stateFloat(t, pct).ValueFloat64() })
			r, empty := templateOnStore(t, pol)
			prior := importAndRead(t, r, empty)
			var m templateModel
			noErrors(t, "state", prior.Get(ctx, &m))
			if want := sizingOf(pol, "default").object(); !semEqual(m.PolicySizing, want) {
				t.Fatalf("margin %s: imported policy_sizing %s, want the stored policy's %s", pct, m.PolicySizing, want)
			}

			// The configuration, and the plan Terraform proposes from it: where it differs from
			// the prior state, the framework has made every computed attribute left unset unknown.
			cfg := templateModel{
				Name: types.StringValue("llama"), Policy: types.StringValue("main"), Peak: types.StringValue("20GiB"),
				Namespace: types.StringNull(), PolicySizing: types.ObjectNull(sizingAttrTypes),
			}
			proposed := m
			if configured {
				attrs := sizingOf(pol, "default").object().Attributes()
				attrs["cap_margin_percent"] = stateFloat(t, pct)
				cfg.PolicySizing = types.ObjectValueMust(sizingAttrTypes, attrs)
				proposed.PolicySizing = cfg.PolicySizing
				if !proposed.PolicySizing.Equal(m.PolicySizing) {
					proposed.CapBytes, proposed.Cap, proposed.Units = types.Int64Unknown(), types.StringUnknown(), types.Int64Unknown()
					proposed.ModifyIndex = types.Int64Unknown()
				}
			}
			config := tfsdk.Config{Schema: prior.Schema, Raw: raw(t, empty, &cfg)}
			plan := tfsdk.Plan{Schema: prior.Schema, Raw: raw(t, empty, &proposed)}

			resp := resource.ModifyPlanResponse{Plan: plan}
			r.ModifyPlan(ctx, resource.ModifyPlanRequest{Config: config, Plan: plan, State: prior}, &resp)
			noErrors(t, "plan", resp.Diagnostics)
			if !resp.Plan.Raw.Equal(prior.Raw) {
				t.Errorf("margin %s, policy_sizing configured %v: plan after import\n%s\nwant the imported state\n%s",
					pct, configured, resp.Plan.Raw, prior.Raw)
			}
		}
	}
}

// A refresh keeps a sizing state holds when the stored policy's means the same, so a margin
// with no exact float64 does not show as a change, and takes the stored one otherwise.
func TestTemplateRefreshSizing(t *testing.T) {
	pol := withPolicy(func(p *policy.Policy) { p.CapMarginPercent = 12.3 })
	fromState := func(pct string) types.Object {
		attrs := sizingOf(pol, "default").object().Attributes()
		attrs["cap_margin_percent"] = stateFloat(t, pct)
		return types.ObjectValueMust(sizingAttrTypes, attrs)
	}
	stored := sizingOf(pol, "default").object()
	tests := []struct {
		name        string
		state, want types.Object
	}{
		{"none (an import)", types.ObjectNull(sizingAttrTypes), stored},
		{"the same value", fromState("12.3"), fromState("12.3")},
		{"another margin", fromState("12.4"), stored},
	}
	for _, tt := range tests {
		m := templateModel{PolicySizing: tt.state}
		m.refreshSizing(sizingOf(pol, "default"))
		// Equal, not semEqual: the kept value must be the very one state held.
		if !m.PolicySizing.Equal(tt.want) {
			t.Errorf("%s: policy_sizing %s, want %s", tt.name, m.PolicySizing, tt.want)
		}
	}
}
