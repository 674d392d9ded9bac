package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/storetest"
	"github.com/gpufrac/gpufrac/size"
)

// The compute budget is written by hand or by Terraform; either way a plan shows it and an
// update never drops it unseen.
func TestAccPolicy_computeBudget(t *testing.T) {
	s := accServer(t)
	p := providerBlock(s, mgmtToken)
	plain := p + `
resource "gpufrac_policy" "main" {
  name = "main"
}`
	budget := p + `
resource "gpufrac_policy" "main" {
  name              = "main"
  sm_budget_percent = 150
}`
	withBudget := withPolicy(func(p *policy.Policy) { p.SMBudgetPercent = 150 })
	accTest(t, s, []resource.TestStep{
		{
			// Refused at plan time, naming the value. First: the destroy after the last step plans
			// with that step's configuration.
			Config: p + `
resource "gpufrac_policy" "main" {
  name              = "main"
  sm_budget_percent = 0.5
}`,
			PlanOnly:    true,
			ExpectError: words(`sm_budget_percent = 0.5: must be 0 (off) or between 1 and 6400`),
		},
		{Config: plain, Check: storedPolicy(s, "default", withPolicy(func(*policy.Policy) {}))},
		{
			// Set by hand: the plan must show it.
			PreConfig:          func() { s.Put("default", policy.PolicyPath("main"), storetest.EncodePolicy(t, withBudget)) },
			Config:             plain,
			PlanOnly:           true,
			ExpectNonEmptyPlan: true,
		},
		{
			// Declared: kept, no write.
			Config:            budget,
			ConfigPlanChecks:  resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			ConfigStateChecks: []statecheck.StateCheck{pattr("sm_budget_percent", knownvalue.Float64Exact(150))},
			Check:             storedPolicy(s, "default", withBudget),
		},
	})
}

// gpufrac probe stores a template's peak and SM demand in its variable. A configuration that
// leaves them to the probe keeps them through an unrelated update.
func TestAccTemplate_probeOwnsMeasurements(t *testing.T) {
	s := accServer(t)
	cfg := func(desc string) string {
		return providerBlock(s, mgmtToken) + mainPolicy("1GiB") + `
resource "gpufrac_template" "llama" {
  name              = "llama"
  policy            = gpufrac_policy.main.name
  peak              = "10GiB"
  sm_active_percent = 40
  description       = "` + desc + `"
  lifecycle {
    ignore_changes = [peak, sm_active_percent]
  }
}`
	}
	sm := 40.0
	declared := policy.Template{Name: "llama", Policy: "main", PeakBytes: 10 * size.GiB, SMActivePercent: &sm, Description: "v1"}
	probedSM := 62.5
	probed := declared
	probed.PeakBytes, probed.SMActivePercent = 14*size.GiB, &probedSM
	after := probed
	after.Description = "v2"
	accTest(t, s, []resource.TestStep{
		{
			Config: cfg("v1"),
			Check:  storedTemplate(s, "default", declared),
		},
		{
			PreConfig: func() {
				items, err := policy.EncodeTemplate(probed)
				if err != nil {
					t.Fatal(err)
				}
				s.Put("default", policy.TemplatePath("llama"), items)
			},
			Config: cfg("v2"),
			ConfigStateChecks: []statecheck.StateCheck{
				tmplAttr(templateAddr, "sm_active_percent", knownvalue.Float64Exact(probedSM)),
				tmplAttr(templateAddr, "peak_bytes", knownvalue.Int64Exact(int64(14*size.GiB))),
			},
			Check: storedTemplate(s, "default", after),
		},
	})
}
