package nomad_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpufrac/gpufrac/acctest/nomad/emulator"
	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/gpufrac/gpufrac/ledger"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
	"github.com/gpufrac/gpufrac/size"
)

// agentConfig is the plugin stanza's config block an operator would write.
func agentConfig(stateDir, gpus, extra string) string {
	return `config {
  gpu_backend    = "simulated"
  simulated_gpus = [` + gpus + `]
  state_dir      = "` + stateDir + `"
  ` + extra + `
}`
}

func start(t *testing.T, hcl string) *emulator.Client {
	t.Helper()
	c, err := emulator.StartWith(binary, hcl, emulator.Options{StatsInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("agent start: %v", err)
	}
	t.Cleanup(func() {
		// A closed or failed fingerprint stream, or a message Nomad would reject, disables the
		// plugin for good: no test may provoke one.
		if err := c.Err(); err != nil {
			t.Errorf("protocol violation: %v", err)
		}
		c.Close()
		for i, p := range c.Launches() {
			if strings.Contains(p.Stderr(), "DATA RACE") {
				t.Errorf("launch %d: the race detector fired in the plugin", i)
			}
		}
		if t.Failed() {
			for i, p := range c.Launches() {
				t.Logf("launch %d stderr:\n%s", i, p.Stderr())
			}
		}
	})
	return c
}

// place is Nomad placing n units and the plugin reserving them: the IDs and the reservation.
func place(t *testing.T, c *emulator.Client, n int) ([]string, *devicepb.ContainerReservation) {
	t.Helper()
	group, ids, err := c.Schedule(n)
	if err != nil {
		t.Fatalf("scheduling %d units: %v", n, err)
	}
	res, err := c.Reserve(ids)
	if err != nil {
		t.Fatalf("Reserve(%s %v): %v", group, ids, err)
	}
	return ids, res
}

// simAt opens the simulated GPUs of the plugin whose state directory is dir, as a second
// handle: what the test sets there (a task's memory, a fault) the plugin sees.
func simAt(t *testing.T, dir string) *gpu.Simulated {
	t.Helper()
	return testutil.AttachSim(t, filepath.Join(dir, "simgpu"))
}

func attr(g *devicepb.DeviceGroup, k string) int64 { return g.GetAttributes()[k].GetIntVal() }

// writePolicy writes a policy file in the single-policy form (the policy's Nomad Variable items).
func writePolicy(t *testing.T, path string, mut func(*policy.Policy)) {
	t.Helper()
	p := policy.Default()
	mut(&p)
	items, err := policy.EncodePolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(items)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestAgentStartReserveAndStats(t *testing.T) {
	dir := t.TempDir()
	c := start(t, agentConfig(dir, `"H100=80GiB", "A100=40GiB"`, ""))

	// The agent's three launches: info+schema, SetConfig twice, the long-running one.
	if n := len(c.Launches()); n != 3 {
		t.Errorf("%d launches at agent start, want 3", n)
	}
	if c.Info.GetName() != "gpufrac" || c.Info.GetPluginApiVersions()[0] != "v0.1.0" {
		t.Errorf("PluginInfo %v", c.Info)
	}
	fp := c.Latest()
	if len(fp.GetDeviceGroup()) != 2 {
		t.Fatalf("%d groups, want 2", len(fp.GetDeviceGroup()))
	}

	group, ids, err := c.Schedule(6)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Reserve(ids)
	if err != nil {
		t.Fatalf("Reserve(%s %v): %v", group, ids, err)
	}
	// All six units come from one group, so from one GPU, and the env says which.
	var g *devicepb.DeviceGroup
	for _, x := range fp.GetDeviceGroup() {
		if strings.HasSuffix(group, "/"+x.GetDeviceName()) {
			g = x
		}
	}
	uuid := g.GetAttributes()["uuid"].GetStringVal()
	for _, id := range ids {
		if u, _, err := ledger.ParseInstanceID(id); err != nil || u != uuid {
			t.Errorf("instance %s is not on GPU %s", id, uuid)
		}
	}
	env := res.GetEnvs()
	if env[enforcer.EnvCUDADevices] != uuid || env[enforcer.EnvCapBytes] != strconv.FormatUint(uint64(6*size.GiB), 10) {
		t.Errorf("env %v: want CUDA_VISIBLE_DEVICES=%s and a 6GiB cap", env, uuid)
	}
	if _, ok := env[enforcer.EnvNVIDIADevices]; ok {
		t.Error("NVIDIA_VISIBLE_DEVICES set without docker_runtime: docker would switch runtimes")
	}

	st, err := c.WaitStats(10*time.Second, func(s *devicepb.StatsResponse) bool {
		for _, grp := range s.GetGroups() {
			if ds, ok := grp.GetInstanceStats()[ids[0]]; ok {
				return ds.GetStats().GetAttributes()["Reservation cap"].GetIntNumeratorVal().GetValue() == 6*1024
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("stats for the reservation: %v (latest %v)", err, st)
	}
	for _, p := range c.Launches() {
		if out := p.Stdout(); out != "" {
			t.Errorf("plugin wrote to stdout after the handshake: %q", out)
		}
		if !strings.HasPrefix(p.Handshake, "1|1|unix|") || !strings.Contains(p.Handshake, "|grpc") {
			t.Errorf("handshake %q", p.Handshake)
		}
		// go-plugin re-logs JSON lines through the agent's logger; anything else is noise.
		for _, line := range strings.Split(strings.TrimSpace(p.Stderr()), "\n") {
			var entry map[string]any
			if line != "" && json.Unmarshal([]byte(line), &entry) != nil {
				t.Errorf("stderr line is not an hclog JSON entry: %q", line)
			}
		}
	}
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestBadConfigStopsAgentStartAtSetConfig(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, extra string
		want        []string
	}{
		{"backend", `gpu_backend = "cuda"`, []string{"gpu_backend", `"cuda"`}},
		{"unit", `unit = "7 bananas"`, []string{"unit", `"7 bananas"`}},
		{"period", `fingerprint_period = "often"`, []string{"fingerprint_period", `"often"`}},
		{"mode", `gpu_modes = { "0" = "turbo" }`, []string{"gpu_modes.0", `"turbo"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hcl := `config {
  state_dir = "` + dir + `"
  ` + tt.extra + `
}`
			if strings.Contains(tt.extra, "gpu_backend") {
				hcl = strings.Replace(hcl, "config {", "config {\n", 1)
			} else {
				hcl = strings.Replace(hcl, "config {", "config {\n  gpu_backend = \"simulated\"", 1)
			}
			c, err := emulator.Start(binary, hcl)
			if err == nil {
				c.Close()
				t.Fatal("the agent started with a bad config")
			}
			if !strings.Contains(err.Error(), "config validation pass: SetConfig") {
				t.Errorf("failed outside SetConfig: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
	// SetConfig must not have touched the state dir: that starts on the first Fingerprint.
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("SetConfig created %d entries in state_dir", len(entries))
	}
}

func TestRestartKeepsReservations(t *testing.T) {
	for _, how := range []string{"agent restart", "plugin crash"} {
		t.Run(how, func(t *testing.T) {
			testRestart(t, func(c *emulator.Client) error {
				if how == "agent restart" {
					return c.Restart()
				}
				return c.Relaunch()
			})
		})
	}
}

func testRestart(t *testing.T, restart func(*emulator.Client) error) {
	dir := t.TempDir()
	pf := filepath.Join(dir, "policy.json")
	writePolicy(t, pf, func(p *policy.Policy) { p.MaxTasksPerGPU = 2 })
	c := start(t, agentConfig(dir, `"L4=24GiB"`, `policy_file = "`+pf+`"`))

	var held [][]string
	var tokens []string
	for i := 0; i < 2; i++ {
		ids, res := place(t, c, 3)
		held = append(held, ids)
		tokens = append(tokens, res.GetEnvs()[enforcer.EnvReservation])
	}

	if err := restart(c); err != nil {
		t.Fatalf("restart: %v", err)
	}
	fp := c.Latest()
	listed := map[string]bool{}
	for _, d := range fp.GetDeviceGroup()[0].GetDevices() {
		listed[d.GetID()] = true
	}
	for _, ids := range held {
		for _, id := range ids {
			if !listed[id] {
				t.Errorf("reserved instance %s vanished from the fingerprint after restart", id)
			}
		}
	}
	// The restarted plugin knows both tasks: the GPU is at max_tasks = 2, so the scheduler sees
	// no free unit to place a third on, and one placed anyway (the call Nomad would not make)
	// is refused.
	var free string
	for _, d := range fp.GetDeviceGroup()[0].GetDevices() {
		if d.GetHealthy() && !slices.Contains(held[0], d.GetID()) && !slices.Contains(held[1], d.GetID()) {
			t.Errorf("free unit %s advertised healthy on a GPU at max_tasks_per_gpu", d.GetID())
		}
		if free == "" && !slices.Contains(held[0], d.GetID()) && !slices.Contains(held[1], d.GetID()) {
			free = d.GetID()
			if !strings.Contains(d.GetHealthDescription(), "max_tasks_per_gpu = 2") {
				t.Errorf("free unit %s: health description %q does not name max_tasks_per_gpu", d.GetID(), d.GetHealthDescription())
			}
		}
	}
	if _, err := c.ReserveRaw([]string{free}); err == nil || !strings.Contains(err.Error(), string(ledger.ReasonTooMany)) {
		t.Errorf("third task after restart: %v, want a %s refusal", err, ledger.ReasonTooMany)
	}
	snap, err := ledger.ReadSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	for _, r := range snap.Reservations {
		kept[r.Token] = true
	}
	for _, tok := range tokens {
		if !kept[tok] {
			t.Errorf("reservation %s… was lost across the restart", tok[:8])
		}
	}
}

func TestPolicyFileChangeRefingerprints(t *testing.T) {
	dir := t.TempDir()
	pf := filepath.Join(dir, "policy.json")
	writePolicy(t, pf, func(p *policy.Policy) { p.HeadroomBytes = 2 * size.GiB })
	c := start(t, agentConfig(dir, `"H100=80GiB"`, `policy_file = "`+pf+`"`))
	if g := c.Latest().GetDeviceGroup()[0]; attr(g, "units") != 78 || attr(g, "budget") != 78*1024 {
		t.Fatalf("first fingerprint: units %d budget %d, want 78 and 79872", attr(g, "units"), attr(g, "budget"))
	}
	writePolicy(t, pf, func(p *policy.Policy) { p.HeadroomBytes = 10 * size.GiB; p.UnitBytes = 2 * size.GiB })
	fp, err := c.WaitFingerprint(10*time.Second, func(m *devicepb.FingerprintResponse) bool {
		return attr(m.GetDeviceGroup()[0], "budget") == 70*1024
	})
	if err != nil {
		t.Fatalf("budget after the policy change: %v", err)
	}
	g := fp.GetDeviceGroup()[0]
	if attr(g, "unit_size") != 2048 || emulator.HealthyCount(g) != 35 {
		t.Errorf("unit_size %d MiB and %d healthy units, want 2048 and 35", attr(g, "unit_size"), emulator.HealthyCount(g))
	}
	// An invalid policy is ignored: the last good one stays in force.
	if err := os.WriteFile(pf, []byte(`{"schema_version":"1","name":"default","unit_bytes":"12"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// Wait until the plugin has read the invalid file (it says it ignores it), however slowly a
	// loaded machine runs its poll; only then does an unchanged budget prove anything.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(c.Process().Stderr(), "ignoring an invalid policy"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the plugin never said it ignored the invalid policy; stderr:\n%s", c.Process().Stderr())
		}
	}
	if g := c.Latest().GetDeviceGroup()[0]; attr(g, "budget") != 70*1024 {
		t.Errorf("an invalid policy changed the budget to %d", attr(g, "budget"))
	}
}

func TestIDsFromTwoGPUsAreRefused(t *testing.T) {
	c := start(t, agentConfig(t.TempDir(), `"2xA100=40GiB"`, ""))
	fp := c.Latest()
	mixed := []string{fp.GetDeviceGroup()[0].GetDevices()[0].GetID(), fp.GetDeviceGroup()[1].GetDevices()[0].GetID()}
	_, err := c.ReserveRaw(mixed)
	if err == nil || !strings.Contains(err.Error(), string(ledger.ReasonMixedGPUs)) {
		t.Fatalf("Reserve(%v) = %v, want a %s refusal", mixed, err, ledger.ReasonMixedGPUs)
	}
	// Over gRPC the refusal says what kind it is: a request that can never succeed.
	if code := status.Code(err); code != codes.InvalidArgument {
		t.Errorf("gRPC code %s, want InvalidArgument", code)
	}
	// The refusal reserved nothing: both GPUs still take a whole-budget request.
	for _, g := range fp.GetDeviceGroup() {
		var all []string
		for _, d := range g.GetDevices() {
			all = append(all, d.GetID())
		}
		if _, err := c.Reserve(all); err != nil {
			t.Errorf("whole budget of %s after the refusal: %v", g.GetDeviceName(), err)
		}
	}
}

func TestBinaryRefusesToRunWithoutNomad(t *testing.T) {
	cmd := exec.Command(binary)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var stdout strings.Builder
	cmd.Stdout = &stdout
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("the plugin exited 0 without the magic cookie")
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the plugin kept running without the magic cookie")
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout without a cookie: %q", stdout.String())
	}
}

func TestSecondPluginOnOneLedgerShowsTheLock(t *testing.T) {
	dir := t.TempDir()
	first := start(t, agentConfig(dir, `"T4=16GiB"`, ""))
	second := start(t, agentConfig(dir, `"T4=16GiB"`, ""))
	g := second.Latest().GetDeviceGroup()[0]
	if emulator.HealthyCount(g) != 0 || len(g.GetDevices()) != 14 {
		t.Fatalf("second plugin: %d of %d units healthy, want 0 of 14 (the first one's units, unusable)", emulator.HealthyCount(g), len(g.GetDevices()))
	}
	pid := strconv.Itoa(first.Process().Pid())
	if desc := g.GetDevices()[0].GetHealthDescription(); !strings.Contains(desc, "ledger") || !strings.Contains(desc, pid) {
		t.Errorf("health description %q does not name the ledger lock holder (PID %s)", desc, pid)
	}
}

func TestNomadVariablesPolicyChangeRefingerprints(t *testing.T) {
	srv := varserver.New(varserver.Options{})
	defer srv.Close()
	const admin, reader = "admin-secret-7d1f", "plugin-secret-93ab"
	srv.SetToken(admin, varserver.Management()...)
	srv.SetToken(reader, varserver.Rule{Namespace: "default", Path: "gpufrac/*",
		Capabilities: []string{varserver.CapRead, varserver.CapList}})
	store, err := nomadvars.New(nomadvars.Config{Address: srv.URL(), Token: admin})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := policy.Default()
	p.Name = "inference"
	p.HeadroomBytes = 4 * size.GiB
	if _, err := store.PutPolicyUnchecked(ctx, p); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(reader+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := start(t, agentConfig(dir, `"H100=80GiB"`, `policy {
    address    = "`+srv.URL()+`"
    token_file = "`+tokenFile+`"
    name       = "inference"
  }`))
	if g := c.Latest().GetDeviceGroup()[0]; attr(g, "budget") != 76*1024 || emulator.HealthyCount(g) != 76 {
		t.Fatalf("first fingerprint: budget %d MiB, %d healthy units; want 77824 and 76", attr(g, "budget"), emulator.HealthyCount(g))
	}

	p.HeadroomBytes = 16 * size.GiB
	if _, err := store.PutPolicyUnchecked(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitFingerprint(10*time.Second, func(m *devicepb.FingerprintResponse) bool {
		g := m.GetDeviceGroup()[0]
		return attr(g, "budget") == 64*1024 && emulator.HealthyCount(g) == 64
	}); err != nil {
		t.Fatalf("budget after the variable changed: %v", err)
	}
	for i, l := range c.Launches() {
		if strings.Contains(l.Stderr(), reader) {
			t.Errorf("launch %d logged the Nomad token", i)
		}
	}
}

func TestUnreachablePolicyMarksUnitsUnhealthy(t *testing.T) {
	// An address where nothing listens: the plugin must still fingerprint (the agent waits for
	// it), with every unit unhealthy and the reason in its health description.
	dir := t.TempDir()
	c := start(t, agentConfig(dir, `"T4=16GiB"`, `policy {
    address = "http://127.0.0.1:1"
  }`))
	g := c.Latest().GetDeviceGroup()[0]
	if len(g.GetDevices()) == 0 {
		t.Fatal("no instances advertised")
	}
	if emulator.HealthyCount(g) != 0 {
		t.Errorf("%d healthy units before any policy was read", emulator.HealthyCount(g))
	}
	desc := g.GetDevices()[0].GetHealthDescription()
	if !strings.Contains(desc, "gpufrac/policy/default") {
		t.Errorf("health description %q does not name the policy it waits for", desc)
	}
}
