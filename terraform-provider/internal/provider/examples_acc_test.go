package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/terraform-plugin-testing/config"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// TestAccExamples applies the gpufrac half of examples/terraform (the Nomad provider cannot be
// installed offline) and checks that the jobspec it renders for nomad_job is valid HCL whose
// device count is the template's unit count.
func TestAccExamples(t *testing.T) {
	s := accServer(t)
	dir, err := filepath.Abs("../../../examples/terraform")
	if err != nil {
		t.Fatal(err)
	}
	var cfg string
	for _, f := range []string{"variables.tf", "gpufrac.tf"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		cfg += string(b) + "\n"
	}
	// Rendered exactly as jobs.tf renders it for nomad_job.
	cfg += fmt.Sprintf(`
output "llama_jobspec" {
  value = templatefile(%q, {
    namespace = var.namespace
    template  = data.gpufrac_template.llama_finetune.name
    units     = data.gpufrac_template.llama_finetune.units
  })
}
`, filepath.Join(dir, "jobs", "llama-finetune.nomad.hcl"))

	pol := policy.Default()
	pol.HeadroomBytes = 4 * size.GiB
	llama := policy.Template{Name: "llama-7b-finetune", PeakBytes: 20 * size.GiB}
	resnet := policy.Template{Name: "resnet50-train", PeakBytes: size.MustParse("7.5GiB")}
	want := int64(llama.Units(pol))

	accTest(t, s, []resource.TestStep{{
		Config:          requiredProviders() + cfg,
		ConfigVariables: config.Variables{"nomad_addr": config.StringVariable(s.URL()), "nomad_token": config.StringVariable(mgmtToken)},
		ConfigStateChecks: []statecheck.StateCheck{
			statecheck.ExpectKnownOutputValue("units", knownvalue.ObjectExact(map[string]knownvalue.Check{
				"llama_finetune":    knownvalue.Int64Exact(want),
				"resnet_train":      knownvalue.Int64Exact(int64(resnet.Units(pol))),
				"embedding_server":  knownvalue.Int64Exact(6),
				"llama_by_function": knownvalue.Int64Exact(want),
			})),
			statecheck.ExpectKnownOutputValue("llama_jobspec", knownvalue.StringFunc(func(spec string) error {
				return deviceCount(spec, want)
			})),
		},
	}})
}

// deviceCount parses a rendered jobspec and checks its nvidia/gpumem device count.
func deviceCount(spec string, want int64) error {
	f, diags := hclsyntax.ParseConfig([]byte(spec), "job.nomad.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		return fmt.Errorf("rendered jobspec is not valid HCL: %s\n%s", diags.Error(), spec)
	}
	var found []int64
	var walk func(b *hclsyntax.Body)
	walk = func(b *hclsyntax.Body) {
		for _, blk := range b.Blocks {
			if blk.Type == "device" && len(blk.Labels) == 1 && blk.Labels[0] == "nvidia/gpumem" {
				if a, ok := blk.Body.Attributes["count"]; ok {
					v, d := a.Expr.Value(nil)
					if !d.HasErrors() {
						n, _ := v.AsBigFloat().Int64()
						found = append(found, n)
					}
				}
			}
			walk(blk.Body)
		}
	}
	walk(f.Body.(*hclsyntax.Body))
	if len(found) != 1 || found[0] != want {
		return fmt.Errorf("device \"nvidia/gpumem\" counts %v, want exactly one of %d\n%s", found, want, spec)
	}
	return nil
}
