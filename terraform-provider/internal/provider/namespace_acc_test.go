package provider

import (
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

func TestAccNamespaces(t *testing.T) {
	s := accServer(t)
	prov := fmt.Sprintf("provider \"gpufrac\" {\n  address   = %q\n  token     = %q\n  namespace = \"ml\"\n}\n", s.URL(), mgmtToken)
	cfg := prov + `
resource "gpufrac_policy" "main" {
  name = "main"
}

resource "gpufrac_policy" "other" {
  name      = "main"
  namespace = "other"
  headroom  = "8GiB"
}`
	inML := withPolicy(func(*policy.Policy) {})
	inOther := withPolicy(func(p *policy.Policy) { p.HeadroomBytes = 8 * size.GiB })
	accTest(t, s, []resource.TestStep{
		{
			Config: cfg,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("gpufrac_policy.main", tfjsonpath.New("id"), knownvalue.StringExact("main@ml")),
				statecheck.ExpectKnownValue("gpufrac_policy.other", tfjsonpath.New("id"), knownvalue.StringExact("main@other")),
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				storedPolicy(s, "ml", inML),
				storedPolicy(s, "other", inOther),
				nothingIn(s, "default"),
			),
		},
		// A name alone imports from the provider's namespace.
		importStep("", "gpufrac_policy.main", "main"),
		importStep("", "gpufrac_policy.other", "main@other"),
		{
			Config: cfg + `
data "gpufrac_policy" "nope" {
  name = "absent"
}`,
			ExpectError: words(`Nomad Variable "gpufrac/policy/absent" in namespace "ml" does not exist`),
		},
	})
}

func nothingIn(s *varserver.Server, ns string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		for _, v := range s.List() {
			if v.Namespace == ns {
				return fmt.Errorf("unexpected variable %s in namespace %s", v.Path, ns)
			}
		}
		return nil
	}
}
