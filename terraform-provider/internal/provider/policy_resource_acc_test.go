package provider

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/storetest"
	"github.com/gpufrac/gpufrac/size"
)

const policyAddr = "gpufrac_policy.main"

func pattr(name string, v knownvalue.Check) statecheck.StateCheck {
	return statecheck.ExpectKnownValue(policyAddr, tfjsonpath.New(name), v)
}

func TestAccPolicy_createUpdateImportDestroy(t *testing.T) {
	s := accServer(t)
	p := providerBlock(s, mgmtToken)
	v1 := withPolicy(func(p *policy.Policy) { p.HeadroomBytes = 4 * size.GiB; p.Mode = policy.ModeMPS })
	v2 := withPolicy(func(p *policy.Policy) {
		p.HeadroomBytes, p.UnitBytes, p.MaxTasksPerGPU, p.CapMarginPercent = 6*size.GiB, 512*size.MiB, 4, 12.5
		p.CapMarginBytes, p.WatchdogInterval, p.Unmanaged = 2*size.GB, 250*time.Millisecond, policy.UnmanagedStop
	})
	accTest(t, s, []resource.TestStep{
		{
			Config: p + `
resource "gpufrac_policy" "main" {
  name     = "main"
  headroom = "4GiB"
  mode     = "mps"
}`,
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectResourceAction(policyAddr, plancheck.ResourceActionCreate),
				// Known at plan time, so jobs can use them in the same plan.
				plancheck.ExpectKnownValue(policyAddr, tfjsonpath.New("headroom_bytes"), knownvalue.Int64Exact(4<<30)),
				plancheck.ExpectKnownValue(policyAddr, tfjsonpath.New("id"), knownvalue.StringExact("main@default")),
			}},
			ConfigStateChecks: []statecheck.StateCheck{
				pattr("id", knownvalue.StringExact("main@default")),
				pattr("namespace", knownvalue.StringExact("default")),
				pattr("headroom", knownvalue.StringExact("4GiB")),
				pattr("headroom_bytes", knownvalue.Int64Exact(4<<30)),
				pattr("cap_margin_percent", knownvalue.Float64Exact(15)),
				pattr("cap_margin", knownvalue.StringExact("1.5GB")),
				pattr("cap_margin_bytes", knownvalue.Int64Exact(1_500_000_000)),
				pattr("max_tasks_per_gpu", knownvalue.Int64Exact(6)),
				pattr("unit", knownvalue.StringExact("1GiB")),
				pattr("unit_bytes", knownvalue.Int64Exact(1<<30)),
				pattr("mode", knownvalue.StringExact("mps")),
				pattr("watchdog_interval", knownvalue.StringExact("100ms")),
				pattr("unmanaged", knownvalue.StringExact("report")),
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				storedPolicy(s, "default", v1),
				stateMatchesStore(s, policyAddr, "default", policy.PolicyPath("main")),
			),
		},
		{
			Config: p + `
resource "gpufrac_policy" "main" {
  name               = "main"
  headroom           = "6GiB"
  unit               = "512MiB"
  max_tasks_per_gpu  = 4
  cap_margin_percent = 12.5
  cap_margin         = "2GB"
  watchdog_interval  = "250ms"
  unmanaged          = "stop"
}`,
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectResourceAction(policyAddr, plancheck.ResourceActionUpdate),
			}},
			ConfigStateChecks: []statecheck.StateCheck{
				pattr("headroom_bytes", knownvalue.Int64Exact(6<<30)),
				pattr("unit_bytes", knownvalue.Int64Exact(512<<20)),
				pattr("mode", knownvalue.StringExact("isolated")), // back to the default
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				storedPolicy(s, "default", v2),
				stateMatchesStore(s, policyAddr, "default", policy.PolicyPath("main")),
			),
		},
		{
			// The same values spelled differently: no diff, no write.
			Config: p + `
resource "gpufrac_policy" "main" {
  name               = "main"
  headroom           = "6144MiB"
  unit               = "0.5GiB"
  max_tasks_per_gpu  = 4
  cap_margin_percent = 12.5
  cap_margin         = "2000MB"
  watchdog_interval  = "0.25s"
  unmanaged          = "stop"
}`,
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			ConfigStateChecks: []statecheck.StateCheck{
				pattr("headroom", knownvalue.StringExact("6GiB")),
			},
			Check: stateMatchesStore(s, policyAddr, "default", policy.PolicyPath("main")),
		},
		importStep("", policyAddr, "main@default"),
		// A name alone imports from the provider's default namespace.
		importStep("", policyAddr, "main"),
	})
}

func TestAccPolicy_driftAndOutOfBandDelete(t *testing.T) {
	s := accServer(t)
	cfg := providerBlock(s, mgmtToken) + `
resource "gpufrac_policy" "main" {
  name     = "main"
  headroom = "4GiB"
}`
	want := withPolicy(func(p *policy.Policy) { p.HeadroomBytes = 4 * size.GiB })
	drifted := withPolicy(func(p *policy.Policy) { p.HeadroomBytes = 8 * size.GiB; p.Mode = policy.ModeMPS })
	accTest(t, s, []resource.TestStep{
		{Config: cfg, Check: storedPolicy(s, "default", want)},
		{
			// Someone edits the variable by hand: the plan must show it.
			PreConfig:          func() { s.Put("default", policy.PolicyPath("main"), storetest.EncodePolicy(t, drifted)) },
			Config:             cfg,
			PlanOnly:           true,
			ExpectNonEmptyPlan: true,
		},
		{
			// Apply puts it back (check-and-set on the refreshed modify index).
			Config: cfg,
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectResourceAction(policyAddr, plancheck.ResourceActionUpdate),
			}},
			Check: resource.ComposeAggregateTestCheckFunc(
				storedPolicy(s, "default", want),
				stateMatchesStore(s, policyAddr, "default", policy.PolicyPath("main")),
			),
		},
		{
			// Deleted by hand: it leaves state, so the plan creates it again.
			PreConfig: func() { s.Delete("default", policy.PolicyPath("main")) },
			Config:    cfg,
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectResourceAction(policyAddr, plancheck.ResourceActionCreate),
			}},
			Check: storedPolicy(s, "default", want),
		},
	})
}

func TestAccPolicy_existingObjectIsNotOverwritten(t *testing.T) {
	s := accServer(t)
	other := withPolicy(func(p *policy.Policy) { p.MaxTasksPerGPU = 2 })
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		Steps: []resource.TestStep{{
			PreConfig: func() { s.Put("default", policy.PolicyPath("main"), storetest.EncodePolicy(t, other)) },
			Config: providerBlock(s, mgmtToken) + `
resource "gpufrac_policy" "main" {
  name = "main"
}`,
			ExpectError: words(`already exists, so it was not overwritten. Bring it under Terraform with ` +
				"`terraform import gpufrac_policy.<label> main@default`"),
		}},
	})
	// The object someone else wrote is untouched.
	if err := storedPolicy(s, "default", other)(nil); err != nil {
		t.Error(err)
	}
}

func TestAccPolicy_casConflict(t *testing.T) {
	s := accServer(t)
	p := providerBlock(s, mgmtToken)
	someoneElse := withPolicy(func(p *policy.Policy) { p.MaxTasksPerGPU = 3 })
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		// Plans without refresh, so a change made after the last refresh reaches apply, as
		// with `-refresh=false` or a saved plan applied later.
		AdditionalCLIOptions: &resource.AdditionalCLIOptions{Plan: resource.PlanOptions{NoRefresh: true}},
		Steps: []resource.TestStep{
			{Config: p + `
resource "gpufrac_policy" "main" {
  name = "main"
}`},
			{
				PreConfig: func() { s.Put("default", policy.PolicyPath("main"), storetest.EncodePolicy(t, someoneElse)) },
				Config: p + `
resource "gpufrac_policy" "main" {
  name     = "main"
  headroom = "3GiB"
}`,
				ExpectError: words("gpufrac_policy changed outside Terraform"),
			},
			{
				// The other writer's change survived the conflicting apply.
				PreConfig: func() {
					if err := storedPolicy(s, "default", someoneElse)(nil); err != nil {
						t.Errorf("the conflicting apply overwrote another writer's change: %v", err)
					}
				},
				Config: p + `
resource "gpufrac_policy" "main" {
  name = "main"
}`,
				PlanOnly: true,
			},
		},
	})
}

func TestAccPolicy_permissionDenied(t *testing.T) {
	s := accServer(t)
	cfg := `
resource "gpufrac_policy" "main" {
  name = "main"
}`
	accTest(t, s, []resource.TestStep{
		{
			// A read-only token cannot create.
			Config:      providerBlock(s, roToken) + cfg,
			ExpectError: words("Permission denied"),
		},
		{Config: providerBlock(s, mgmtToken) + cfg},
		{
			// A token that cannot read must fail the refresh, never drop the resource.
			Config:      providerBlock(s, noToken) + cfg,
			ExpectError: words("Could not read gpufrac_policy"),
		},
		{
			// Still in state: nothing to do with a good token again.
			Config:           providerBlock(s, mgmtToken) + cfg,
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
		},
	})
}

func TestAccPolicy_badInput(t *testing.T) {
	s := accServer(t)
	p := providerBlock(s, mgmtToken)
	step := func(body string, want string) resource.TestStep {
		return resource.TestStep{Config: p + "resource \"gpufrac_policy\" \"main\" {\n" + body + "\n}", PlanOnly: true, ExpectError: words(want)}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: accFactories,
		Steps: []resource.TestStep{
			step(`name = "main"
headroom = "12 GiBs"`, `invalid size "12 GiBs": unknown unit "GiBs"`),
			step(`name = "main"
mode = "mig"`, `mode = "mig": must be "mps" or "isolated"`),
			step(`name = "main"
max_tasks_per_gpu = 0`, `max_tasks_per_gpu = 0: must be between 1 and 64`),
			step(`name = "gpu.pool"`, `name = "gpu.pool": must be 1-64 letters, digits, '-', '_' or '~'`),
			step(`name = "main"
unit = "1MiB"`, `unit = 1MiB: must be between 64MiB and 64GiB`),
			step(`name = "main"
watchdog_interval = "fast"`, `"fast" is not a duration`),
		},
	})
	if n := len(s.List()); n != 0 {
		t.Errorf("bad input wrote %d variables", n)
	}
}

// Percentages with no exact float64 (12.3) come back from state as the decimal Terraform wrote
// and from the provider as the nearest float64: the same value, so the plan after apply is
// empty and nothing is written again.
func TestAccPolicy_decimalPercentsPlanNothingAfterApply(t *testing.T) {
	s := accServer(t)
	cfg := providerBlock(s, mgmtToken) + `
resource "gpufrac_policy" "main" {
  name               = "main"
  cap_margin_percent = 12.3
  sm_budget_percent  = 133.7
}

resource "gpufrac_template" "llama" {
  name              = "llama"
  policy            = gpufrac_policy.main.name
  policy_sizing     = gpufrac_policy.main.sizing
  peak              = "10GiB"
  sm_active_percent = 33.3
}`
	want := withPolicy(func(p *policy.Policy) { p.CapMarginPercent, p.SMBudgetPercent = 12.3, 133.7 })
	var written uint64
	accTest(t, s, []resource.TestStep{
		{
			// The harness plans again after the apply and fails on anything but an empty plan.
			Config: cfg,
			Check: resource.ComposeAggregateTestCheckFunc(
				storedPolicy(s, "default", want),
				func(*terraform.State) error {
					v, _ := s.Get("default", policy.PolicyPath("main"))
					written = v.ModifyIndex
					return nil
				},
			),
		},
		{
			Config:           cfg,
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			Check: func(*terraform.State) error {
				if v, _ := s.Get("default", policy.PolicyPath("main")); v.ModifyIndex != written {
					return fmt.Errorf("an unchanged policy was written again: modify index %d, was %d", v.ModifyIndex, written)
				}
				return nil
			},
		},
		importStep("", policyAddr, "main@default"),
	})
}

// A provider pointed at something that answers 404 but is not Nomad's Variables API (a proxy, a
// wrong address or base path) fails the refresh with an error that names the address and the
// request, and keeps every object in state: taking that 404 for "deleted" would drop them all
// and plan to create them again.
func TestAccPolicy_404FromElsewhereIsAnError(t *testing.T) {
	s := accServer(t)
	elsewhere := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(elsewhere.Close)
	cfg := `
resource "gpufrac_policy" "main" {
  name = "main"
}

resource "gpufrac_template" "llama" {
  name   = "llama"
  policy = gpufrac_policy.main.name
  peak   = "20GiB"
}`
	accTest(t, s, []resource.TestStep{
		{Config: providerBlock(s, mgmtToken) + cfg},
		{
			Config:   providerAt(elsewhere.URL, mgmtToken) + cfg,
			PlanOnly: true,
			ExpectError: words(`Could not read gpufrac_policy Nomad Variable "gpufrac/policy/main" in namespace "default": ` +
				`read gpufrac/policy/main in namespace default at ` + elsewhere.URL +
				`: GET /v1/var/gpufrac/policy/main answered 404 with "404 page not found"`),
		},
		{
			// Back at Nomad: nothing left state, so there is nothing to do.
			Config:           providerBlock(s, mgmtToken) + cfg,
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
		},
	})
}
