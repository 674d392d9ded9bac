package provider

import (
	"context"
	"math/big"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// These tests drive the provider through the plugin protocol in-process, as Terraform would,
// without any CLI: schema, plan-time validation and the units function.

func protoServer(t *testing.T) tfprotov6.ProviderServer {
	t.Helper()
	s, err := providerserver.NewProtocol6WithError(New("test")())()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSchemaIsValid(t *testing.T) {
	s := protoServer(t)
	resp, err := s.GetProviderSchema(context.Background(), &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range resp.Diagnostics {
		t.Errorf("schema diagnostic: %s: %s", d.Summary, d.Detail)
	}
	for _, name := range []string{"gpufrac_policy", "gpufrac_template"} {
		if resp.ResourceSchemas[name] == nil || resp.DataSourceSchemas[name] == nil {
			t.Errorf("%s: missing resource or data source schema", name)
		}
	}
	if resp.Functions["units"] == nil {
		t.Error("function units missing")
	}
	var sensitive bool
	for _, a := range resp.Provider.Block.Attributes {
		if a.Name == "token" {
			sensitive = a.Sensitive
		}
	}
	if !sensitive {
		t.Error("provider token is not sensitive")
	}
	// Resources and data sources share attribute names, so the same models serve both.
	for _, name := range []string{"gpufrac_policy", "gpufrac_template"} {
		r, d := attrNames(resp.ResourceSchemas[name]), attrNames(resp.DataSourceSchemas[name])
		if r != d {
			t.Errorf("%s: resource attributes %s, data source attributes %s", name, r, d)
		}
	}
}

func attrNames(s *tfprotov6.Schema) string {
	var names []string
	for _, a := range s.Block.Attributes {
		names = append(names, a.Name)
	}
	return strings.Join(names, ",")
}

// configValue builds a configuration object for typ from the given values; the rest are null.
func configValue(t *testing.T, s tfprotov6.ProviderServer, resource string, vals map[string]tftypes.Value) *tfprotov6.DynamicValue {
	t.Helper()
	resp, err := s.GetProviderSchema(context.Background(), &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	typ := resp.ResourceSchemas[resource].ValueType().(tftypes.Object)
	all := map[string]tftypes.Value{}
	for name, at := range typ.AttributeTypes {
		if v, ok := vals[name]; ok {
			all[name] = v
		} else {
			all[name] = tftypes.NewValue(at, nil)
		}
	}
	dv, err := tfprotov6.NewDynamicValue(typ, tftypes.NewValue(typ, all))
	if err != nil {
		t.Fatal(err)
	}
	return &dv
}

func tstr(s string) tftypes.Value          { return tftypes.NewValue(tftypes.String, s) }
func tnum(n float64) tftypes.Value         { return tftypes.NewValue(tftypes.Number, n) }
func unknown(t tftypes.Type) tftypes.Value { return tftypes.NewValue(t, tftypes.UnknownValue) }

func TestPlanTimeValidation(t *testing.T) {
	s := protoServer(t)
	tests := []struct {
		resource string
		vals     map[string]tftypes.Value
		want     []string // substrings, one per expected error; empty: valid
	}{
		{"gpufrac_policy", map[string]tftypes.Value{"name": tstr("main")}, nil},
		{"gpufrac_policy", map[string]tftypes.Value{"name": tstr("main"), "headroom": tstr("12 GiBs")},
			[]string{`invalid size "12 GiBs": unknown unit "GiBs"`}},
		{"gpufrac_policy", map[string]tftypes.Value{"name": tstr("main"), "mode": tstr("mig")},
			[]string{`mode = "mig": must be "mps" or "isolated"`}},
		{"gpufrac_policy", map[string]tftypes.Value{"name": tstr("main"), "max_tasks_per_gpu": tnum(0)},
			[]string{"max_tasks_per_gpu = 0: must be between 1 and 64"}},
		{"gpufrac_policy", map[string]tftypes.Value{"name": tstr("gpu.pool")},
			[]string{`name = "gpu.pool": must be 1-64 letters`}},
		{"gpufrac_policy", map[string]tftypes.Value{"name": tstr("main"), "unit": tstr("16MiB"), "watchdog_interval": tstr("soon")},
			[]string{"unit = 16MiB: must be between 64MiB and 64GiB", `"soon" is not a duration`}},
		{"gpufrac_policy", map[string]tftypes.Value{"name": unknown(tftypes.String), "headroom": unknown(tftypes.String)}, nil},
		{"gpufrac_policy", map[string]tftypes.Value{"name": tstr("main"), "namespace": tstr("a.b")},
			[]string{`namespace = "a.b"`}},
		{"gpufrac_template", map[string]tftypes.Value{"name": tstr("llama"), "peak": tstr("20GiB")}, nil},
		{"gpufrac_template", map[string]tftypes.Value{"name": tstr("llama")},
			[]string{"peak = 0B: must be set (measure it with `gpufrac probe`) unless cap_override is"}},
		{"gpufrac_template", map[string]tftypes.Value{"name": tstr("llama"), "peak": tstr("twenty gigs")},
			[]string{`invalid size "twenty gigs"`}},
		{"gpufrac_template", map[string]tftypes.Value{"name": tstr("llama"), "cap_override": tstr("8GiB")}, nil},
		{"gpufrac_template", map[string]tftypes.Value{"name": tstr("llama"), "peak": tstr("20GiB"), "cap_override": tstr("0")},
			[]string{`cap_override = "0": must be more than 0 bytes`}},
		{"gpufrac_template", map[string]tftypes.Value{"name": tstr("llama"), "peak": unknown(tftypes.String)}, nil},
	}
	for i, tt := range tests {
		resp, err := s.ValidateResourceConfig(context.Background(), &tfprotov6.ValidateResourceConfigRequest{
			TypeName: tt.resource, Config: configValue(t, s, tt.resource, tt.vals),
		})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range resp.Diagnostics {
			if d.Severity == tfprotov6.DiagnosticSeverityError {
				got = append(got, d.Summary+": "+d.Detail)
			}
		}
		if len(got) != len(tt.want) {
			t.Errorf("case %d (%s %v): got errors %q, want %d", i, tt.resource, tt.vals, got, len(tt.want))
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(strings.Join(got, "\n"), w) {
				t.Errorf("case %d: errors %q lack %q", i, got, w)
			}
		}
	}
}

func TestUnitsFunction(t *testing.T) {
	s := protoServer(t)
	call := func(args ...tftypes.Value) (*tfprotov6.CallFunctionResponse, error) {
		var dvs []*tfprotov6.DynamicValue
		for _, a := range args {
			dv, err := tfprotov6.NewDynamicValue(a.Type(), a)
			if err != nil {
				t.Fatal(err)
			}
			dvs = append(dvs, &dv)
		}
		return s.CallFunction(context.Background(), &tfprotov6.CallFunctionRequest{Name: "units", Arguments: dvs})
	}
	tests := []struct {
		peak, unit string
		pct        float64
		margin     string
		want       int64
		wantErr    string
		wantArg    int64 // index of the argument the error is attributed to
	}{
		{"20GiB", "1GiB", 15, "1.5GB", 25, "", 0}, // 20GiB x 1.15 + 1.5GB = 24.39GiB
		{"10GiB", "1GiB", 0, "0", 10, "", 0},      // exact fit
		{"10GiB", "512MiB", 0, "1", 21, "", 0},    // one byte over rounds up
		{"7GB", "2GiB", 20, "0", 4, "", 0},        // 8.4GB = 7.82GiB
		{"12 GiBs", "1GiB", 15, "1.5GB", 0, `peak: invalid size "12 GiBs"`, 0},
		{"1GiB", "1MiB", 15, "1.5GB", 0, "unit = 1MiB: must be between 64MiB and 64GiB", 1},
		{"1GiB", "1GiB", -5, "1.5GB", 0, "cap_margin_percent = -5", 2},
		{"1GiB", "1GiB", 15, "2TiB", 0, "cap_margin = 2TiB: must be at most 1TiB", 3},
		{"1GiB", "1GiB", 15, "lots", 0, `cap_margin: invalid size "lots"`, 3},
		{"65TiB", "1GiB", 15, "0", 0, "peak = 65TiB: must be at most 64TiB", 0},
		// Two bad arguments: both are named, and the error points at the first.
		{"1GiB", "1GiB", 2000, "2TiB", 0, "cap_margin = 2TiB", 2},
	}
	for _, tt := range tests {
		resp, err := call(tstr(tt.peak), tstr(tt.unit), tnum(tt.pct), tstr(tt.margin))
		if err != nil {
			t.Fatal(err)
		}
		if tt.wantErr != "" {
			if resp.Error == nil || !strings.Contains(resp.Error.Text, tt.wantErr) {
				t.Errorf("units(%s, %s, %g, %s) error = %v, want %q", tt.peak, tt.unit, tt.pct, tt.margin, resp.Error, tt.wantErr)
				continue
			}
			if a := resp.Error.FunctionArgument; a == nil || *a != tt.wantArg {
				t.Errorf("units(%s, %s, %g, %s) error %q is attributed to argument %v, want %d",
					tt.peak, tt.unit, tt.pct, tt.margin, resp.Error.Text, a, tt.wantArg)
			}
			continue
		}
		if resp.Error != nil {
			t.Fatalf("units(%s...) error: %s", tt.peak, resp.Error.Text)
		}
		v, err := resp.Result.Unmarshal(tftypes.Number)
		if err != nil {
			t.Fatal(err)
		}
		var bf big.Float
		if err := v.As(&bf); err != nil {
			t.Fatal(err)
		}
		got, acc := bf.Int64()
		if acc != big.Exact || got != tt.want {
			t.Errorf("units(%s, %s, %g, %s) = %v, want %d", tt.peak, tt.unit, tt.pct, tt.margin, got, tt.want)
		}
	}
}
