package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/gpufrac/gpufrac/policy"
)

// Acceptance tests run the provider in-process under the OpenTofu (or Terraform) CLI against
// an in-process fake of Nomad's Variables API. scripts/testacc.sh sets everything up.

const (
	mgmtToken = "mgmt-secret"
	roToken   = "read-only-secret"
	noToken   = "no-variables-secret"
)

var accFactories = map[string]func() (tfprotov6.ProviderServer, error){
	"gpufrac": providerserver.NewProtocol6WithError(New("test")()),
}

// accServer skips the test unless acceptance tests are on, refuses to let the harness download
// a CLI, and starts a Variables server with three tokens: management, read-only on gpufrac/*,
// and one with no variable rights at all.
func accServer(t *testing.T) *varserver.Server {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance test: set TF_ACC=1 and TF_ACC_TERRAFORM_PATH=<absolute path to tofu> (scripts/testacc.sh does both)")
	}
	p := os.Getenv("TF_ACC_TERRAFORM_PATH")
	if p == "" || !filepath.IsAbs(p) {
		t.Fatalf("TF_ACC_TERRAFORM_PATH=%q: set it to the absolute path of a tofu or terraform binary "+
			"(scripts/install-tofu.sh builds one); without it the test harness would try to download Terraform", p)
	}
	s := varserver.New(varserver.Options{ACL: true})
	t.Cleanup(s.Close)
	s.SetToken(mgmtToken, varserver.Management()...)
	s.SetToken(roToken, varserver.Rule{Namespace: "*", Path: "gpufrac/*", Capabilities: []string{varserver.CapRead, varserver.CapList}})
	s.SetToken(noToken, varserver.Rule{Namespace: "*", Path: "other/*", Capabilities: []string{varserver.CapRead}})
	return s
}

// providerBlock configures the provider for s with the given token.
func providerBlock(s *varserver.Server, token string) string {
	return providerAt(s.URL(), token)
}

// providerAt configures the provider for the Nomad address addr with the given token.
func providerAt(addr, token string) string {
	return fmt.Sprintf("provider \"gpufrac\" {\n  address = %q\n  token   = %q\n}\n", addr, token)
}

// requiredProviders is needed to call provider functions; the source must be the address the
// harness registers the in-process provider under.
func requiredProviders() string {
	host := os.Getenv("TF_ACC_PROVIDER_HOST")
	if host == "" {
		host = "registry.terraform.io"
	}
	ns := os.Getenv("TF_ACC_PROVIDER_NAMESPACE")
	if ns == "" {
		ns = "hashicorp"
	}
	return fmt.Sprintf("terraform {\n  required_providers {\n    gpufrac = { source = %q }\n  }\n}\n", host+"/"+ns+"/gpufrac")
}

// words matches the words in order with any white space between them: the CLI wraps long
// diagnostic lines.
func words(s string) *regexp.Regexp {
	parts := strings.Fields(s)
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile(strings.Join(parts, `\s+`))
}

// accTest runs steps against the in-process provider and checks at the end that the test left
// nothing in s.
func accTest(t *testing.T, s *varserver.Server, steps []resource.TestStep) {
	t.Helper()
	resource.Test(t, resource.TestCase{ProtoV6ProviderFactories: accFactories, CheckDestroy: gone(s), Steps: steps})
}

// importStep imports addr by id ("name@namespace" or "name") under config ("": the previous
// step's) and checks that what the import reads is what the state held.
func importStep(config, addr, id string) resource.TestStep {
	return resource.TestStep{Config: config, ResourceName: addr, ImportState: true, ImportStateId: id, ImportStateVerify: true}
}

// storedPolicy checks that the Variable holds exactly policy's encoding of want.
func storedPolicy(s *varserver.Server, ns string, want policy.Policy) resource.TestCheckFunc {
	return stored(s, ns, policy.PolicyKind, want)
}

func storedTemplate(s *varserver.Server, ns string, want policy.Template) resource.TestCheckFunc {
	return stored(s, ns, policy.TemplateKind, want)
}

func stored[T any](s *varserver.Server, ns string, k policy.Kind[T], want T) resource.TestCheckFunc {
	return func(*terraform.State) error {
		path := k.Path(k.NameOf(want))
		v, ok := s.Get(ns, path)
		if !ok {
			return fmt.Errorf("no variable %s in %s", path, ns)
		}
		items, err := k.Encode(want)
		if err != nil {
			return err
		}
		return sameItems(v.Items, items)
	}
}

func sameItems(got, want map[string]string) error {
	if len(got) != len(want) {
		return fmt.Errorf("stored items %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			return fmt.Errorf("stored item %s = %q, want %q (all: %v)", k, got[k], w, got)
		}
	}
	return nil
}

// stateMatchesStore checks that the state's modify_index is the stored variable's: the last
// write or refresh is what Terraform remembers.
func stateMatchesStore(s *varserver.Server, addr, ns, path string) resource.TestCheckFunc {
	return func(st *terraform.State) error {
		rs, ok := st.RootModule().Resources[addr]
		if !ok {
			return fmt.Errorf("%s not in state", addr)
		}
		v, ok := s.Get(ns, path)
		if !ok {
			return fmt.Errorf("no variable %s", path)
		}
		if got := rs.Primary.Attributes["modify_index"]; got != fmt.Sprint(v.ModifyIndex) {
			return fmt.Errorf("state modify_index %s, stored %d", got, v.ModifyIndex)
		}
		return nil
	}
}

// gone checks that nothing is left under gpufrac/ after destroy.
func gone(s *varserver.Server) resource.TestCheckFunc {
	return func(*terraform.State) error {
		for _, v := range s.List() {
			if strings.HasPrefix(v.Path, "gpufrac/") {
				return fmt.Errorf("variable %s@%s still exists after destroy", v.Path, v.Namespace)
			}
		}
		return nil
	}
}

func withPolicy(mut func(*policy.Policy)) policy.Policy {
	p := policy.Default()
	p.Name = "main"
	mut(&p)
	return p
}
