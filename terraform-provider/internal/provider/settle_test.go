package provider

import (
	"context"
	"math/big"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/gpufrac/gpufrac/policy"
)

// stateFloat is a number as the framework reads it back from state: the decimal Terraform
// stored, at arbitrary precision, not the float64 nearest to it.
func stateFloat(t *testing.T, decimal string) types.Float64 {
	t.Helper()
	f, _, err := big.ParseFloat(decimal, 10, 512, big.ToNearestEven)
	if err != nil {
		t.Fatal(err)
	}
	v, err := types.Float64Type.ValueFromTerraform(context.Background(), tftypes.NewValue(tftypes.Number, f))
	if err != nil {
		t.Fatal(err)
	}
	return v.(types.Float64)
}

// An unchanged policy plans no write, whatever precision its numbers come back from state
// with; a changed one plans a write.
func TestSettleModifyIndexComparesNumbersAsFloat64(t *testing.T) {
	tests := []struct {
		name        string
		statePct    string  // cap_margin_percent as state holds it, in the prior sizing
		plannedPct  float64 // cap_margin_percent as configured
		wantUnknown bool
	}{
		{"binary-exact number", "12.5", 12.5, false},
		{"decimal number with no exact float64", "12.3", 12.3, false},
		{"changed", "12.3", 12.4, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := policy.Default()
			p.Name = "main"
			p.CapMarginPercent = tt.plannedPct
			var planned policyModel
			planned.setFromPolicy(p, "default", 7)
			prior := planned
			attrs := prior.Sizing.Attributes()
			attrs["cap_margin_percent"] = stateFloat(t, tt.statePct)
			prior.Sizing = types.ObjectValueMust(sizingAttrTypes, attrs)
			prior.CapMarginPercent = stateFloat(t, tt.statePct)
			planned.ModifyIndex = types.Int64Unknown()

			settleModifyIndex(&planned, &prior, func(x *policyModel) *types.Int64 { return &x.ModifyIndex }, modelsEqual[policyModel])
			if got := planned.ModifyIndex.IsUnknown(); got != tt.wantUnknown {
				t.Errorf("planned modify_index %s: unknown = %v, want %v (unknown plans a write)", planned.ModifyIndex, got, tt.wantUnknown)
			}
		})
	}
}
