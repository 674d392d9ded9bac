package nomad_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/internal/testutil"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

func TestMPSModeReservation(t *testing.T) {
	control, root := testutil.FakeMPSControl(t), testutil.MPSRoot(t)
	c := start(t, agentConfig(t.TempDir(), `"H100=80GiB", "A100=40GiB"`, `gpu_modes   = { "1" = "mps" }
  mps_root    = "`+root+`"
  mps_control = "`+control+`"`))
	fp := c.Latest()
	if m := fp.GetDeviceGroup()[1].GetAttributes()["mode"].GetStringVal(); m != "mps" {
		t.Fatalf("GPU 1 mode attribute %q, want mps", m)
	}
	if m := fp.GetDeviceGroup()[0].GetAttributes()["mode"].GetStringVal(); m != "isolated" {
		t.Errorf("GPU 0 mode attribute %q, want isolated (the policy's default)", m)
	}
	g := fp.GetDeviceGroup()[1]
	uuid := g.GetAttributes()["uuid"].GetStringVal()
	var ids []string
	for _, d := range g.GetDevices()[:5] {
		ids = append(ids, d.GetID())
	}
	res, err := c.Reserve(ids)
	if err != nil {
		t.Fatal(err)
	}
	env := res.GetEnvs()
	pipe := env[enforcer.EnvMPSPipeDir]
	if !strings.HasPrefix(pipe, root) {
		t.Errorf("%s = %q, want a directory under %s", enforcer.EnvMPSPipeDir, pipe, root)
	}
	if want := uuid + "=" + strconv.Itoa(int(5*size.GiB/size.MiB)) + "M"; env[enforcer.EnvMPSMemLimit] != want {
		t.Errorf("%s = %q, want %q", enforcer.EnvMPSMemLimit, env[enforcer.EnvMPSMemLimit], want)
	}
	// The MPS pipe directory, the fence's directory (read-only) with the task's own accounting
	// directory (writable) on top, its own lock directory (writable), and the control copies
	// (read-only: only the enforcer writes them), each at the host's path.
	own := fence.AccountDir(env[fence.EnvDir], env[enforcer.EnvReservation])
	live := fence.LiveDir(env[fence.EnvDir], env[enforcer.EnvReservation])
	if err := samePathMounts(res.GetMounts(), pipe, env[fence.EnvDir], own, live, fence.ControlDir(env[fence.EnvDir])); err != nil {
		t.Error(err)
	}
	for _, m := range res.GetMounts() {
		if want := m.GetHostPath() != pipe && m.GetHostPath() != own && m.GetHostPath() != live; m.GetReadOnly() != want {
			t.Errorf("mount %v: read-only %v, want %v", m, m.GetReadOnly(), want)
		}
	}
	// Reserve wrote the task's cap into the fence before answering: a process of the task
	// attaches and sees it.
	fc, err := fence.Attach(env[fence.EnvDir], uuid, env[enforcer.EnvReservation])
	if err != nil {
		t.Fatalf("a task process cannot attach to the fence: %v", err)
	}
	defer fc.Detach()
	if capBytes, _, ok := fc.View(); !ok || capBytes != 5*size.GiB {
		t.Errorf("the fence holds the task to %s (ok %v), want its 5GiB cap", capBytes, ok)
	}
	// The control daemon was started for that GPU before Reserve returned.
	if _, err := os.Stat(filepath.Join(pipe, "daemon.pid")); err != nil {
		t.Errorf("no MPS control daemon for %s: %v", uuid, err)
	}
}

// samePathMounts checks that mounts are exactly paths, each mounted at the host's own path.
func samePathMounts(mounts []*devicepb.Mount, paths ...string) error {
	var got []string
	for _, m := range mounts {
		if m.GetHostPath() != m.GetTaskPath() {
			return fmt.Errorf("mount %v: the task must see the host's path", m)
		}
		got = append(got, m.GetHostPath())
	}
	if !slices.Equal(got, paths) || slices.Contains(paths, "") {
		return fmt.Errorf("mounts %q, want %q", got, paths)
	}
	return nil
}

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
