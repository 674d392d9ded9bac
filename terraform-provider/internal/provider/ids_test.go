package provider

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gpufrac/gpufrac/policy"
)

func TestParseImportID(t *testing.T) {
	tests := []struct {
		id, name, ns, err string
	}{
		{"training@default", "training", "default", ""},
		{"training@ml-prod", "training", "ml-prod", ""},
		{"training", "training", "dflt", ""}, // name alone: the provider's default namespace
		{"a.b@default", "", "", `name "a.b"`},
		{"@default", "", "", "not <name>@<namespace>"},
		{"x@", "", "", "not <name>@<namespace>"},
		{"x@a@b", "", "", "not <name>@<namespace>"},
		{"x@bad_ns", "", "", `namespace "bad_ns"`},
	}
	for _, tt := range tests {
		name, ns, err := parseImportID(tt.id, "dflt")
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parseImportID(%q) error = %v, want one containing %q", tt.id, err, tt.err)
			}
			continue
		}
		if err != nil || name != tt.name || ns != tt.ns {
			t.Errorf("parseImportID(%q) = %q, %q, %v; want %q, %q", tt.id, name, ns, err, tt.name, tt.ns)
		}
		if got := objectID(name, ns); tt.id != "training" && got != tt.id {
			t.Errorf("objectID round trip: %q != %q", got, tt.id)
		}
	}
}

// The provider checks names before they reach Nomad (import IDs, the name attributes); both
// checks must accept exactly what policy.Validate accepts.
func TestNameRuleMatchesPolicyValidate(t *testing.T) {
	names := []string{"default", "a", "train-7b_v2~x", "a.b", "a@b", "a/b", "", "a b", "é",
		strings.Repeat("x", 64), strings.Repeat("x", 65)}
	for i := 0; i < 128; i++ {
		names = append(names, fmt.Sprintf("x%cy", rune(i)))
	}
	for _, n := range names {
		p := policy.Default()
		p.Name = n
		want := p.Validate() == nil
		resp := &validator.StringResponse{}
		nameValidator.ValidateString(context.Background(), validator.StringRequest{Path: path.Root("name"), ConfigValue: types.StringValue(n)}, resp)
		if got := !resp.Diagnostics.HasError(); got != want {
			t.Errorf("name %q: the name validator says valid=%v, policy.Validate says %v", n, got, want)
		}
		if _, _, err := parseImportID(n+"@default", "dflt"); (err == nil) != want {
			t.Errorf("import ID %q: parseImportID error %v, policy.Validate says valid=%v", n+"@default", err, want)
		}
	}
}
