// Package e2e_test joins the two halves of gpufrac: a platform team's `tofu apply` writes a
// policy and a template through the real terraform-provider-gpufrac binary into a Nomad
// Variables server, and the real nomad-device-gpufrac binary, driven by the emulated Nomad
// client agent and reading the same server, re-fingerprints with the new budget and caps a
// reservation of the template's unit count at what the template promised.
package e2e_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/acctest/nomad/emulator"
	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/internal/varserver"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

const (
	adminToken  = "e2e-admin-5c2a"
	pluginToken = "e2e-plugin-reader-81f0"
)

// The configuration a platform team applies; headroom and unit change between applies.
const mainTF = `
terraform {
  required_providers {
    gpufrac = { source = "hashicorp/gpufrac" }
  }
}

variable "address" { type = string }
variable "token" {
  type      = string
  sensitive = true
}
variable "headroom" { type = string }
variable "unit" { type = string }

provider "gpufrac" {
  address = var.address
  token   = var.token
}

resource "gpufrac_policy" "e2e" {
  name     = "e2e"
  headroom = var.headroom
  unit     = var.unit
}

resource "gpufrac_template" "llama" {
  name   = "llama"
  policy = gpufrac_policy.e2e.name
  peak   = "20GiB"
}

data "gpufrac_template" "llama" {
  name       = gpufrac_template.llama.name
  depends_on = [gpufrac_policy.e2e, gpufrac_template.llama]
}

output "units" { value = data.gpufrac_template.llama.units }
output "cap_bytes" { value = data.gpufrac_template.llama.cap_bytes }
output "unit_bytes" { value = gpufrac_policy.e2e.unit_bytes }
`

// tofuRun is one working directory driven by the tofu binary with the provider installed from
// a local plugin directory, as an offline platform team would.
type tofuRun struct {
	t    *testing.T
	bin  string
	dir  string
	env  []string
	vars []string
}

func (r *tofuRun) run(args ...string) string {
	r.t.Helper()
	cmd := exec.Command(r.bin, args...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), r.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("tofu %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (r *tofuRun) apply(headroom, unit string) map[string]int64 {
	r.t.Helper()
	r.run(append([]string{"apply", "-auto-approve", "-input=false", "-no-color",
		"-var", "headroom=" + headroom, "-var", "unit=" + unit}, r.vars...)...)
	var outs map[string]struct{ Value json.Number }
	if err := json.Unmarshal([]byte(r.run("output", "-json", "-no-color")), &outs); err != nil {
		r.t.Fatal(err)
	}
	vals := map[string]int64{}
	for k, v := range outs {
		n, err := v.Value.Int64()
		if err != nil {
			r.t.Fatalf("output %s = %q: %v", k, v.Value, err)
		}
		vals[k] = n
	}
	return vals
}

func setup(t *testing.T) (tofu string, providerDir string) {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("end-to-end test: set TF_ACC=1 and TF_ACC_TERRAFORM_PATH=<absolute path to tofu> (scripts/testacc.sh does both)")
	}
	tofu = os.Getenv("TF_ACC_TERRAFORM_PATH")
	if !filepath.IsAbs(tofu) {
		t.Fatalf("TF_ACC_TERRAFORM_PATH=%q must be the absolute path of a tofu binary (scripts/install-tofu.sh builds one)", tofu)
	}
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	// The provider binary under both registry hosts, so tofu and terraform both find it offline.
	providerDir = filepath.Join(t.TempDir(), "plugins")
	platform := runtime.GOOS + "_" + runtime.GOARCH
	var built string
	for _, host := range []string{"registry.opentofu.org", "registry.terraform.io"} {
		dir := filepath.Join(providerDir, host, "hashicorp", "gpufrac", "0.0.1", platform)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, "terraform-provider-gpufrac_v0.0.1")
		if built == "" {
			cmd := exec.Command("go", "build", "-o", bin, "./terraform-provider")
			cmd.Dir = filepath.Dir(strings.TrimSpace(string(root)))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build terraform-provider: %v\n%s", err, out)
			}
			built = bin
		} else if err := os.Link(built, bin); err != nil {
			t.Fatal(err)
		}
	}
	return tofu, providerDir
}

func TestTofuApplyReachesThePlugin(t *testing.T) {
	tofu, plugins := setup(t)

	srv := varserver.New(varserver.Options{})
	t.Cleanup(srv.Close)
	srv.SetToken(adminToken, varserver.Management()...)
	srv.SetToken(pluginToken, varserver.Rule{Namespace: "default", Path: "gpufrac/*",
		Capabilities: []string{varserver.CapRead, varserver.CapList}})

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(mainTF), 0o644); err != nil {
		t.Fatal(err)
	}
	rc := filepath.Join(dir, "tofurc")
	if err := os.WriteFile(rc, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tf := &tofuRun{t: t, bin: tofu, dir: dir,
		env:  []string{"TF_CLI_CONFIG_FILE=" + rc, "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1"},
		vars: []string{"-var", "address=" + srv.URL(), "-var", "token=" + adminToken}}
	tf.run("init", "-input=false", "-no-color", "-plugin-dir="+plugins)

	// 1. The first apply: 4GiB headroom, 1GiB units.
	out := tf.apply("4GiB", "1GiB")
	if out["unit_bytes"] != int64(size.GiB) {
		t.Fatalf("unit_bytes output %d", out["unit_bytes"])
	}

	// 2. The plugin on an 80GiB GPU reads the policy the provider wrote.
	bin, err := emulator.BuildPlugin(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	tokenFile := filepath.Join(state, "token")
	if err := os.WriteFile(tokenFile, []byte(pluginToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := emulator.StartWith(bin, `config {
  gpu_backend    = "simulated"
  simulated_gpus = ["H100=80GiB"]
  state_dir      = "`+state+`"
  policy {
    address    = "`+srv.URL()+`"
    token_file = "`+tokenFile+`"
    name       = "e2e"
  }
}`, emulator.Options{})
	if err != nil {
		t.Fatalf("agent start: %v", err)
	}
	t.Cleanup(func() {
		c.Close()
		if t.Failed() {
			for i, p := range c.Launches() {
				t.Logf("plugin launch %d stderr:\n%s", i, p.Stderr())
			}
		}
	})
	if _, err := c.WaitFingerprint(60*time.Second, fingerprintIs(76*1024, 1024, 76)); err != nil {
		t.Fatalf("fingerprint after the first apply (want budget 76GiB in 76 units of 1GiB): %v\nlatest: %v", err, describe(c.Latest()))
	}

	// 3. The second apply: more headroom and bigger units. The plugin re-fingerprints.
	out = tf.apply("16GiB", "2GiB")
	if _, err := c.WaitFingerprint(60*time.Second, fingerprintIs(64*1024, 2048, 32)); err != nil {
		t.Fatalf("fingerprint after the second apply (want budget 64GiB in 32 units of 2GiB): %v\nlatest: %v", err, describe(c.Latest()))
	}

	// 4. The template's unit count, computed by the provider, is what a job requests; the plugin
	// caps the reservation at units x unit, the smallest whole number of units that holds the
	// template's cap.
	units, capBytes, unit := out["units"], out["cap_bytes"], out["unit_bytes"]
	pol := policy.Default()
	pol.UnitBytes = 2 * size.GiB
	tmpl := policy.Template{Name: "llama", PeakBytes: 20 * size.GiB}
	if units != int64(tmpl.Units(pol)) || capBytes != int64(tmpl.Cap(pol)) {
		t.Fatalf("provider says %d units, cap %d; policy package says %d, %d", units, capBytes, tmpl.Units(pol), tmpl.Cap(pol))
	}
	group, ids, err := c.Schedule(int(units))
	if err != nil {
		t.Fatalf("schedule %d units: %v", units, err)
	}
	res, err := c.Reserve(ids)
	if err != nil {
		t.Fatalf("Reserve(%s, %d units): %v", group, len(ids), err)
	}
	got, err := strconv.ParseInt(res.GetEnvs()[enforcer.EnvCapBytes], 10, 64)
	if err != nil {
		t.Fatalf("%s = %q: %v", enforcer.EnvCapBytes, res.GetEnvs()[enforcer.EnvCapBytes], err)
	}
	if got != units*unit {
		t.Errorf("plugin capped the reservation at %d bytes, want units x unit = %d", got, units*unit)
	}
	if got < capBytes || got-unit >= capBytes {
		t.Errorf("cap %d does not hold the template's cap %d in the fewest units of %d", got, capBytes, unit)
	}

	// 5. Destroy removes what the provider wrote.
	tf.run(append([]string{"destroy", "-auto-approve", "-input=false", "-no-color",
		"-var", "headroom=16GiB", "-var", "unit=2GiB"}, tf.vars...)...)
	for _, v := range srv.List() {
		t.Errorf("variable %s left after destroy", v.Path)
	}
}

func fingerprintIs(budgetMiB, unitMiB int64, healthyUnits int) func(*devicepb.FingerprintResponse) bool {
	return func(m *devicepb.FingerprintResponse) bool {
		gs := m.GetDeviceGroup()
		if len(gs) != 1 {
			return false
		}
		a := gs[0].GetAttributes()
		return a["budget"].GetIntVal() == budgetMiB && a["unit_size"].GetIntVal() == unitMiB && emulator.HealthyCount(gs[0]) == healthyUnits
	}
}

func describe(m *devicepb.FingerprintResponse) string {
	var b strings.Builder
	for _, g := range m.GetDeviceGroup() {
		a := g.GetAttributes()
		fmt.Fprintf(&b, "[%s budget=%dMiB unit=%dMiB healthy=%d/%d] ", g.GetDeviceName(),
			a["budget"].GetIntVal(), a["unit_size"].GetIntVal(), emulator.HealthyCount(g), len(g.GetDevices()))
	}
	return b.String()
}
