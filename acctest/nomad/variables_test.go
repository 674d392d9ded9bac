package nomad_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/acctest/nomad/emulator"
	"github.com/gpufrac/gpufrac/internal/varserver"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
	"github.com/gpufrac/gpufrac/size"
)

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
