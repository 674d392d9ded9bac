package nomad_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/gpufrac/gpufrac/acctest/nomad/emulator"
	"github.com/gpufrac/gpufrac/nomad-device/deviceplugin"
)

// TestExampleClientConfigIsValid pushes examples/nomad/client.hcl's plugin config through the
// same path as an agent: the plugin's schema, msgpack, and SetConfig's validation.
func TestExampleClientConfigIsValid(t *testing.T) {
	src, err := os.ReadFile("../../examples/nomad/client.hcl")
	if err != nil {
		t.Fatal(err)
	}
	f, diags := hclsyntax.ParseConfig(src, "client.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	var stanza *hclsyntax.Block
	for _, b := range f.Body.(*hclsyntax.Body).Blocks {
		if b.Type == "plugin" && len(b.Labels) == 1 && b.Labels[0] == emulator.BinaryName {
			stanza = b
		}
	}
	if stanza == nil {
		t.Fatalf("no plugin %q stanza: the stanza name must be the binary's file name", emulator.BinaryName)
	}
	body := stanza.Body.Range()
	inner := string(src[body.Start.Byte+1 : body.End.Byte-1]) // the stanza's content: config { ... }
	b, err := emulator.EncodeConfig(deviceplugin.ConfigSpec(), inner)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := deviceplugin.ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Nomad == nil || cfg.GPUModes["0"] != "mps" || !cfg.DockerRuntime {
		t.Errorf("example decoded to %+v", cfg)
	}
	// The first fingerprint refuses an entry that names no GPU of the node, and Nomad then
	// disables the plugin: an example merged as it is must name only GPU 0, which every GPU
	// node has.
	for _, id := range cfg.IgnoredGPUIDs {
		if id != "0" {
			t.Errorf("ignored_gpu_ids = %q: the plugin is disabled on every node without that GPU", id)
		}
	}
	for id := range cfg.GPUModes {
		if id != "0" {
			t.Errorf("gpu_modes key %q: the plugin is disabled on every node without that GPU", id)
		}
	}
}

func TestExampleJobsParse(t *testing.T) {
	files, _ := filepath.Glob("../../examples/nomad/*.nomad.hcl")
	if len(files) < 3 {
		t.Fatalf("%d job examples, want raw_exec, exec and docker", len(files))
	}
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, diags := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
		if diags.HasErrors() {
			t.Errorf("%s: %s", path, diags.Error())
			continue
		}
		// Every example asks for gpufrac units through a device block.
		found := false
		var walk func(b *hclsyntax.Body)
		walk = func(b *hclsyntax.Body) {
			for _, blk := range b.Blocks {
				if blk.Type == "device" && len(blk.Labels) == 1 && blk.Labels[0] == "nvidia/gpumem" {
					if _, ok := blk.Body.Attributes["count"]; ok {
						found = true
					}
				}
				walk(blk.Body)
			}
		}
		walk(f.Body.(*hclsyntax.Body))
		if !found {
			t.Errorf(`%s: no device "nvidia/gpumem" { count = N } block`, path)
		}
	}
}

// Every HCL block of the operator's guide parses, so an operator who copies one (a client
// stanza, an ACL policy, a job spec, the controller's job) does not start with a syntax error.
func TestGuideHCLBlocksParse(t *testing.T) {
	doc, err := os.ReadFile("../../docs/plugin.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := strings.Split(string(doc), "```hcl\n")[1:]
	if len(blocks) < 5 {
		t.Fatalf("docs/plugin.md has %d HCL blocks; the guide has at least the stanza, two ACL policies, a job spec and the controller's job", len(blocks))
	}
	for i, b := range blocks {
		src, _, _ := strings.Cut(b, "```")
		if _, diags := hclsyntax.ParseConfig([]byte(src), "docs/plugin.md block "+strconv.Itoa(i+1), hcl.InitialPos); diags.HasErrors() {
			t.Errorf("HCL block %d of docs/plugin.md does not parse: %s\n%s", i+1, diags.Error(), src)
		}
	}
}
