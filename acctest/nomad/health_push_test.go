package nomad_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/testutil"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/policy"
)

// busy keeps two CPUs spinning until the test ends, so the plugin competes for the machine as
// on a loaded node.
func busy(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	for range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			for n := 0; ctx.Err() == nil; n++ {
				if n%1_000_000 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	t.Cleanup(func() { cancel(); <-done; <-done })
}

const mpsCannotStart = "MPS control daemon cannot start"

// modeIs says whether the fingerprint advertises the first GPU in mode m.
func modeIs(m *devicepb.FingerprintResponse, mode policy.Mode) bool {
	gs := m.GetDeviceGroup()
	return len(gs) > 0 && gs[0].GetAttributes()["mode"].GetStringVal() == string(mode)
}

// freeUnitsDown says whether every unit of the first GPU is unhealthy because its MPS daemon
// cannot start.
func freeUnitsDown(m *devicepb.FingerprintResponse) bool {
	gs := m.GetDeviceGroup()
	if len(gs) == 0 || len(gs[0].GetDevices()) == 0 {
		return false
	}
	for _, d := range gs[0].GetDevices() {
		if d.GetHealthy() || !strings.Contains(d.GetHealthDescription(), mpsCannotStart) {
			return false
		}
	}
	return true
}

// A GPU in mps mode whose control daemon cannot start has its free units advertised unhealthy
// at once, not at the next fingerprint_period (an hour here): whether the policy names mps from
// the start or switches to it while the plugin runs, and beside two CPU-bound loops.
func TestHealthChangeIsPushedAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first policy.Mode // the policy's mode at start; mps comes later when it is isolated
	}{
		{"mps from the start", policy.ModeMPS},
		{"mps set while running", policy.ModeIsolated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			busy(t)
			dir := t.TempDir()
			pf := filepath.Join(dir, "policy.json")
			writePolicy(t, pf, func(p *policy.Policy) { p.Mode = tc.first })
			c := start(t, agentConfig(dir, `"H100=80GiB"`, `policy_file        = "`+pf+`"
  fingerprint_period = "1h"
  mps_root           = "`+testutil.MPSRoot(t)+`"
  mps_control        = "`+filepath.Join(dir, "no-such-mps-control")+`"`))
			if tc.first != policy.ModeMPS {
				writePolicy(t, pf, func(p *policy.Policy) { p.Mode = policy.ModeMPS })
			}
			// The cause is the mps mode reaching the fingerprint; the units must follow within
			// a second.
			if _, err := c.WaitFingerprint(15*time.Second, func(m *devicepb.FingerprintResponse) bool { return modeIs(m, policy.ModeMPS) }); err != nil {
				t.Fatalf("the policy's mps mode never reached the fingerprint: %v", err)
			}
			if _, err := c.WaitFingerprint(5*time.Second, freeUnitsDown); err != nil {
				t.Fatalf("the free units of an mps GPU without a daemon are still advertised healthy: %v\n%s", err, describe(c.Latest()))
			}
			var cause, down time.Time
			for _, r := range c.Fingerprints() {
				if cause.IsZero() && modeIs(r.Msg, policy.ModeMPS) {
					cause = r.At
				}
				if down.IsZero() && freeUnitsDown(r.Msg) {
					down = r.At
				}
			}
			d := down.Sub(cause)
			if d > time.Second {
				t.Errorf("the unhealthy units were pushed %s after the mps mode, want within 1s", d)
			}
			t.Logf("unhealthy units pushed %s after the mps mode", d)
		})
	}
}

// describe is the first group's health in a line per distinct description.
func describe(m *devicepb.FingerprintResponse) string {
	if len(m.GetDeviceGroup()) == 0 {
		return "no group"
	}
	seen := map[string]int{}
	for _, d := range m.GetDeviceGroup()[0].GetDevices() {
		seen[d.GetHealthDescription()]++
	}
	var b strings.Builder
	for k, n := range seen {
		fmt.Fprintf(&b, "%d × %q\n", n, k)
	}
	return b.String()
}
