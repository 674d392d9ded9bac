package provider

import (
	"context"
	"reflect"
	"testing"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// fullPolicy and fullTemplate set every field policy encodes, optional ones included.
func fullPolicy() policy.Policy {
	p := policy.Default()
	p.Name, p.SMBudgetPercent = "full", 150
	return p
}

func fullTemplate() policy.Template {
	sm := 55.5
	return policy.Template{Name: "full", Policy: "full", PeakBytes: 20 * size.GiB, CapOverrideBytes: 30 * size.GiB,
		Description: "every field", SMActivePercent: &sm}
}

// Every item the plugin reads must be an attribute of the resource and the data source: an
// item the provider does not model is invisible as drift and is erased by the next update.
func TestEveryStoredItemIsAnAttribute(t *testing.T) {
	pItems, err := policy.EncodePolicy(fullPolicy())
	if err != nil {
		t.Fatal(err)
	}
	tItems, err := policy.EncodeTemplate(fullTemplate())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := protoServer(t).GetProviderSchema(context.Background(), &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		items map[string]string
	}{
		{"gpufrac_policy", pItems},
		{"gpufrac_template", tItems},
	}
	for _, tt := range tests {
		for what, s := range map[string]*tfprotov6.Schema{"resource": resp.ResourceSchemas[tt.name], "data source": resp.DataSourceSchemas[tt.name]} {
			has := map[string]bool{}
			for _, a := range s.Block.Attributes {
				has[a.Name] = true
			}
			for k := range tt.items {
				if k != policy.KeySchemaVersion && !has[k] {
					t.Errorf("%s %s has no attribute for the stored item %q", tt.name, what, k)
				}
			}
		}
	}
}

// What Read puts in state, an update writes back unchanged: nothing stored is lost on the way.
func TestModelRoundTripKeepsEveryField(t *testing.T) {
	p := fullPolicy()
	var pm policyModel
	pm.setFromPolicy(p, "default", 1)
	if got := pm.toPolicy(); got != p {
		t.Errorf("policy through the model: %+v, want %+v", got, p)
	}
	tp := fullTemplate()
	var tm templateModel
	tm.setFromTemplate(tp, "default", 1)
	if got := tm.toTemplate(); !reflect.DeepEqual(got, tp) {
		t.Errorf("template through the model: %+v, want %+v", got, tp)
	}
	// Never measured stays unknown rather than becoming 0.
	tp.SMActivePercent = nil
	tm.setFromTemplate(tp, "default", 2)
	if got := tm.toTemplate(); got.SMActivePercent != nil {
		t.Errorf("an unmeasured template came back with sm_active_percent %v", *got.SMActivePercent)
	}
}
