package deviceplugin

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/policy"
)

// wantConfigRefused sets a simulated backend's configuration with body on a new server and
// fails the test unless SetConfig refuses it as invalid, naming every fragment of want.
func wantConfigRefused(t *testing.T, body string, want []string) {
	t.Helper()
	s := NewServer(Options{})
	defer s.Shutdown()
	err := s.SetConfig(encode(t, `config {
		gpu_backend = "simulated"
		`+body+`
	}`), APIVersion)
	if !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("SetConfig: %v, want a refusal", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %s", err, w)
		}
	}
}

// An ignored GPU or a gpu_modes key that is neither an index nor a whole UUID is a typo, and
// SetConfig refuses it with the entry.
func TestGPURefTyposRefusedAtSetConfig(t *testing.T) {
	short := gpu.SimUUID(1, "H100")
	short = short[:len(short)-1] // one character short
	for _, tt := range []struct {
		name, hcl string
		want      []string
	}{
		{"uuid one char short", `ignored_gpu_ids = ["` + short + `"]`, []string{"ignored_gpu_ids", short, "GPU-xxxxxxxx"}},
		{"negative index", `ignored_gpu_ids = ["-1"]`, []string{"ignored_gpu_ids", `"-1"`, "index"}},
		{"mode key", `gpu_modes = { "gpu0" = "mps" }`, []string{"gpu_modes.gpu0", `"gpu0"`, "index"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantConfigRefused(t, `state_dir = "`+t.TempDir()+`"
				`+tt.hcl, tt.want)
		})
	}
}

// Entries well formed but naming no GPU of the node are refused by the fingerprint, the first
// thing that lists the GPUs: the error names each bad entry and lists the GPUs that exist, and
// Reserve refuses too. Nothing is advertised meanwhile.
func TestUnknownGPURefsRefusedByFingerprint(t *testing.T) {
	other := gpu.SimUUID(5, "H100") // well formed, on no GPU of this node
	s, _ := newSim(t, "H100=80GiB,H100=80GiB", `ignored_gpu_ids = ["7", "`+other+`", "1"]
		gpu_modes = { "9" = "mps", "0" = "isolated" }`)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var sent int
	err := s.Fingerprint(ctx, func(*devicepb.FingerprintResponse) error { sent++; return nil })
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Fingerprint: %v (context %v), want the configuration refused", err, ctx.Err())
	}
	if sent != 0 {
		t.Errorf("%d fingerprints sent before the refusal", sent)
	}
	for _, w := range []string{
		`ignored_gpu_ids = "7"`, `ignored_gpu_ids = "` + other + `"`, `gpu_modes.9 = "mps"`,
		"0 = " + gpu.SimUUID(0, "H100"), "1 = " + gpu.SimUUID(1, "H100"),
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %s", err, w)
		}
	}
	for _, ok := range []string{`ignored_gpu_ids = "1"`, "gpu_modes.0"} {
		if strings.Contains(err.Error(), ok) {
			t.Errorf("error %q refuses the valid entry %s", err, ok)
		}
	}
	if _, err := s.Reserve(context.Background(), []string{gpu.SimUUID(0, "H100") + "-0"}); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), `"7"`) {
		t.Errorf("Reserve after the refusal: %v, want unavailable, naming the bad entry", err)
	}
}

// A state_dir the plugin cannot create or write and a policy_file that does not exist stop the
// agent at SetConfig, named with the reason; SetConfig creates nothing.
func TestUnusablePathsRefusedAtSetConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	readOnly := filepath.Join(dir, "ro")
	if err := os.Mkdir(readOnly, 0o555); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "policy.json")
	tests := []struct {
		name, hcl string
		want      []string
		nonRoot   bool // root may write anywhere permissions allow nobody
	}{
		{"state_dir under a regular file", `state_dir = "` + file + `/state"`, []string{"state_dir", file + `/state"`, file + " is not a directory"}, false},
		{"state_dir is a regular file", `state_dir = "` + file + `"`, []string{"state_dir", "not a directory"}, false},
		{"state_dir in a read-only directory", `state_dir = "` + readOnly + `/state"`, []string{"state_dir", readOnly, "not writable", "permission denied"}, true},
		{"missing policy_file", `state_dir = "` + dir + `/state"
			policy_file = "` + missing + `"`, []string{"policy_file", missing, "file not found"}, false},
		{"policy_file is a directory", `state_dir = "` + dir + `/state"
			policy_file = "` + dir + `"`, []string{"policy_file", "is a directory"}, false},
		// Every Reserve needs the fence's directory and its siblings: unusable, the agent
		// started with every unit unhealthy ("the enforcer is not running").
		{"fence_dir under a regular file", `state_dir = "` + dir + `/state"
			fence_dir = "` + file + `/fence"`, []string{"fence_dir", file + `/fence"`, file + " is not a directory"}, false},
		{"fence_dir in a read-only directory", `state_dir = "` + dir + `/state"
			fence_dir = "` + readOnly + `/fence"`, []string{"fence_dir", readOnly, "not writable", "permission denied"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.nonRoot && os.Geteuid() == 0 {
				t.Skip("root writes in a 0555 directory; the case needs an unprivileged user")
			}
			wantConfigRefused(t, tt.hcl, tt.want)
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("SetConfig left %d entries in %s, want the test's 2 (a file and a directory)", len(entries), dir)
	}
	// With the fence off nothing is written there, so nothing about it is checked.
	s := NewServer(Options{})
	defer s.Shutdown()
	if err := s.SetConfig(encode(t, `config {
		gpu_backend = "simulated"
		state_dir   = "`+dir+`/state"
		fence       = false
		fence_dir   = "`+file+`/fence"
	}`), APIVersion); err != nil {
		t.Errorf("SetConfig with fence = false and an unusable fence_dir: %v, want it accepted", err)
	}
}

// A metrics_addr whose host is no address of this node (another host's IP, a misspelt name)
// could never be served: SetConfig refuses it, naming the key and the value, as `gpufrac
// controller --metrics-addr` does, instead of the running plugin logging it. A port another
// process holds still passes: that is only logged, units must keep being advertised.
func TestMetricsAddrOfNoLocalAddressRefusedAtSetConfig(t *testing.T) {
	wantConfigRefused(t, `state_dir = "`+t.TempDir()+`"
		metrics_addr = "192.0.2.1:9410"`, []string{"metrics_addr", `"192.0.2.1:9410"`, "cannot be listened on", "192.0.2.1"})

	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	s := NewServer(Options{})
	defer s.Shutdown()
	if err := s.SetConfig(encode(t, `config {
		gpu_backend  = "simulated"
		state_dir    = "`+t.TempDir()+`"
		metrics_addr = "`+held.Addr().String()+`"
	}`), APIVersion); err != nil {
		t.Errorf("SetConfig with metrics_addr on a port in use: %v, want it accepted (only logged)", err)
	}
}

// A policy_file removed while the plugin runs is named as a missing file, not a missing policy.
func TestRemovedPolicyFileNamed(t *testing.T) {
	dir := t.TempDir()
	pf := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(pf, []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ := newSim(t, "H100=80GiB", `policy_file = "`+pf+`"`)
	if err := os.Remove(pf); err != nil {
		t.Fatal(err)
	}
	m, stream := firstFingerprint(t, s)
	deadline := time.After(20 * time.Second)
	want := "policy_file " + pf + ": file not found"
	for !strings.Contains(m.DeviceGroup[0].Devices[0].HealthDescription, want) {
		select {
		case m = <-stream:
		case <-deadline:
			t.Fatalf("health %q, want it to say %q", m.DeviceGroup[0].Devices[0].HealthDescription, want)
		}
	}
	wantDocumentedHealth(t, m.DeviceGroup[0].Devices[0].HealthDescription)
}

// A policy or violations block the Nomad API client cannot be built from (an address with a
// path, the all-namespaces wildcard, a token_file or ca_file that cannot be read) could never
// reach Nomad: the running plugin built its client once and gave up for good, the policy's
// units unhealthy until a restart, the violations only logged and never published. SetConfig
// refuses it naming the block and the value, as it does a missing policy_file; it sends no
// request, so an unreachable Nomad still passes.
func TestUnusableNomadBlocksRefusedAtSetConfig(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty-token")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, tt := range []struct {
		name, block string
		want        []string
	}{
		{"policy address with a path", `policy {
			address = "https://nomad.example:4646/ui"
		}`, []string{"policy", `"https://nomad.example:4646/ui"`, "has a path"}},
		{"violations address with a path", `violations {
			address = "http://127.0.0.1:4646/nomad"
		}`, []string{"violations", `"http://127.0.0.1:4646/nomad"`, "has a path"}},
		{"policy token_file missing", `policy {
			token_file = "` + missing + `"
		}`, []string{"policy", "token_file", missing}},
		{"violations token_file empty", `violations {
			token_file = "` + empty + `"
		}`, []string{"violations", "token_file", empty, "empty"}},
		{"violations in every namespace", `violations {
			namespace = "*"
		}`, []string{"violations", `"*"`}},
		{"policy ca_file missing", `policy {
			ca_file = "` + missing + `"
		}`, []string{"policy", missing}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantConfigRefused(t, `state_dir = "`+t.TempDir()+`"
				`+tt.block, tt.want)
		})
	}

	s := NewServer(Options{})
	defer s.Shutdown()
	if err := s.SetConfig(encode(t, `config {
		gpu_backend = "simulated"
		state_dir = "`+t.TempDir()+`"
		policy {
			address = "http://127.0.0.1:1"
			token_file = "`+token+`"
		}
		violations {
			address = "http://127.0.0.1:1/"
			token_file = "`+token+`"
		}
	}`), APIVersion); err != nil {
		t.Errorf("SetConfig with blocks whose Nomad is unreachable: %v, want them accepted (nothing is asked of Nomad at SetConfig)", err)
	}
}
