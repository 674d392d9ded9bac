package provider

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/gpufrac/gpufrac/size"
)

func TestHumanSizeIsExactAndReadable(t *testing.T) {
	tests := []struct {
		in   size.Bytes
		want string
	}{
		{2 * size.GiB, "2GiB"},
		{1536 * size.MiB, "1.5GiB"},
		{1500 * size.MB, "1.5GB"}, // 1.4GiB would be a rounding: SI is exact
		{64 * size.MiB, "64MiB"},
		{1, "1B"},
		{1500000001, "1500000001"}, // neither IEC nor SI is exact
		{0, "0B"},
	}
	for _, tt := range tests {
		got := humanSize(tt.in)
		if got != tt.want {
			t.Errorf("humanSize(%d) = %q, want %q", uint64(tt.in), got, tt.want)
		}
		back, err := size.Parse(got)
		if err != nil || back != tt.in {
			t.Errorf("humanSize(%d) = %q reads back as %d, %v", uint64(tt.in), got, uint64(back), err)
		}
	}
}

func TestParseSizeErrorsSayHowToFix(t *testing.T) {
	for _, in := range []string{"12 GiBs", "", "GiB", "1.2.3GB", "99999999999PiB"} {
		_, err := parseSize(in)
		if err == nil {
			t.Fatalf("parseSize(%q) = nil error", in)
		}
		if !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("parseSize(%q) error does not name the input: %v", in, err)
		}
	}
	_, err := parseSize("12 GiBs")
	if !strings.Contains(err.Error(), `e.g. "4GiB"`) {
		t.Errorf("error gives no example of a good size: %v", err)
	}
	// The one size parser the CLI, queue files and the plugin use says what is wrong.
	for in, want := range map[string]string{"-1GiB": "negative", "1.5": "a fraction of a byte"} {
		if _, err := parseSize(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseSize(%q) = %v, want an error saying %q", in, err, want)
		}
	}
}

func TestKeepSpelling(t *testing.T) {
	tests := []struct {
		prior types.String
		bytes size.Bytes
		want  string
	}{
		{types.StringValue("1024MiB"), size.GiB, "1024MiB"},  // same bytes: keep the user's spelling
		{types.StringValue("1024MiB"), 2 * size.GiB, "2GiB"}, // changed outside Terraform
		{types.StringNull(), size.GiB, "1GiB"},               // import
		{types.StringValue("garbage"), size.GiB, "1GiB"},     // unparsable prior never survives
		{types.StringUnknown(), 1500 * size.MB, "1.5GB"},     // unknown prior
		{types.StringValue("1073741824"), size.GiB, "1073741824"},
	}
	for _, tt := range tests {
		got := keepSpelling(tt.prior, tt.bytes, parseSize, humanSize(tt.bytes))
		if got.ValueString() != tt.want {
			t.Errorf("keepSpelling(%s, %d) = %s, want %q", tt.prior, uint64(tt.bytes), got, tt.want)
		}
	}
	d := keepSpelling(types.StringValue("0.1s"), 100*time.Millisecond, parseDuration, "100ms")
	if d.ValueString() != "0.1s" {
		t.Errorf("duration spelling not kept: %s", d)
	}
}

func planString(t *testing.T, m planmodifier.String, state, plan types.String) types.String {
	t.Helper()
	obj := tftypes.Object{AttributeTypes: map[string]tftypes.Type{"x": tftypes.String}}
	raw := tftypes.NewValue(obj, map[string]tftypes.Value{"x": tftypes.NewValue(tftypes.String, "x")})
	req := planmodifier.StringRequest{
		Path: path.Root("x"), StateValue: state, PlanValue: plan, ConfigValue: plan,
		State: tfsdk.State{Raw: raw}, Plan: tfsdk.Plan{Raw: raw},
	}
	resp := &planmodifier.StringResponse{PlanValue: plan}
	m.PlanModifyString(context.Background(), req, resp)
	if resp.Diagnostics.HasError() {
		t.Fatalf("diagnostics: %v", resp.Diagnostics)
	}
	return resp.PlanValue
}

func TestSameSizeKeepsPriorSpellingOnlyWhenEqual(t *testing.T) {
	tests := []struct {
		state, plan types.String
		want        types.String
	}{
		{types.StringValue("1GiB"), types.StringValue("1024MiB"), types.StringValue("1GiB")},
		{types.StringValue("1.5GB"), types.StringValue("1500MB"), types.StringValue("1.5GB")},
		{types.StringValue("1GiB"), types.StringValue("1GB"), types.StringValue("1GB")}, // not equal: a real change
		{types.StringValue("1GiB"), types.StringValue("bad"), types.StringValue("bad")},
		{types.StringNull(), types.StringValue("1GiB"), types.StringValue("1GiB")},
		{types.StringValue("1GiB"), types.StringUnknown(), types.StringUnknown()},
	}
	for _, tt := range tests {
		if got := planString(t, sameSize(), tt.state, tt.plan); !got.Equal(tt.want) {
			t.Errorf("sameSize(state %s, plan %s) = %s, want %s", tt.state, tt.plan, got, tt.want)
		}
	}
	if got := planString(t, sameDuration(), types.StringValue("100ms"), types.StringValue("0.1s")); got.ValueString() != "100ms" {
		t.Errorf("sameDuration kept %s, want 100ms", got)
	}
	if got := planString(t, sameDuration(), types.StringValue("100ms"), types.StringValue("1s")); got.ValueString() != "1s" {
		t.Errorf("sameDuration hid a real change: %s", got)
	}
}

func TestSizeAndDurationValidators(t *testing.T) {
	tests := []struct {
		v       validator.String
		in      types.String
		wantErr string
		summary string // the diagnostic's summary, where there is an error
	}{
		{sizeValidator, types.StringValue("12 GiBs"), `unknown unit "GiBs"`, "Invalid size"},
		{sizeValidator, types.StringValue("4GiB"), "", ""},
		{sizeValidator, types.StringUnknown(), "", ""},
		{sizeValidator, types.StringNull(), "", ""},
		{durationValidator, types.StringValue("100 millis"), `"100 millis" is not a duration`, "Invalid duration"},
		{durationValidator, types.StringValue("250ms"), "", ""},
		{timeoutValidator, types.StringValue("0s"), `request_timeout = "0s": must be more than 0`, "Invalid request_timeout"},
		{timeoutValidator, types.StringValue("soon"), `"soon" is not a duration`, "Invalid request_timeout"},
		{timeoutValidator, types.StringValue("10s"), "", ""},
		{namespaceValidator, types.StringValue("prod.eu"), `namespace = "prod.eu"`, "Invalid namespace"},
		{nameValidator, types.StringValue("a.b"), `"a.b": must be 1-64 letters`, "Invalid name"},
	}
	for _, tt := range tests {
		resp := &validator.StringResponse{}
		tt.v.ValidateString(context.Background(), validator.StringRequest{Path: path.Root("name"), ConfigValue: tt.in}, resp)
		got, summary := "", ""
		if resp.Diagnostics.HasError() {
			got, summary = resp.Diagnostics.Errors()[0].Detail(), resp.Diagnostics.Errors()[0].Summary()
		}
		what := tt.v.Description(context.Background())
		if tt.wantErr == "" && got != "" || !strings.Contains(got, tt.wantErr) {
			t.Errorf("%s (%s): error %q, want one containing %q", what, tt.in, got, tt.wantErr)
		}
		if summary != tt.summary {
			t.Errorf("%s (%s): summary %q, want %q", what, tt.in, summary, tt.summary)
		}
	}
}

func TestBytesOf(t *testing.T) {
	if got := bytesOf(types.StringValue("1.5GB")); got.ValueInt64() != 1500000000 {
		t.Errorf("bytesOf(1.5GB) = %s", got)
	}
	if !bytesOf(types.StringUnknown()).IsUnknown() || !bytesOf(types.StringNull()).IsNull() || !bytesOf(types.StringValue("x")).IsUnknown() {
		t.Error("bytesOf must keep unknown/null and turn a bad size into unknown")
	}
}
