package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// sizingConfig is a policy and a template that passes the policy's sizing, and a job's device
// count taken from the template's units, as the user wrote it.
func sizingConfig(unit, sizingOf string) string {
	return `
resource "gpufrac_policy" "main" {
  name = "main"
  unit = "` + unit + `"
}

resource "gpufrac_policy" "other" {
  name = "other"
}

resource "gpufrac_template" "llama" {
  name          = "llama"
  policy        = gpufrac_policy.main.name
  policy_sizing = gpufrac_policy.` + sizingOf + `.sizing
  peak          = "20GiB"
}

output "job_count" {
  value = gpufrac_template.llama.units
}
`
}

// After a policy change, the template's planned units are the new ones in the same plan, and a
// value built from them is right after one apply.
func TestAccTemplate_policySizingSamePlan(t *testing.T) {
	s := accServer(t)
	p := requiredProviders() + providerBlock(s, mgmtToken)
	pol := policy.Default()
	pol.Name = "main"
	tmpl := policy.Template{Name: "llama", Policy: "main", PeakBytes: 20 * size.GiB}
	units := int64(tmpl.Units(pol))
	pol.UnitBytes = 512 * size.MiB
	units512 := int64(tmpl.Units(pol))
	if units != 25 || units512 != 49 {
		t.Fatalf("policy formula changed: units %d, %d", units, units512)
	}
	accTest(t, s, []resource.TestStep{
		{
			Config: p + sizingConfig("1GiB", "main"),
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectKnownValue(templateAddr, tfjsonpath.New("units"), knownvalue.Int64Exact(units)),
			}},
			ConfigStateChecks: []statecheck.StateCheck{
				tmplAttr(templateAddr, "units", knownvalue.Int64Exact(units)),
				tmplAttr("gpufrac_policy.main", "sizing", knownvalue.ObjectExact(map[string]knownvalue.Check{
					"name": knownvalue.StringExact("main"), "namespace": knownvalue.StringExact("default"),
					"unit_bytes": knownvalue.Int64Exact(1 << 30), "cap_margin_percent": knownvalue.Float64Exact(15),
					"cap_margin_bytes": knownvalue.Int64Exact(1_500_000_000),
				})),
				statecheck.ExpectKnownOutputValue("job_count", knownvalue.Int64Exact(units)),
			},
		},
		{
			Config: p + sizingConfig("512MiB", "main"),
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectResourceAction(templateAddr, plancheck.ResourceActionUpdate),
				plancheck.ExpectKnownValue(templateAddr, tfjsonpath.New("units"), knownvalue.Int64Exact(units512)),
				plancheck.ExpectKnownOutputValue("job_count", knownvalue.Int64Exact(units512)),
			}},
			ConfigStateChecks: []statecheck.StateCheck{
				tmplAttr(templateAddr, "units", knownvalue.Int64Exact(units512)),
				statecheck.ExpectKnownOutputValue("job_count", knownvalue.Int64Exact(units512)),
			},
		},
		{
			Config:           p + sizingConfig("512MiB", "main"),
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
		},
		{
			// The policy changed outside Terraform: the plan puts it back and sizes the
			// template by the configuration, so nothing is stale after the apply.
			PreConfig: func() {
				drifted := policy.Default()
				drifted.Name, drifted.UnitBytes = "main", 2*size.GiB
				items, err := policy.EncodePolicy(drifted)
				if err != nil {
					t.Fatal(err)
				}
				s.Put("default", policy.PolicyPath("main"), items)
			},
			Config: p + sizingConfig("512MiB", "main"),
			ConfigStateChecks: []statecheck.StateCheck{
				tmplAttr(templateAddr, "units", knownvalue.Int64Exact(units512)),
			},
			Check: storedPolicy(s, "default", pol),
		},
		{
			Config:      p + sizingConfig("512MiB", "other"),
			PlanOnly:    true,
			ExpectError: words(`policy = "main", but policy_sizing is the sizing of policy "other"`),
		},
	})
}

// Under OpenTofu each error of units() is reported against the argument at fault, not the
// first one.
func TestAccUnitsFunction_errorNamesTheArgument(t *testing.T) {
	accServer(t)
	call := func(args string) string {
		return requiredProviders() + "output \"u\" {\n  value = provider::gpufrac::units(" + args + ")\n}\n"
	}
	tests := []struct{ args, param, text string }{
		{`"20GiB", "1GiB", -5, "1.5GB"`, "cap_margin_percent", "cap_margin_percent = -5: must be between 0 and 1000"},
		{`"20GiB", "1MiB", 15, "1.5GB"`, "unit", "unit = 1MiB: must be between 64MiB and 64GiB"},
		{`"20GiB", "1GiB", 15, "lots"`, "cap_margin", `cap_margin: invalid size "lots"`},
		{`"20 GiBs", "1GiB", 15, "1.5GB"`, "peak", `peak: invalid size "20 GiBs"`},
	}
	var steps []resource.TestStep
	for _, tt := range tests {
		steps = append(steps, resource.TestStep{
			Config:      call(tt.args),
			PlanOnly:    true,
			ExpectError: words(`Invalid value for "` + tt.param + `" parameter: ` + tt.text),
		})
	}
	resource.Test(t, resource.TestCase{ProtoV6ProviderFactories: accFactories, Steps: steps})
}
