package deviceplugin

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/zclconf/go-cty/cty"
	ctymsgpack "github.com/zclconf/go-cty/cty/msgpack"

	"github.com/gpufrac/gpufrac/acctest/nomad/emulator"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// encode produces SetConfig bytes from agent HCL exactly as the emulated agent does.
func encode(t *testing.T, hcl string) []byte {
	t.Helper()
	b, err := emulator.EncodeConfig(ConfigSpec(), hcl)
	if err != nil {
		t.Fatalf("encode %q: %v", hcl, err)
	}
	return b
}

func TestSpecAndDecodeTypeAgree(t *testing.T) {
	spec, err := emulator.SpecToHCLDec(ConfigSpec())
	if err != nil {
		t.Fatalf("Nomad could not convert our schema: %v", err)
	}
	if got := hcldec.ImpliedType(spec); !got.Equals(ConfigType()) {
		t.Fatalf("schema implies %s, SetConfig decodes %s", got.FriendlyName(), ConfigType().FriendlyName())
	}
}

func TestDefaults(t *testing.T) {
	want := Config{
		Enabled: true, GPUBackend: "nvml", SimulatedDir: "/var/lib/gpufrac/simgpu", Unit: size.GiB,
		StateDir: DefaultStateDir, PolicyName: "default", FingerprintPeriod: time.Minute,
		GPUModes: map[string]policy.Mode{}, MPSRoot: "/run/gpufrac/mps", DeviceNodes: true,
		ReservationGrace: DefaultReservationGrace, Fence: true, FenceDir: "/var/lib/gpufrac/fence",
		Borrow: node.DefaultBorrow, BorrowWait: node.DefaultBorrowWait,
	}
	for name, b := range map[string][]byte{"no bytes": nil, "empty config block": nil, "agent without config": nil} {
		if name == "empty config block" {
			b = encode(t, "config {}")
		}
		if name == "agent without config" {
			b = encode(t, "")
		}
		got, err := ParseConfig(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
	}
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name  string
		hcl   string
		check func(Config) bool
	}{
		{"simulated", `config {
			gpu_backend = "simulated"
			simulated_gpus = ["H100=80GiB", "2xA100=40GiB"]
			simulated_dir = "/tmp/sim"
		}`, func(c Config) bool {
			return c.GPUBackend == "simulated" && len(c.SimulatedGPUs) == 2 && c.SimulatedDir == "/tmp/sim"
		}},
		{"unit and period", `config {
			unit = "512MiB"
			fingerprint_period = "30s"
		}`, func(c Config) bool { return c.Unit == 512*size.MiB && c.FingerprintPeriod == 30*time.Second }},
		{"modes by uuid and index", `config {
			gpu_modes = { "0" = "mps", "GPU-0bc34d7e-1f2a-4b5c-8d9e-0123456789ab" = "isolated" }
		}`, func(c Config) bool {
			return c.GPUModes["0"] == policy.ModeMPS && c.GPUModes["GPU-0bc34d7e-1f2a-4b5c-8d9e-0123456789ab"] == policy.ModeIsolated
		}},
		{"nomad policy block", `config {
			policy {
				address = "https://nomad.example:4646"
				token_file = "/etc/gpufrac/token"
				name = "inference"
			}
		}`, func(c Config) bool {
			return c.Nomad != nil && c.Nomad.Address == "https://nomad.example:4646" && c.Nomad.TokenFile == "/etc/gpufrac/token" &&
				c.Nomad.Name == "inference"
		}},
		{"nomad policy block defaults", `config {
			policy {}
		}`, func(c Config) bool { return c.Nomad != nil && c.Nomad.Name == "default" && c.Nomad.Address == "" }},
		{"toggles", `config {
			enabled = false
			docker_runtime = true
			device_nodes = false
			ignored_gpu_ids = ["GPU-bbbbbbbb-1f2a-4b5c-8d9e-0123456789ab", "1"]
		}`, func(c Config) bool {
			return !c.Enabled && c.DockerRuntime && !c.DeviceNodes && reflect.DeepEqual(c.IgnoredGPUIDs, []string{"1", "GPU-bbbbbbbb-1f2a-4b5c-8d9e-0123456789ab"})
		}},
		{"the default unit beside a policy source", `config {
			unit = "1024MiB"
			policy { address = "http://nomad:4646" }
		}`, func(c Config) bool { return c.Nomad != nil && c.Unit == size.GiB }},
		{"policy_name of a policy_file", `config {
			policy_file = "/etc/gpufrac/policy.hcl"
			policy_name = "inference"
		}`, func(c Config) bool { return c.PolicyFile == "/etc/gpufrac/policy.hcl" && c.PolicyName == "inference" }},
		{"fence_dir beside state_dir", `config {
			state_dir = "/srv/gpufrac"
			fence_dir = "/srv/gpufrac2"
		}`, func(c Config) bool { return c.FenceDir == "/srv/gpufrac2" }},
		{"fence_dir = state_dir without the fence mounts nothing", `config {
			state_dir = "/srv/gpufrac"
			fence_dir = "/srv/gpufrac"
			fence = false
		}`, func(c Config) bool { return !c.Fence }},
		{"ignored XIDs", `config {
			ignored_xids = [92, 63, 92]
		}`, func(c Config) bool { return reflect.DeepEqual(c.IgnoredXIDs, []uint64{63, 92}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig(encode(t, tt.hcl))
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Errorf("decoded %+v", c)
			}
		})
	}
}

func TestParseConfigRejects(t *testing.T) {
	tests := []struct {
		hcl  string
		want []string // each must appear in the error
	}{
		{`config { gpu_backend = "cuda" }`, []string{"gpu_backend", `"cuda"`}},
		{`config { unit = "1 parsec" }`, []string{"unit", `"1 parsec"`}},
		{`config { unit = "1MiB" }`, []string{"unit", `"1MiB"`, "64MiB"}},
		// The one size parser: a negative size and a fraction of a byte say what is wrong.
		{`config { unit = "-1GiB" }`, []string{"unit", `"-1GiB"`, "negative"}},
		{`config { unit = "1.5" }`, []string{"unit", `"1.5"`, "a fraction of a byte"}},
		{`config { fingerprint_period = "soon" }`, []string{"fingerprint_period", `"soon"`}},
		{`config { fence_library = "lib/libgpufrac-fence.so" }`, []string{"fence_library", `"lib/libgpufrac-fence.so"`, "absolute"}},
		{`config { fence_dir = "fence" }`, []string{"fence_dir", `"fence"`, "absolute"}},
		{`config { fingerprint_period = "1ms" }`, []string{"fingerprint_period", `"1ms"`}},
		{`config { reservation_grace = "forever" }`, []string{"reservation_grace", `"forever"`}},
		{`config { reservation_grace = "1s" }`, []string{"reservation_grace", `"1s"`, "10s"}},
		{`config { state_dir = "relative/dir" }`, []string{"state_dir", `"relative/dir"`}},
		{`config { simulated_gpus = ["H100=80GiB"] }`, []string{"simulated_gpus", "H100=80GiB", "simulated"}},
		{`config { simulated_dir = "/srv/simgpu" }`, []string{"simulated_dir", `"/srv/simgpu"`, `gpu_backend = "simulated"`}},
		{`config {
			gpu_backend = "simulated"
			simulated_gpus = ["H100=lots"]
		}`, []string{"simulated_gpus", "H100=lots"}},
		{`config { metrics_addr = "9410" }`, []string{"metrics_addr", `"9410"`, "host:port"}},
		{`config { metrics_addr = ":http" }`, []string{"metrics_addr", `":http"`}},
		{`config {
			gpu_backend = "simulated"
			simulated_gpus = ["H100=16383PiB"]
		}`, []string{"simulated_gpus", "H100=16383PiB", "above 2TiB"}},
		{`config { gpu_modes = { "0" = "shared" } }`, []string{"gpu_modes.0", `"shared"`}},
		{`config {
			gpu_modes = { "2" = "mps" }
			ignored_gpu_ids = ["2"]
		}`, []string{`gpu_modes.2 = "mps"`, "ignored_gpu_ids"}},
		{`config {
			policy_file = "/etc/gpufrac/policy.json"
			policy {}
		}`, []string{"policy_file", "not both"}},
		{`config {
			policy { name = "a/b" }
		}`, []string{"policy.name", `"a/b"`}},
		{`config {
			policy {
				token = "secret"
				token_file = "/t"
			}
		}`, []string{"policy.token_file", "not both"}},
		{`config { policy_name = "" }`, []string{"policy_name", `""`}},
		{`config { borrow = "maybe" }`, []string{"borrow", `"maybe"`, `"lend"`}},
		{`config {
			borrow = "wait"
			fence = false
		}`, []string{"borrow", `"wait"`, "fence = true"}},
		{`config { borrow_wait = "-1s" }`, []string{"borrow_wait", `"-1s"`, "between 0s and 10m"}},
		{`config { borrow_wait = "a while" }`, []string{"borrow_wait", `"a while"`}},
		{`config { ignored_xids = [0] }`, []string{"ignored_xids = 0", "XID 0 does not exist"}},
		{`config { ignored_xids = [4.5] }`, []string{"ignored_xids = 4.5", "whole number"}},
		{`config { ignored_xids = [-79] }`, []string{"ignored_xids = -79", "whole number"}},
		{`config { policy_name = "gpu.pool" }`, []string{"policy_name", `"gpu.pool"`, "must be " + policy.NameRule}},
		// policy_name names the policy of policy_file alone: without it, the name was dropped
		// and the built-in policy (or policy.name's) served instead of the one asked for.
		{`config { policy_name = "inference" }`, []string{"policy_name", `"inference"`, "policy_file"}},
		{`config {
			policy_name = "inference"
			policy { address = "http://nomad:4646" }
		}`, []string{"policy_name", `"inference"`, "policy.name"}},
		// unit is the fallback for a node with no policy source; with one, the policy's
		// unit_bytes serves and a unit of another size was dropped without a word.
		{`config {
			unit = "512MiB"
			policy { address = "http://nomad:4646" }
		}`, []string{"unit", `"512MiB"`, "unit_bytes"}},
		{`config {
			unit = "2GiB"
			policy_file = "/etc/gpufrac/policy.json"
		}`, []string{"unit", `"2GiB"`, "policy_file"}},
		// Every task gets fence_dir read-only: one that holds state_dir hands each task the
		// ledger, and with it every other task's reservation token.
		{`config {
			state_dir = "/srv/gpufrac"
			fence_dir = "/srv/gpufrac"
		}`, []string{"fence_dir", `"/srv/gpufrac"`, "state_dir", "token"}},
		{`config { fence_dir = "/var/lib" }`, []string{"fence_dir", `"/var/lib"`, `state_dir ("/var/lib/gpufrac")`}},
		{`config {
			state_dir = "/srv/fence-caps/state"
			fence_dir = "/srv/fence"
		}`, []string{"fence_dir", `"/srv/fence"`, "/srv/fence-caps"}},
		// So would a Nomad ACL token file there.
		{`config { policy { token_file = "/var/lib/gpufrac/fence/nomad-token" } }`,
			[]string{"policy.token_file", `"/var/lib/gpufrac/fence/nomad-token"`, "/var/lib/gpufrac/fence"}},
		{`config {
			fence_dir = "/etc/gpufrac"
			violations { token_file = "/etc/gpufrac-lib/token" }
		}`, []string{"violations.token_file", `"/etc/gpufrac-lib/token"`, "/etc/gpufrac-lib"}},
	}
	for _, tt := range tests {
		t.Run(tt.want[0], func(t *testing.T) {
			_, err := ParseConfig(encode(t, tt.hcl))
			if err == nil {
				t.Fatalf("accepted %s", tt.hcl)
			}
			if !errors.Is(err, policy.ErrInvalid) {
				t.Errorf("error does not wrap a FieldError: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %s", err, w)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error leaks the token: %v", err)
			}
		})
	}
}

func TestParseConfigRejectsTypeMismatch(t *testing.T) {
	// Nomad's hcldec refuses a wrong type before the plugin sees it; make sure it does.
	if _, err := emulator.EncodeConfig(ConfigSpec(), `config { enabled = "maybe" }`); err == nil ||
		!strings.Contains(err.Error(), "enabled") {
		t.Errorf("a string for a bool passed the schema: %v", err)
	}
	if _, err := ParseConfig([]byte{0x92, 0x01, 0x02}); err == nil {
		t.Error("garbage msgpack accepted")
	}
}

func TestSetConfigIdempotent(t *testing.T) {
	s := NewServer(Options{})
	defer s.Shutdown()
	b := encode(t, `config {
		gpu_backend = "simulated"
		state_dir = "`+t.TempDir()+`"
	}`)
	for i := 0; i < 3; i++ {
		if err := s.SetConfig(b, "v0.1.0"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if err := s.SetConfig(b, "v0.2.0"); err == nil {
		t.Error("an API version this plugin does not speak was accepted")
	}
	if got := s.config().GPUBackend; got != "simulated" {
		t.Errorf("backend %q after SetConfig", got)
	}
}

// msgpackConfig is the plugin's config object with every key null but those of set, and the keys
// of drop left out: what an agent sends whose schema is not this binary's (one replaced in
// plugin_dir while the agent runs, relaunched after a crash with the config decoded at agent
// start) or a hand-made SetConfig.
func msgpackConfig(t *testing.T, set map[string]cty.Value, drop ...string) []byte {
	t.Helper()
	vals := map[string]cty.Value{}
	for k, ty := range ConfigType().AttributeTypes() {
		if !slices.Contains(drop, k) {
			vals[k] = cty.NullVal(ty)
		}
	}
	maps.Copy(vals, set)
	obj := cty.ObjectVal(vals)
	b, err := ctymsgpack.Marshal(obj, obj.Type())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A config the schema did not shape is refused naming each key that is wrong, as Nomad's own
// decoding does for the agent file: "unsupported attribute" alone sends the operator through
// every key.
func TestSetConfigNamesKeysTheSchemaDoesNotHave(t *testing.T) {
	policyType := ConfigType().AttributeType(KeyPolicy)
	policyVals := map[string]cty.Value{}
	for k, ty := range policyType.AttributeTypes() {
		policyVals[k] = cty.NullVal(ty)
	}
	policyVals["adress"] = cty.StringVal("http://nomad:4646")
	tests := []struct {
		name string
		b    []byte
		want []string
	}{
		{"unknown key beside all others", msgpackConfig(t, map[string]cty.Value{"enabeld": cty.False}), []string{"enabeld"}},
		{"unknown key instead of one", msgpackConfig(t, map[string]cty.Value{"enabeld": cty.False}, KeyEnabled), []string{"enabeld", KeyEnabled}},
		{"missing key", msgpackConfig(t, nil, KeyBorrowWait), []string{KeyBorrowWait}},
		{"wrong type", msgpackConfig(t, map[string]cty.Value{KeyUnit: cty.NumberIntVal(5)}), []string{KeyUnit, "string"}},
		{"wrong type in a list", msgpackConfig(t, map[string]cty.Value{KeyIgnoredGPUIDs: cty.TupleVal([]cty.Value{cty.StringVal("0"), cty.True})}), []string{KeyIgnoredGPUIDs + "[1]"}},
		{"unknown key in a block", msgpackConfig(t, map[string]cty.Value{KeyPolicy: cty.ObjectVal(policyVals)}), []string{"policy.adress"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := NewServer(Options{}).SetConfig(tt.b, APIVersion)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
			if strings.Contains(err.Error(), "nomad:4646") {
				t.Errorf("error %q prints a value: a mistyped key may hold a token", err)
			}
		})
	}
}
