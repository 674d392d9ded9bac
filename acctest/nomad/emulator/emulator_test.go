package emulator

import (
	"strings"
	"testing"

	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/msgpack"

	hclspecpb "github.com/gpufrac/gpufrac/nomad-device/proto/hclspec"
)

func attr(name, typ string) *hclspecpb.Spec {
	return &hclspecpb.Spec{Block: &hclspecpb.Spec_Attr{Attr: &hclspecpb.Attr{Name: name, Type: typ}}}
}

func lit(v string) *hclspecpb.Spec {
	return &hclspecpb.Spec{Block: &hclspecpb.Spec_Literal{Literal: &hclspecpb.Literal{Value: v}}}
}

func def(p, d *hclspecpb.Spec) *hclspecpb.Spec {
	return &hclspecpb.Spec{Block: &hclspecpb.Spec_Default{Default: &hclspecpb.Default{Primary: p, Default: d}}}
}

func obj(m map[string]*hclspecpb.Spec) *hclspecpb.Spec {
	return &hclspecpb.Spec{Block: &hclspecpb.Spec_Object{Object: &hclspecpb.Object{Attributes: m}}}
}

func TestSpecConversionFollowsNomadRules(t *testing.T) {
	tests := []struct {
		name    string
		spec    *hclspecpb.Spec
		wantErr string
	}{
		{"implied name from object key", obj(map[string]*hclspecpb.Spec{"a": attr("", "string")}), ""},
		{"default needs its own name", obj(map[string]*hclspecpb.Spec{"a": def(attr("", "string"), lit(`"x"`))}), "Missing name"},
		{"block map needs a label", obj(map[string]*hclspecpb.Spec{"m": {Block: &hclspecpb.Spec_BlockMap{BlockMap: &hclspecpb.BlockMap{}}}}), "label"},
		{"bad type expression", obj(map[string]*hclspecpb.Spec{"a": attr("a", "lizt(string)")}), "lizt"},
		{"literal is an expression", obj(map[string]*hclspecpb.Spec{"a": def(attr("a", "number"), lit("max(1, 7)"))}), ""},
		{"unquoted string literal", obj(map[string]*hclspecpb.Spec{"a": def(attr("a", "string"), lit("1m"))}), "literal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := SpecToHCLDec(tt.spec)
			if tt.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestEncodeConfigAppliesDefaultsAndFunctions(t *testing.T) {
	spec := obj(map[string]*hclspecpb.Spec{
		"period": def(attr("period", "string"), lit(`"1m"`)),
		"count":  def(attr("count", "number"), lit("max(1, 7)")),
		"names":  def(attr("names", "list(string)"), lit("[]")),
	})
	// HCL1 has no function calls; a string template reaches hcldec through the JSON body and
	// is evaluated there, with Nomad's functions.
	b, err := EncodeConfig(spec, `config {
  names = ["${upper("a")}"]
}`)
	if err != nil {
		t.Fatal(err)
	}
	ty := cty.Object(map[string]cty.Type{"period": cty.String, "count": cty.Number, "names": cty.List(cty.String)})
	v, err := msgpack.Unmarshal(b, ty)
	if err != nil {
		t.Fatal(err)
	}
	if v.GetAttr("period").AsString() != "1m" || !v.GetAttr("count").RawEquals(cty.NumberIntVal(7)) ||
		v.GetAttr("names").Index(cty.NumberIntVal(0)).AsString() != "A" {
		t.Errorf("decoded %#v", v)
	}
	if _, err := EncodeConfig(spec, "config {}\nconfig {}"); err == nil {
		t.Error("two config blocks accepted")
	}
	if _, err := EncodeConfig(spec, `config { nope = 1 }`); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown key: %v", err)
	}
	// HCL1 turns a nested object into a list of maps; a map-typed attribute cannot take it.
	mapSpec := obj(map[string]*hclspecpb.Spec{"m": attr("m", "map(string)")})
	if _, err := EncodeConfig(mapSpec, `config { m = { a = "b" } }`); err == nil {
		t.Error("a map(string) attribute accepted an HCL1 object: Nomad agents refuse that")
	}
}

func TestParseHandshake(t *testing.T) {
	tests := []struct {
		line, addr, wantErr string
	}{
		{"1|1|unix|/tmp/p|grpc", "/tmp/p", ""},
		{"1|1|unix|/tmp/p|grpc|", "/tmp/p", ""},
		{"1|1|unix|/tmp/p|netrpc", "", "grpc"},
		{"1|2|unix|/tmp/p|grpc", "", "app protocol"},
		{"1|1|unix|/tmp/p|grpc|MIIBcert", "", "certificate"},
		{"hello", "", "want"},
	}
	for _, tt := range tests {
		addr, err := parseHandshake(tt.line)
		if tt.wantErr == "" && (err != nil || addr != tt.addr) {
			t.Errorf("%q: %q, %v", tt.line, addr, err)
		}
		if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%q: error %v, want one mentioning %q", tt.line, err, tt.wantErr)
		}
	}
}
