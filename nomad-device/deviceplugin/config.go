package deviceplugin

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	vmsgpack "github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/msgpack"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/mps"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/node"
	hclspecpb "github.com/gpufrac/gpufrac/nomad-device/proto/hclspec"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
	"github.com/gpufrac/gpufrac/size"
)

// option is one key of the plugin's `config { ... }` block. This table is the only place the
// schema is written: the hclspec Nomad receives, the cty type SetConfig decodes with and the
// defaults applied to nulls are all derived from it, so they cannot drift apart.
type option struct {
	Name string
	// Type is an HCL type expression, as Nomad parses it: "string", "list(string)"...
	Type string
	// Default is an HCL expression; strings carry their quotes.
	Default string
	// Nested, when set, makes this a block (Type and Default unused).
	Nested []option
}

// Config keys. They are a contract with operators' agent configs: renaming one breaks them.
const (
	KeyEnabled           = "enabled"
	KeyGPUBackend        = "gpu_backend"
	KeySimulatedGPUs     = "simulated_gpus"
	KeySimulatedDir      = "simulated_dir"
	KeyUnit              = "unit"
	KeyStateDir          = "state_dir"
	KeyPolicyFile        = "policy_file"
	KeyPolicyName        = "policy_name"
	KeyPolicy            = "policy"
	KeyIgnoredGPUIDs     = "ignored_gpu_ids"
	KeyIgnoredXIDs       = "ignored_xids"
	KeyFingerprintPeriod = "fingerprint_period"
	KeyDockerRuntime     = "docker_runtime"
	KeyGPUModes          = "gpu_modes"
	KeyMPSRoot           = "mps_root"
	KeyMPSControl        = "mps_control"
	KeyDeviceNodes       = "device_nodes"
	KeyReservationGrace  = "reservation_grace"
	KeyFence             = "fence"
	KeyFenceLibrary      = "fence_library"
	KeyFenceDir          = "fence_dir"
	KeyViolations        = "violations"
	KeyMetricsAddr       = "metrics_addr"
	KeyBorrow            = "borrow"
	KeyBorrowWait        = "borrow_wait"
)

// borrowHold is the rule the ledger holds borrowers by.
func (c Config) borrowHold() policy.HoldRule {
	if c.BorrowHold == nil {
		return policy.DefaultHold
	}
	return *c.BorrowHold
}

// DefaultReservationGrace is how long a reservation survives with no live process carrying its
// token. Nomad has no release call, so this is what frees the units of a task that died; it is
// long because a docker task's first process only starts after its image is pulled.
const DefaultReservationGrace = 10 * time.Minute

// DefaultStateDir holds the ledger (and the simulated GPUs' state unless simulated_dir is set).
const DefaultStateDir = "/var/lib/gpufrac"

// nomadTargetOptions reach a Nomad agent and namespace; the policy and violations blocks both
// take them, read into a NomadTarget.
var nomadTargetOptions = []option{
	{Name: "address", Type: "string", Default: `""`},
	{Name: "token", Type: "string", Default: `""`},
	{Name: "token_file", Type: "string", Default: `""`},
	{Name: "namespace", Type: "string", Default: `""`},
	{Name: "region", Type: "string", Default: `""`},
	{Name: "ca_file", Type: "string", Default: `""`},
}

var options = []option{
	{Name: KeyEnabled, Type: "bool", Default: "true"},
	{Name: KeyGPUBackend, Type: "string", Default: `"nvml"`},
	{Name: KeySimulatedGPUs, Type: "list(string)", Default: "[]"},
	{Name: KeySimulatedDir, Type: "string", Default: `""`},
	{Name: KeyUnit, Type: "string", Default: `"` + policy.DefaultUnitBytes.String() + `"`},
	{Name: KeyStateDir, Type: "string", Default: `"` + DefaultStateDir + `"`},
	{Name: KeyPolicyFile, Type: "string", Default: `""`},
	{Name: KeyPolicyName, Type: "string", Default: `"` + policy.DefaultName + `"`},
	{Name: KeyPolicy, Nested: append(slices.Clone(nomadTargetOptions),
		option{Name: "name", Type: "string", Default: `"` + policy.DefaultName + `"`})},
	{Name: KeyIgnoredGPUIDs, Type: "list(string)", Default: "[]"},
	{Name: KeyIgnoredXIDs, Type: "list(number)", Default: "[]"},
	{Name: KeyFingerprintPeriod, Type: "string", Default: `"1m"`},
	{Name: KeyDockerRuntime, Type: "bool", Default: "false"},
	// A list of maps because Nomad parses agent files with HCL1, which turns `gpu_modes = {...}`
	// (and `gpu_modes { ... }`) into a list holding one map.
	{Name: KeyGPUModes, Type: "list(map(string))", Default: "[]"},
	{Name: KeyMPSRoot, Type: "string", Default: `"` + mps.DefaultRoot + `"`},
	{Name: KeyMPSControl, Type: "string", Default: `""`},
	{Name: KeyDeviceNodes, Type: "bool", Default: "true"},
	{Name: KeyReservationGrace, Type: "string", Default: `"` + DefaultReservationGrace.String() + `"`},
	{Name: KeyFence, Type: "bool", Default: "true"},
	{Name: KeyFenceLibrary, Type: "string", Default: `""`},
	{Name: KeyFenceDir, Type: "string", Default: `""`},
	{Name: KeyMetricsAddr, Type: "string", Default: `""`},
	{Name: KeyBorrow, Type: "string", Default: `"` + node.DefaultBorrow + `"`},
	{Name: KeyBorrowWait, Type: "string", Default: `"` + node.DefaultBorrowWait.String() + `"`},
	// Where violations are published for `gpufrac controller` (absent: not published).
	{Name: KeyViolations, Nested: nomadTargetOptions},
}

// Config is the decoded and validated plugin configuration.
type Config struct {
	Enabled       bool
	GPUBackend    string
	SimulatedGPUs []string
	// SimulatedDir defaults to <StateDir>/simgpu.
	SimulatedDir string
	// Unit is the memory behind one instance when no policy source is configured. A configured
	// policy (policy_file or the policy block) always carries unit_bytes and wins: every node of
	// a fleet must agree on what `count = N` means.
	Unit       size.Bytes
	StateDir   string
	PolicyFile string
	// PolicyName is the policy read from PolicyFile.
	PolicyName string
	// Nomad, when non-nil, reads the policy from Nomad Variables.
	Nomad         *NomadPolicy
	IgnoredGPUIDs []string
	// IgnoredXIDs are critical XIDs that leave a GPU in service (gpu.HealthOptions), sorted.
	IgnoredXIDs       []uint64
	FingerprintPeriod time.Duration
	DockerRuntime     bool
	// GPUModes maps a GPU UUID or index (as a decimal string) to its enforcement mode.
	GPUModes    map[string]policy.Mode
	MPSRoot     string
	MPSControl  string
	DeviceNodes bool
	// ReservationGrace ends a reservation that no live process has carried for this long.
	ReservationGrace time.Duration
	// BorrowHold pauses admissions on a GPU where a borrower waited until it is served (the
	// ledger's rule, the same as gpufrac run's); nil = policy.DefaultHold. Not a config key:
	// tests set it to hold for milliseconds.
	BorrowHold *policy.HoldRule
	// Fence puts every task process under the allocation fence (LD_PRELOAD of FenceLibrary,
	// empty = beside the plugin binary), its tables and a copy of the library in FenceDir
	// (default <StateDir>/fence), which every task mounts at the same path.
	Fence        bool
	FenceLibrary string
	FenceDir     string
	// Violations, when non-nil, is where violations are published as Nomad Variables.
	Violations *NomadTarget
	// MetricsAddr, when set, serves Prometheus metrics at http://<MetricsAddr>/metrics; a bare
	// ":port" listens on every interface (the Prometheus convention).
	MetricsAddr string
	// Borrow is the borrowing rule of tasks on isolated GPUs (node.BorrowAuto, the default
	// of both front ends, BorrowOff, BorrowNow, BorrowWait, BorrowLend): with it on, a task's
	// units are its guarantee and the GPU's budget its limit. It needs the fence (auto is off
	// without it). BorrowWait bounds a borrower's wait.
	Borrow     string
	BorrowWait time.Duration
}

// NomadTarget is a Nomad agent and namespace to reach: the `violations { ... }` block, where
// violations are written, and the connection of the `policy { ... }` block. Empty fields fall
// back to NOMAD_ADDR, NOMAD_TOKEN... inherited from the agent.
type NomadTarget struct {
	Address, Token, TokenFile, Namespace, Region, CAFile string
}

// connection is how the Nomad Variables client reaches t.
func (t NomadTarget) connection() nomadvars.Config {
	return nomadvars.Config{Address: t.Address, Token: t.Token, TokenFile: t.TokenFile, Namespace: t.Namespace,
		Region: t.Region, CACert: t.CAFile}
}

// NomadPolicy is the `policy { ... }` block: where the policy's Nomad Variable lives.
type NomadPolicy struct {
	NomadTarget
	Name string
}

// LedgerDir is where the ledger keeps its state file and lock: state_dir itself, the node's state
// directory as `gpufrac status`, `gpufrac run` and `gpufrac probe` take it (--state-dir, whose
// default for root is the plugin's). In a directory of its own they found no ledger, or opened a
// second one that admitted onto GPUs the plugin's tasks held. A ledger an earlier version kept in
// legacyLedgerDir is moved here at start (adoptLedger).
func (c Config) LedgerDir() string { return c.StateDir }

// legacyLedgerDir is where versions before the node's one ledger kept the plugin's.
func (c Config) legacyLedgerDir() string { return filepath.Join(c.StateDir, "ledger") }

// ConfigSpec is the schema returned from ConfigSchema: an Object whose entries are
// Default(Attr, Literal), and a Block for the policy.
func ConfigSpec() *hclspecpb.Spec { return objectSpec(options) }

func objectSpec(opts []option) *hclspecpb.Spec {
	attrs := make(map[string]*hclspecpb.Spec, len(opts))
	for _, o := range opts {
		if o.Nested != nil {
			attrs[o.Name] = &hclspecpb.Spec{Block: &hclspecpb.Spec_BlockValue{BlockValue: &hclspecpb.Block{
				Name: o.Name, Nested: objectSpec(o.Nested),
			}}}
			continue
		}
		// Nomad converts Default's children without the Object's implied name, so the Attr
		// must carry its own.
		attrs[o.Name] = &hclspecpb.Spec{Block: &hclspecpb.Spec_Default{Default: &hclspecpb.Default{
			Primary: &hclspecpb.Spec{Block: &hclspecpb.Spec_Attr{Attr: &hclspecpb.Attr{Name: o.Name, Type: o.Type}}},
			Default: &hclspecpb.Spec{Block: &hclspecpb.Spec_Literal{Literal: &hclspecpb.Literal{Value: o.Default}}},
		}}}
	}
	return &hclspecpb.Spec{Block: &hclspecpb.Spec_Object{Object: &hclspecpb.Object{Attributes: attrs}}}
}

// compiled is the table turned into cty: the implied type and each default value.
type compiled struct {
	typ      cty.Type
	defaults map[string]cty.Value
	nested   map[string]*compiled
}

var schema = mustCompile(options)

func mustCompile(opts []option) *compiled {
	c, err := compile(opts)
	if err != nil {
		panic(err) // the table is a constant; a bad entry is a programming error caught by any test
	}
	return c
}

func compile(opts []option) (*compiled, error) {
	c := &compiled{defaults: map[string]cty.Value{}, nested: map[string]*compiled{}}
	atys := map[string]cty.Type{}
	for _, o := range opts {
		if o.Nested != nil {
			n, err := compile(o.Nested)
			if err != nil {
				return nil, err
			}
			c.nested[o.Name] = n
			atys[o.Name] = n.typ
			continue
		}
		texpr, diags := hclsyntax.ParseExpression([]byte(o.Type), o.Name, hcl.InitialPos)
		if diags.HasErrors() {
			return nil, fmt.Errorf("option %s: type %q: %s", o.Name, o.Type, diags.Error())
		}
		ty, diags := typeexpr.TypeConstraint(texpr)
		if diags.HasErrors() {
			return nil, fmt.Errorf("option %s: type %q: %s", o.Name, o.Type, diags.Error())
		}
		dexpr, diags := hclsyntax.ParseExpression([]byte(o.Default), o.Name, hcl.InitialPos)
		if diags.HasErrors() {
			return nil, fmt.Errorf("option %s: default %s: %s", o.Name, o.Default, diags.Error())
		}
		dv, diags := dexpr.Value(nil)
		if diags.HasErrors() {
			return nil, fmt.Errorf("option %s: default %s: %s", o.Name, o.Default, diags.Error())
		}
		dv, err := convert.Convert(dv, ty)
		if err != nil {
			return nil, fmt.Errorf("option %s: default %s is not a %s: %w", o.Name, o.Default, o.Type, err)
		}
		atys[o.Name] = ty
		c.defaults[o.Name] = dv
	}
	c.typ = cty.Object(atys)
	return c, nil
}

// ConfigType is the cty type Nomad's msgpack encoding of our schema decodes to.
func ConfigType() cty.Type { return schema.typ }

// get returns attribute name of obj, or its default when absent or null.
// nomadTarget reads block, a block of nomadTargetOptions, reporting a bad value to bad.
func (c *compiled) nomadTarget(block string, obj cty.Value, bad func(key string, val any, reason string)) NomadTarget {
	s := func(name string) string { return c.get(obj, name).AsString() }
	t := NomadTarget{Address: s("address"), Token: s("token"), TokenFile: s("token_file"), Namespace: s("namespace"),
		Region: s("region"), CAFile: s("ca_file")}
	if t.Token != "" && t.TokenFile != "" {
		bad(block+".token_file", strconv.Quote(t.TokenFile), "set token or token_file, not both")
	}
	return t
}

func (c *compiled) get(obj cty.Value, name string) cty.Value {
	if !obj.IsNull() && obj.Type().IsObjectType() && obj.Type().HasAttribute(name) {
		if v := obj.GetAttr(name); !v.IsNull() {
			return v
		}
	}
	return c.defaults[name]
}

// ParseConfig decodes SetConfig's msgpack bytes and validates every key. It touches neither GPUs
// nor the network: Nomad runs it at agent start, where a slow or failing call stops the agent.
// Empty bytes mean "all defaults". Errors name the key and the value.
func ParseConfig(msgpackConfig []byte) (Config, error) {
	obj := cty.NullVal(schema.typ)
	if len(msgpackConfig) > 0 {
		v, err := msgpack.Unmarshal(msgpackConfig, schema.typ)
		if err != nil {
			return Config{}, fmt.Errorf("gpufrac config: cannot decode the plugin config (%d bytes of msgpack): %w", len(msgpackConfig), nameKeys(msgpackConfig, schema.typ, err))
		}
		if !v.IsWhollyKnown() {
			// msgpack can carry cty's "unknown" marker, which no agent sends; reading it panics.
			return Config{}, fmt.Errorf("gpufrac config: the plugin config (%d bytes of msgpack) holds unknown values", len(msgpackConfig))
		}
		obj = v
	}
	s := func(name string) string { return schema.get(obj, name).AsString() }
	b := func(name string) bool { return schema.get(obj, name).True() }
	strs := func(name string) []string {
		var out []string
		for _, v := range schema.get(obj, name).AsValueSlice() {
			if !v.IsNull() {
				out = append(out, v.AsString())
			}
		}
		return out
	}
	var errs []error
	bad := func(key string, val any, reason string) {
		errs = append(errs, &policy.FieldError{Field: key, Value: val, Reason: reason})
	}

	c := Config{
		Enabled:       b(KeyEnabled),
		GPUBackend:    s(KeyGPUBackend),
		SimulatedGPUs: strs(KeySimulatedGPUs),
		SimulatedDir:  s(KeySimulatedDir),
		StateDir:      s(KeyStateDir),
		PolicyFile:    s(KeyPolicyFile),
		PolicyName:    s(KeyPolicyName),
		IgnoredGPUIDs: strs(KeyIgnoredGPUIDs),
		DockerRuntime: b(KeyDockerRuntime),
		MPSRoot:       s(KeyMPSRoot),
		MPSControl:    s(KeyMPSControl),
		DeviceNodes:   b(KeyDeviceNodes),
		GPUModes:      map[string]policy.Mode{},
		Fence:         b(KeyFence),
		FenceLibrary:  s(KeyFenceLibrary),
		FenceDir:      s(KeyFenceDir),
	}
	switch c.GPUBackend {
	case gpu.KindNVML:
		if len(c.SimulatedGPUs) > 0 {
			bad(KeySimulatedGPUs, strconv.Quote(strings.Join(c.SimulatedGPUs, ",")), `only allowed with gpu_backend = "simulated"`)
		}
		if c.SimulatedDir != "" {
			bad(KeySimulatedDir, strconv.Quote(c.SimulatedDir), `only allowed with gpu_backend = "simulated"`)
		}
	case gpu.KindSimulated:
		if len(c.SimulatedGPUs) > 0 {
			if _, err := gpu.ParseSimSpec(strings.Join(c.SimulatedGPUs, ",")); err != nil {
				bad(KeySimulatedGPUs, strconv.Quote(strings.Join(c.SimulatedGPUs, ",")), err.Error())
			}
		}
	default:
		bad(KeyGPUBackend, strconv.Quote(c.GPUBackend), `must be "nvml" or "simulated"`)
	}
	if u, err := size.Parse(s(KeyUnit)); err != nil {
		bad(KeyUnit, strconv.Quote(s(KeyUnit)), err.Error())
	} else if u < 64*size.MiB || u > 64*size.GiB {
		bad(KeyUnit, strconv.Quote(s(KeyUnit)), "must be between 64MiB and 64GiB")
	} else {
		c.Unit = u
	}
	if !filepath.IsAbs(c.StateDir) {
		bad(KeyStateDir, strconv.Quote(c.StateDir), "must be an absolute path")
	}
	if c.SimulatedDir == "" {
		c.SimulatedDir = filepath.Join(c.StateDir, "simgpu")
	} else if !filepath.IsAbs(c.SimulatedDir) {
		bad(KeySimulatedDir, strconv.Quote(c.SimulatedDir), "must be an absolute path")
	}
	if c.PolicyFile != "" && !filepath.IsAbs(c.PolicyFile) {
		bad(KeyPolicyFile, strconv.Quote(c.PolicyFile), "must be an absolute path")
	}
	if !filepath.IsAbs(c.MPSRoot) {
		bad(KeyMPSRoot, strconv.Quote(c.MPSRoot), "must be an absolute path")
	}
	if c.MPSControl != "" && !filepath.IsAbs(c.MPSControl) {
		bad(KeyMPSControl, strconv.Quote(c.MPSControl), "must be an absolute path (empty: look it up on PATH)")
	}
	if c.FenceLibrary != "" && !filepath.IsAbs(c.FenceLibrary) {
		bad(KeyFenceLibrary, strconv.Quote(c.FenceLibrary), "must be an absolute path (empty: beside the plugin binary)")
	}
	if c.FenceDir == "" {
		c.FenceDir = filepath.Join(c.StateDir, "fence")
	} else if !filepath.IsAbs(c.FenceDir) {
		bad(KeyFenceDir, strconv.Quote(c.FenceDir), "must be an absolute path (tasks see it at the same path)")
	} else if m := mountHolding(c, c.StateDir); m != "" {
		// The ledger in state_dir holds every reservation's token, which the fence's files
		// never hold (only hashes): a task that can read it can pose as any neighbour.
		bad(KeyFenceDir, strconv.Quote(c.FenceDir), fmt.Sprintf("every task gets %s read-only, and it holds state_dir (%q), whose ledger keeps every task's reservation token: keep state_dir out of it (the default fence_dir is <state_dir>/fence)", m, c.StateDir))
	}
	period := s(KeyFingerprintPeriod)
	if d, err := time.ParseDuration(period); err != nil {
		bad(KeyFingerprintPeriod, strconv.Quote(period), "not a duration such as \"30s\" or \"1m\"")
	} else if d < time.Second || d > 24*time.Hour {
		bad(KeyFingerprintPeriod, strconv.Quote(period), "must be between 1s and 24h")
	} else {
		c.FingerprintPeriod = d
	}
	grace := s(KeyReservationGrace)
	if d, err := time.ParseDuration(grace); err != nil {
		bad(KeyReservationGrace, strconv.Quote(grace), "not a duration such as \"10m\"")
	} else if d < 10*time.Second || d > 24*time.Hour {
		bad(KeyReservationGrace, strconv.Quote(grace), "must be between 10s and 24h")
	} else {
		c.ReservationGrace = d
	}
	if !policy.ValidName(c.PolicyName) {
		bad(KeyPolicyName, strconv.Quote(c.PolicyName), "must be "+policy.NameRule)
	}
	c.Borrow = s(KeyBorrow)
	if err := node.CheckBorrow(c.Borrow); err != nil {
		bad(KeyBorrow, strconv.Quote(c.Borrow), fmt.Sprintf("must be %q, %q, %q, %q or %q", node.BorrowAuto, node.BorrowOff, node.BorrowNow, node.BorrowWait, node.BorrowLend))
	} else if c.Borrow != node.BorrowOff && c.Borrow != node.BorrowAuto && !c.Fence {
		bad(KeyBorrow, strconv.Quote(c.Borrow), "needs fence = true: only the allocation fence can keep a borrower out of its neighbours' guarantees")
	}
	bw := s(KeyBorrowWait)
	if d, err := time.ParseDuration(bw); err != nil {
		bad(KeyBorrowWait, strconv.Quote(bw), "not a duration such as \"60s\"")
	} else if d < 0 || d > 10*time.Minute {
		bad(KeyBorrowWait, strconv.Quote(bw), "must be between 0s and 10m")
	} else {
		c.BorrowWait = d
	}
	for _, modes := range schema.get(obj, KeyGPUModes).AsValueSlice() {
		if modes.IsNull() {
			continue
		}
		for k, v := range modes.AsValueMap() {
			if v.IsNull() {
				continue
			}
			m := policy.Mode(v.AsString())
			switch {
			case gpuRef(k) != "":
				bad(KeyGPUModes+"."+k, strconv.Quote(string(m)), "key "+strconv.Quote(k)+": "+gpuRef(k))
			case m != policy.ModeMPS && m != policy.ModeIsolated:
				bad(KeyGPUModes+"."+k, strconv.Quote(string(m)), `must be "mps" or "isolated"`)
			case c.GPUModes[k] != "" && c.GPUModes[k] != m:
				bad(KeyGPUModes+"."+k, strconv.Quote(string(m)), "set twice with different modes")
			default:
				c.GPUModes[k] = m
			}
		}
	}
	if pb := schema.get(obj, KeyPolicy); !pb.IsNull() {
		n := schema.nested[KeyPolicy]
		np := &NomadPolicy{NomadTarget: n.nomadTarget(KeyPolicy, pb, bad), Name: n.get(pb, "name").AsString()}
		if !policy.ValidName(np.Name) {
			bad(KeyPolicy+".name", strconv.Quote(np.Name), "must be a policy name such as \"default\" (the last segment of gpufrac/policy/<name>)")
		}
		if c.PolicyFile != "" {
			bad(KeyPolicyFile, strconv.Quote(c.PolicyFile), "set policy_file or a policy block, not both")
		}
		c.Nomad = np
	}
	if src := policySourceName(c); src != "" && c.Unit != 0 && c.Unit != policy.DefaultUnitBytes {
		// The policy's unit_bytes sets the unit wherever a source is configured (a fleet must
		// agree on what count = N means), and nothing falls back to this one.
		bad(KeyUnit, strconv.Quote(s(KeyUnit)), "applies only without a policy source, and "+src+" is configured: its unit_bytes sets the unit; drop unit or set unit_bytes in the policy")
	}
	if c.PolicyFile == "" && c.PolicyName != policy.DefaultName && policy.ValidName(c.PolicyName) {
		// Read nowhere else: an operator who set it meant a policy other than the one that
		// would serve, so its being dropped must not go unseen.
		why := "names a policy of policy_file, and no policy_file is set: the built-in default policy would serve instead"
		if c.Nomad != nil {
			why = "names a policy of policy_file; the policy block reads gpufrac/policy/<policy.name>: set policy.name instead"
		}
		bad(KeyPolicyName, strconv.Quote(c.PolicyName), why)
	}
	for _, id := range c.IgnoredGPUIDs {
		if why := gpuRef(id); why != "" {
			bad(KeyIgnoredGPUIDs, strconv.Quote(id), why)
		}
		if m, ok := c.GPUModes[id]; ok {
			bad(KeyGPUModes+"."+id, strconv.Quote(string(m)), ignoredModeReason)
		}
	}
	c.IgnoredXIDs = ignoredXIDs(schema.get(obj, KeyIgnoredXIDs), bad)
	if a := s(KeyMetricsAddr); a != "" {
		// ":port" listens on every interface, as every Prometheus exporter does: Prometheus
		// scrapes from another host. "127.0.0.1:port" keeps the metrics on the node.
		_, port, err := net.SplitHostPort(a)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 {
			bad(KeyMetricsAddr, strconv.Quote(a), `must be "host:port", or ":port" for every interface, e.g. ":9410"`)
		} else {
			c.MetricsAddr = a
		}
	}
	if vb := schema.get(obj, KeyViolations); !vb.IsNull() {
		vt := schema.nested[KeyViolations].nomadTarget(KeyViolations, vb, bad)
		c.Violations = &vt
	}
	targets := []struct {
		block string
		t     *NomadTarget
	}{{KeyPolicy, nil}, {KeyViolations, c.Violations}}
	if c.Nomad != nil {
		targets[0].t = &c.Nomad.NomadTarget
	}
	for _, nt := range targets {
		if nt.t == nil || !filepath.IsAbs(nt.t.TokenFile) || !filepath.IsAbs(c.FenceDir) {
			continue
		}
		if m := mountHolding(c, nt.t.TokenFile); m != "" {
			// A Nomad ACL token every task can read is every task's token.
			bad(nt.block+".token_file", strconv.Quote(nt.t.TokenFile), "every task gets "+m+" read-only: keep the token file out of it")
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("gpufrac config: %w", err)
	}
	slices.Sort(c.IgnoredGPUIDs)
	return c, nil
}

// ignoredModeReason refuses a gpu_modes key for a GPU that ignored_gpu_ids names: the plugin
// sets no mode on a GPU it leaves alone, so the key would only be warned about at each listing.
const ignoredModeReason = "ignored_gpu_ids leaves this GPU alone, and gpufrac sets no mode there: drop one of the two"

// mountHolding is the directory of the fence's that every task gets mounted (fence_dir, the
// library's and the control copies') and that is path or holds it, or "" (or with fence off,
// when nothing is mounted). The comparison is lexical: SetConfig reads no file system.
func mountHolding(c Config, path string) string {
	if !c.Fence {
		return ""
	}
	for _, m := range []string{c.FenceDir, fence.LibraryDir(c.FenceDir), fence.ControlDir(c.FenceDir)} {
		rel, err := filepath.Rel(m, path)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return m
		}
	}
	return ""
}

// ignoredXIDs reads ignored_xids, each a whole number that gpu.CheckIgnoredXID accepts, into a
// sorted list without repeats.
func ignoredXIDs(list cty.Value, bad func(key string, val any, reason string)) []uint64 {
	var out []uint64
	for _, v := range list.AsValueSlice() {
		if v.IsNull() {
			continue
		}
		f := v.AsBigFloat()
		code, acc := f.Uint64()
		if !f.IsInt() || acc != big.Exact {
			bad(KeyIgnoredXIDs, f.Text('g', -1), "not an XID: want a whole number such as 63")
			continue
		}
		if err := gpu.CheckIgnoredXID(code); err != nil {
			bad(KeyIgnoredXIDs, code, err.Error())
			continue
		}
		if !slices.Contains(out, code) {
			out = append(out, code)
		}
	}
	slices.Sort(out)
	return out
}

// nameKeys says which keys of a config that does not decode are wrong: go-cty's errors name
// no key ("unsupported attribute", "an object with 24 attributes is required (25 given)"),
// and an operator must not have to go through every key. Such a config reaches the plugin when
// its schema is not the one the agent decoded with (a binary replaced in plugin_dir while the
// agent runs is relaunched after a crash with the config decoded at agent start) or from a
// hand-made call. Values are never printed: a mistyped key may hold a token.
func nameKeys(b []byte, ty cty.Type, err error) error {
	dec := vmsgpack.NewDecoder(bytes.NewReader(b))
	if errs, ok := keyErrors(dec, ty, ""); ok && len(errs) > 0 {
		return fmt.Errorf("%w (%w)", errors.Join(errs...), err)
	}
	// The keys are right: a value is of the wrong type, and the error's path says where.
	var pe cty.PathError
	if errors.As(err, &pe) && len(pe.Path) > 0 {
		return fmt.Errorf("%s: %w", pathName(pe.Path), err)
	}
	return err
}

// keyErrors reads the msgpack map at dec and names its keys that object type ty lacks and those
// of ty that it lacks, in nested blocks too; false when dec holds no well-formed map. It reads
// key by key, skipping values, so a length field of garbage costs no allocation.
func keyErrors(dec *vmsgpack.Decoder, ty cty.Type, prefix string) ([]error, bool) {
	n, err := dec.DecodeMapLen()
	if err != nil || n < 0 {
		return nil, false
	}
	seen := map[string]bool{}
	var errs []error
	for i := 0; i < n; i++ {
		k, err := dec.DecodeString()
		if err != nil {
			return nil, false
		}
		seen[k] = true
		switch {
		case !ty.HasAttribute(k):
			errs = append(errs, fmt.Errorf("%s%s: not a key of this plugin's config (a typo, or a config decoded with another version's schema: restart the Nomad agent after replacing the plugin)", prefix, k))
		case ty.AttributeType(k).IsObjectType():
			if code, err := dec.PeekCode(); err == nil && code == msgpcode.Nil {
				break // an absent block
			}
			nested, ok := keyErrors(dec, ty.AttributeType(k), prefix+k+".")
			if !ok {
				return nil, false
			}
			errs = append(errs, nested...)
			continue
		}
		if err := dec.Skip(); err != nil {
			return nil, false
		}
	}
	for _, k := range slices.Sorted(maps.Keys(ty.AttributeTypes())) {
		if !seen[k] {
			errs = append(errs, fmt.Errorf("%s%s: missing (a config decoded with another version's schema: restart the Nomad agent after replacing the plugin)", prefix, k))
		}
	}
	return errs, true
}

// pathName writes a cty path as the config's keys read: policy.address, ignored_gpu_ids[1].
func pathName(p cty.Path) string {
	var b strings.Builder
	for _, step := range p {
		var key cty.Value
		switch s := step.(type) {
		case cty.GetAttrStep:
			key = cty.StringVal(s.Name)
		case cty.IndexStep:
			key = s.Key
		}
		switch {
		case key.IsNull() || !key.IsKnown():
		case key.Type() == cty.String:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(key.AsString())
		case key.Type() == cty.Number:
			b.WriteString("[" + key.AsBigFloat().Text('f', -1) + "]")
		}
	}
	return b.String()
}
