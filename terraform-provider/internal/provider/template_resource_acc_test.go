package provider

import (
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

const (
	templateAddr = "gpufrac_template.llama"
	templateData = "data.gpufrac_template.llama"
	policyData   = "data.gpufrac_policy.main"
)

func tmplAttr(addr, name string, v knownvalue.Check) statecheck.StateCheck {
	return statecheck.ExpectKnownValue(addr, tfjsonpath.New(name), v)
}

// templateConfig is a policy, a template naming it, both data sources and the units function,
// as a platform team would write them.
func templateConfig(peak, unit string) string {
	return `
resource "gpufrac_policy" "main" {
  name = "main"
  unit = "` + unit + `"
}

resource "gpufrac_template" "llama" {
  name        = "llama"
  policy      = gpufrac_policy.main.name
  peak        = "` + peak + `"
  description = "7B fine-tune"
}

data "gpufrac_template" "llama" {
  name       = gpufrac_template.llama.name
  depends_on = [gpufrac_policy.main, gpufrac_template.llama]
}

data "gpufrac_policy" "main" {
  name       = gpufrac_policy.main.name
  depends_on = [gpufrac_policy.main]
}

output "units" {
  value = provider::gpufrac::units(gpufrac_template.llama.peak, gpufrac_policy.main.unit, gpufrac_policy.main.cap_margin_percent, gpufrac_policy.main.cap_margin)
}
`
}

func TestAccTemplate_unitsFollowPolicy(t *testing.T) {
	s := accServer(t)
	p := requiredProviders() + providerBlock(s, mgmtToken)
	pol := policy.Default()
	pol.Name = "main"
	tmpl := policy.Template{Name: "llama", Policy: "main", PeakBytes: 20 * size.GiB, Description: "7B fine-tune"}
	// 20GiB x 1.15 + 1.5GB = 26.19e9 bytes: 25 units of 1GiB, 49 of 512MiB.
	capBytes := int64(pol.Cap(20 * size.GiB))
	units := int64(tmpl.Units(pol))
	pol512 := pol
	pol512.UnitBytes = 512 * size.MiB
	units512 := int64(tmpl.Units(pol512))
	if units != 25 || units512 != 49 {
		t.Fatalf("policy formula changed: units %d, %d", units, units512)
	}
	tmpl30 := tmpl
	tmpl30.PeakBytes = 30 * size.GiB
	accTest(t, s, []resource.TestStep{
		{
			Config: p + templateConfig("20GiB", "1GiB"),
			ConfigStateChecks: []statecheck.StateCheck{
				tmplAttr(templateAddr, "units", knownvalue.Int64Exact(units)),
				tmplAttr(templateAddr, "cap_bytes", knownvalue.Int64Exact(capBytes)),
				tmplAttr(templateAddr, "cap", knownvalue.StringExact(size.Bytes(capBytes).String())),
				tmplAttr(templateAddr, "peak_bytes", knownvalue.Int64Exact(20<<30)),
				tmplAttr(templateAddr, "id", knownvalue.StringExact("llama@default")),
				tmplAttr(templateAddr, "cap_override", knownvalue.Null()),
				tmplAttr(templateData, "units", knownvalue.Int64Exact(units)),
				tmplAttr(templateData, "peak", knownvalue.StringExact("20GiB")),
				tmplAttr(policyData, "unit_bytes", knownvalue.Int64Exact(1<<30)),
				tmplAttr(policyData, "cap_margin", knownvalue.StringExact("1.5GB")),
				statecheck.ExpectKnownOutputValue("units", knownvalue.Int64Exact(units)),
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				storedTemplate(s, "default", tmpl),
				storedPolicy(s, "default", pol),
			),
		},
		{
			// A smaller unit: the template's variable does not change, its unit count does.
			// The data source (read after the policy is written) and the function see it in
			// this apply; the resource's computed units on the next refresh.
			Config: p + templateConfig("20GiB", "512MiB"),
			ConfigStateChecks: []statecheck.StateCheck{
				tmplAttr(templateData, "units", knownvalue.Int64Exact(units512)),
				statecheck.ExpectKnownOutputValue("units", knownvalue.Int64Exact(units512)),
			},
		},
		{
			Config:            p + templateConfig("20GiB", "512MiB"),
			ConfigPlanChecks:  resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			ConfigStateChecks: []statecheck.StateCheck{tmplAttr(templateAddr, "units", knownvalue.Int64Exact(units512))},
		},
		{
			Config: p + templateConfig("30GiB", "512MiB"),
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectResourceAction(templateAddr, plancheck.ResourceActionUpdate),
				plancheck.ExpectUnknownValue(templateAddr, tfjsonpath.New("units")),
			}},
			ConfigStateChecks: []statecheck.StateCheck{
				tmplAttr(templateAddr, "units", knownvalue.Int64Exact(int64(tmpl30.Units(pol512)))),
				tmplAttr(templateData, "units", knownvalue.Int64Exact(int64(tmpl30.Units(pol512)))),
			},
			Check: storedTemplate(s, "default", tmpl30),
		},
		{
			// "30720MiB" is 30GiB: no change.
			Config:           p + templateConfig("30720MiB", "512MiB"),
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
		},
		// The import step's state holds only the imported resource, and the harness cannot
		// read back an output that has no value, so this config has none.
		importStep(p+strings.Split(templateConfig("30720MiB", "512MiB"), "output")[0], templateAddr, "llama@default"),
	})
}

func TestAccTemplate_driftAndErrors(t *testing.T) {
	s := accServer(t)
	p := providerBlock(s, mgmtToken)
	cfg := p + `
resource "gpufrac_policy" "main" {
  name = "main"
}

resource "gpufrac_template" "llama" {
  name         = "llama"
  policy       = gpufrac_policy.main.name
  cap_override = "8GiB"
}`
	accTest(t, s, []resource.TestStep{
		{
			Config: p + `
resource "gpufrac_template" "llama" {
  name   = "llama"
  policy = "missing"
  peak   = "1GiB"
}`,
			ExpectError: words(`names policy "missing", but Nomad Variable "gpufrac/policy/missing" does not exist`),
		},
		{
			Config: p + `
resource "gpufrac_template" "llama" {
  name = "llama"
}`,
			PlanOnly:    true,
			ExpectError: words("peak = 0B: must be set (measure it with `gpufrac probe`) unless cap_override is"),
		},
		{
			Config: cfg,
			ConfigStateChecks: []statecheck.StateCheck{
				tmplAttr(templateAddr, "units", knownvalue.Int64Exact(8)),
				tmplAttr(templateAddr, "peak", knownvalue.Null()),
			},
			Check: storedTemplate(s, "default", policy.Template{Name: "llama", Policy: "main", CapOverrideBytes: 8 * size.GiB}),
		},
		{
			PreConfig: func() {
				items, err := policy.EncodeTemplate(policy.Template{Name: "llama", Policy: "main", CapOverrideBytes: 4 * size.GiB})
				if err != nil {
					t.Fatal(err)
				}
				s.Put("default", policy.TemplatePath("llama"), items)
			},
			Config:             cfg,
			PlanOnly:           true,
			ExpectNonEmptyPlan: true,
		},
		{
			Config: cfg,
			Check:  storedTemplate(s, "default", policy.Template{Name: "llama", Policy: "main", CapOverrideBytes: 8 * size.GiB}),
		},
		{
			Config:      providerBlock(s, noToken) + cfg[len(p):],
			ExpectError: words("Permission denied"),
		},
		{
			// Back to a good token: nothing was dropped from state, and destroy can run.
			Config:           cfg,
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
		},
	})
}
