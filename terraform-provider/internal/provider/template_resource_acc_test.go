package provider

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/storetest"
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

// mainPolicy is the policy every template of these configurations names, with its unit.
func mainPolicy(unit string) string {
	return `
resource "gpufrac_policy" "main" {
  name = "main"
  unit = "` + unit + `"
}
`
}

// templateConfig is a policy, a template naming it, both data sources and the units function,
// as a platform team would write them.
func templateConfig(peak, unit string) string {
	return mainPolicy(unit) + `

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

// sizingConfig is a policy and a template that passes the policy's sizing, and a job's device
// count taken from the template's units, as the user wrote it.
func sizingConfig(unit, sizingOf string) string {
	return mainPolicy(unit) + `

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

// Left out of the configuration, policy_sizing is the sizing of the stored policy that the
// units were last computed from. A policy change applied with a change of the template keeps
// the units, and that sizing, the plan showed, with no complaint that the policy changed since
// the plan; the next refresh brings both up to date, with an empty plan.
func TestAccTemplate_unsetSizingFollowsRefresh(t *testing.T) {
	s := accServer(t)
	cfg := func(unit, description string) string {
		return providerBlock(s, mgmtToken) + mainPolicy(unit) + `
resource "gpufrac_template" "llama" {
  name        = "llama"
  policy      = gpufrac_policy.main.name
  peak        = "20GiB"
  description = "` + description + `"
}`
	}
	pol := withPolicy(func(*policy.Policy) {})
	pol512 := withPolicy(func(p *policy.Policy) { p.UnitBytes = 512 * size.MiB })
	tmpl := policy.Template{Name: "llama", Policy: "main", PeakBytes: 20 * size.GiB}
	sized := func(p policy.Policy) []statecheck.StateCheck {
		return []statecheck.StateCheck{
			tmplAttr(templateAddr, "units", knownvalue.Int64Exact(int64(tmpl.Units(p)))),
			tmplAttr(templateAddr, "policy_sizing", knownvalue.ObjectPartial(map[string]knownvalue.Check{
				"unit_bytes": knownvalue.Int64Exact(int64(p.UnitBytes)),
			})),
		}
	}
	accTest(t, s, []resource.TestStep{
		{Config: cfg("1GiB", "a"), ConfigStateChecks: sized(pol)},
		{
			Config: cfg("512MiB", "b"),
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectResourceAction(templateAddr, plancheck.ResourceActionUpdate),
				plancheck.ExpectKnownValue(templateAddr, tfjsonpath.New("units"), knownvalue.Int64Exact(int64(tmpl.Units(pol)))),
			}},
			ConfigStateChecks: sized(pol),
		},
		{
			Config:            cfg("512MiB", "b"),
			ConfigPlanChecks:  resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			ConfigStateChecks: sized(pol512),
		},
	})
}

// A template's variable holds its own fields, not the units, cap or policy_sizing computed or
// passed beside them. A plan that changes only those, because the policy's unit changed outside
// Terraform or through it, records them in state and writes nothing to the template, where a
// probe may be writing at the time; a peak the probe stores refreshes the units with an empty
// plan.
func TestAccTemplate_computedChangesWriteNothing(t *testing.T) {
	s := accServer(t)
	cfg := func(unit string) string {
		return providerBlock(s, mgmtToken) + mainPolicy(unit) + `
resource "gpufrac_template" "llama" {
  name          = "llama"
  policy        = gpufrac_policy.main.name
  policy_sizing = gpufrac_policy.main.sizing
  peak          = "20GiB"
  lifecycle {
    ignore_changes = [peak, sm_active_percent]
  }
}`
	}
	pol := withPolicy(func(*policy.Policy) {})
	pol512 := withPolicy(func(p *policy.Policy) { p.UnitBytes = 512 * size.MiB })
	tmpl := policy.Template{Name: "llama", Policy: "main", PeakBytes: 20 * size.GiB}
	sm := 51.3
	probed := tmpl
	probed.PeakBytes, probed.SMActivePercent = 24*size.GiB, &sm
	units := func(t policy.Template, p policy.Policy) knownvalue.Check {
		return knownvalue.Int64Exact(int64(t.Units(p)))
	}
	var written uint64 // the template variable's modify index after its last expected write
	recordWrite := func(*terraform.State) error {
		v, _ := s.Get("default", policy.TemplatePath("llama"))
		written = v.ModifyIndex
		return nil
	}
	noWrite := func(*terraform.State) error {
		if v, _ := s.Get("default", policy.TemplatePath("llama")); v.ModifyIndex != written {
			return fmt.Errorf("the template's variable was written again (modify index %d, was %d) though none of its fields changed",
				v.ModifyIndex, written)
		}
		return nil
	}
	planNoWrite := func(action plancheck.ResourceActionType, u knownvalue.Check) resource.ConfigPlanChecks {
		return resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
			plancheck.ExpectResourceAction(templateAddr, action),
			plancheck.ExpectKnownValue(templateAddr, tfjsonpath.New("units"), u),
			plancheck.ExpectKnownValue(templateAddr, tfjsonpath.New("modify_index"), knownvalue.Int64Func(func(v int64) error {
				if uint64(v) != written {
					return fmt.Errorf("planned modify_index %d, stored %d: the plan writes the template", v, written)
				}
				return nil
			})),
		}}
	}
	accTest(t, s, []resource.TestStep{
		{
			Config: cfg("1GiB"),
			Check:  resource.ComposeAggregateTestCheckFunc(storedTemplate(s, "default", tmpl), recordWrite),
		},
		{
			// The unit changed by hand: the apply puts the policy back, and the template's units
			// with it, in state alone.
			PreConfig:         func() { s.Put("default", policy.PolicyPath("main"), storetest.EncodePolicy(t, pol512)) },
			Config:            cfg("1GiB"),
			ConfigPlanChecks:  planNoWrite(plancheck.ResourceActionUpdate, units(tmpl, pol)),
			ConfigStateChecks: []statecheck.StateCheck{tmplAttr(templateAddr, "units", units(tmpl, pol))},
			Check: resource.ComposeAggregateTestCheckFunc(noWrite, storedPolicy(s, "default", pol),
				stateMatchesStore(s, templateAddr, "default", policy.TemplatePath("llama"))),
		},
		{
			// The unit changed through Terraform: the same.
			Config:            cfg("512MiB"),
			ConfigPlanChecks:  planNoWrite(plancheck.ResourceActionUpdate, units(tmpl, pol512)),
			ConfigStateChecks: []statecheck.StateCheck{tmplAttr(templateAddr, "units", units(tmpl, pol512))},
			Check:             resource.ComposeAggregateTestCheckFunc(noWrite, storedPolicy(s, "default", pol512)),
		},
		{
			// The probe stores a new peak: the refresh brings its units, and nothing is written.
			PreConfig: func() {
				items, err := policy.EncodeTemplate(probed)
				if err != nil {
					t.Fatal(err)
				}
				written = s.Put("default", policy.TemplatePath("llama"), items).ModifyIndex
			},
			Config:            cfg("512MiB"),
			ConfigPlanChecks:  resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			ConfigStateChecks: []statecheck.StateCheck{tmplAttr(templateAddr, "units", units(probed, pol512))},
			Check:             resource.ComposeAggregateTestCheckFunc(noWrite, storedTemplate(s, "default", probed)),
		},
	})
}

// A policy and a template imported from variables someone else wrote plan nothing, whether the
// template's configuration says description = "" or leaves it out: the variable stores neither.
func TestAccTemplate_importWithoutDescriptionPlansNothing(t *testing.T) {
	s := accServer(t)
	p := providerBlock(s, mgmtToken)
	cfg := func(description string) string {
		return p + mainPolicy("1GiB") + `
resource "gpufrac_template" "llama" {
  name   = "llama"
  policy = gpufrac_policy.main.name
  peak   = "20GiB"
` + description + `}`
	}
	put := putPolicyAndTemplate(t, s, withPolicy(func(*policy.Policy) {}))
	var steps []resource.TestStep
	for _, description := range []string{"  description = \"\"\n", ""} {
		steps = append(steps, importThenPlan(p, cfg(description), put)...)
	}
	accTest(t, s, steps)
}

// A template imported under a configuration that passes its policy's sizing plans nothing when
// the stored policy has that sizing, also with a margin that has no exact float64 (12.3); so
// does leaving policy_sizing out afterwards.
func TestAccTemplate_importWithPolicySizingPlansNothing(t *testing.T) {
	s := accServer(t)
	p := providerBlock(s, mgmtToken)
	cfg := func(pct float64, sizing string) string {
		return p + fmt.Sprintf(`
resource "gpufrac_policy" "main" {
  name               = "main"
  cap_margin_percent = %g
}

resource "gpufrac_template" "llama" {
  name   = "llama"
  policy = gpufrac_policy.main.name
  peak   = "20GiB"
%s}`, pct, sizing)
	}
	const sizing = "  policy_sizing = gpufrac_policy.main.sizing\n"
	var steps []resource.TestStep
	for _, pct := range []float64{15, 12.3} {
		put := putPolicyAndTemplate(t, s, withPolicy(func(p *policy.Policy) { p.CapMarginPercent = pct }))
		steps = append(steps, importThenPlan(p, cfg(pct, sizing), put)...)
		steps = append(steps, resource.TestStep{Config: cfg(pct, ""), PlanOnly: true})
	}
	accTest(t, s, steps)
}

// putPolicyAndTemplate returns a PreConfig that writes pol and a 20GiB template "llama" naming
// it, as someone would outside Terraform.
func putPolicyAndTemplate(t *testing.T, s *varserver.Server, pol policy.Policy) func() {
	return func() {
		s.Put("default", policy.PolicyPath(pol.Name), storetest.EncodePolicy(t, pol))
		items, err := policy.EncodeTemplate(policy.Template{Name: "llama", Policy: pol.Name, PeakBytes: 20 * size.GiB})
		if err != nil {
			t.Fatal(err)
		}
		s.Put("default", policy.TemplatePath("llama"), items)
	}
}

// importThenPlan empties the state (with the provider block p alone), has put write the policy
// "main" and the template "llama", imports both under config and plans config, which must plan
// nothing.
func importThenPlan(p, config string, put func()) []resource.TestStep {
	importPersisted := func(addr, id string) resource.TestStep {
		return resource.TestStep{Config: config, ResourceName: addr, ImportState: true, ImportStateId: id, ImportStatePersist: true}
	}
	withPut := importPersisted(policyAddr, "main@default")
	withPut.PreConfig = put
	return []resource.TestStep{
		// Nothing in state (after an earlier import, this destroys what it brought in).
		{Config: p},
		withPut,
		importPersisted(templateAddr, "llama@default"),
		{Config: config, PlanOnly: true},
	}
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
