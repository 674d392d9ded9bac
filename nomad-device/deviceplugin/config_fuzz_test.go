package deviceplugin

import (
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/acctest/nomad/emulator"
)

// FuzzParseConfig feeds the plugin's config decoder agent HCL turned into SetConfig bytes (as the
// agent sends them) and raw bytes: it never panics, and every error says it is the plugin config
// and which part of it is bad.
func FuzzParseConfig(f *testing.F) {
	for _, hcl := range []string{
		``,
		`enabled = true`,
		`gpu_backend = "simulated"
simulated_gpus = ["2xH100=80GiB"]`,
		`unit = "512MiB"
state_dir = "relative"`,
		`unit = "1.5"
fingerprint_period = "0s"`,
	} {
		f.Add(hcl, []byte(nil))
	}
	f.Add("", []byte{0x81, 0xa1, 0x78, 0xc0})
	f.Fuzz(func(t *testing.T, hcl string, raw []byte) {
		inputs := [][]byte{raw}
		if b, err := emulator.EncodeConfig(ConfigSpec(), hcl); err == nil {
			inputs = append(inputs, b)
		}
		for _, in := range inputs {
			c, err := ParseConfig(in)
			if err != nil {
				if !strings.HasPrefix(err.Error(), "gpufrac config: ") || len(err.Error()) <= len("gpufrac config: ") {
					t.Fatalf("ParseConfig(%q): error %q does not say what is bad in the plugin config", in, err)
				}
				continue
			}
			// An accepted config holds a usable unit.
			if c.Unit < 64<<20 {
				t.Fatalf("ParseConfig(%q) accepted a config with no unit size: %+v", in, c)
			}
		}
	})
}
