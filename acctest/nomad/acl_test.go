package nomad_test

import (
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/gpufrac/gpufrac/internal/varserver"
)

// docACL is the ACL policy docs/plugin.md gives for name ("gpufrac-plugin", "gpufrac-controller":
// the fenced HCL block whose `nomad acl policy apply` comment names it), as the fake Nomad's
// rules: each namespace's job capabilities and each variables path's capabilities.
func docACL(t *testing.T, name string) []varserver.Rule {
	t.Helper()
	doc, err := os.ReadFile("../../docs/plugin.md")
	if err != nil {
		t.Fatal(err)
	}
	var src string
	for _, block := range strings.Split(string(doc), "```hcl\n")[1:] {
		body, _, _ := strings.Cut(block, "```")
		first, _, _ := strings.Cut(body, "\n")
		if strings.Contains(first, "nomad acl policy apply") && strings.Contains(first, " "+name+" ") {
			src = body
			break
		}
	}
	if src == "" {
		t.Fatalf("docs/plugin.md has no ACL policy %q", name)
	}
	f, diags := hclsyntax.ParseConfig([]byte(src), name+".hcl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatalf("ACL policy %s in docs/plugin.md: %s", name, diags)
	}
	strs := func(attr *hclsyntax.Attribute) []string {
		v, diags := attr.Expr.Value(nil)
		if diags.HasErrors() || !v.Type().IsTupleType() {
			t.Fatalf("ACL policy %s: %s is not a list of strings", name, attr.Name)
		}
		var out []string
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			if e.Type() != cty.String {
				t.Fatalf("ACL policy %s: %s is not a list of strings", name, attr.Name)
			}
			out = append(out, e.AsString())
		}
		return out
	}
	var rules []varserver.Rule
	for _, ns := range f.Body.(*hclsyntax.Body).Blocks {
		if ns.Type != "namespace" || len(ns.Labels) != 1 {
			t.Fatalf("ACL policy %s: unexpected block %s %v", name, ns.Type, ns.Labels)
		}
		if a, ok := ns.Body.Attributes["capabilities"]; ok {
			rules = append(rules, varserver.Rule{Namespace: ns.Labels[0], Jobs: strs(a)})
		}
		for _, vb := range ns.Body.Blocks {
			if vb.Type != "variables" {
				t.Fatalf("ACL policy %s: unexpected block %s", name, vb.Type)
			}
			for _, p := range vb.Body.Blocks {
				a, ok := p.Body.Attributes["capabilities"]
				if p.Type != "path" || len(p.Labels) != 1 || !ok {
					t.Fatalf("ACL policy %s: unexpected variables block %s %v", name, p.Type, p.Labels)
				}
				rules = append(rules, varserver.Rule{Namespace: ns.Labels[0], Path: p.Labels[0], Capabilities: strs(a)})
			}
		}
	}
	return rules
}
