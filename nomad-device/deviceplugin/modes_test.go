package deviceplugin

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/mps"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// gpu_modes may name a GPU by its index and by its UUID. Two keys of one GPU with different
// modes cannot both hold: the GPU's mode would follow whichever key a re-listing applied last,
// which Go's map order decides anew each time. The first listing, which alone knows which index
// is which UUID, refuses it naming both keys; two keys that agree are only said twice.
func TestGPUModesOfOneGPUMustAgree(t *testing.T) {
	uuid0 := gpu.SimUUID(0, "H100")
	uuid1 := gpu.SimUUID(1, "H100")
	for _, tt := range []struct {
		name, modes string
		refused     []string // what the refusal says; none: accepted
	}{
		{"index and UUID disagree", `gpu_modes = { "0" = "mps", "` + uuid0 + `" = "isolated" }`,
			[]string{`gpu_modes.0 = "mps"`, `gpu_modes.` + uuid0 + ` = "isolated"`, "GPU 0"}},
		{"index and UUID agree", `gpu_modes = { "0" = "isolated", "` + uuid0 + `" = "isolated" }`, nil},
		// A mode for a GPU ignored_gpu_ids leaves alone was never applied, only warned about
		// at every listing; by the same key it is refused at SetConfig (TestParseConfigRejects).
		{"mode for a GPU ignored by the other key", `gpu_modes = { "` + uuid1 + `" = "mps" }
				ignored_gpu_ids = ["1"]`,
			[]string{`gpu_modes.` + uuid1 + ` = "mps"`, "GPU 1", "ignored_gpu_ids"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newSim(t, "H100=80GiB,H100=80GiB", tt.modes+`
				mps_control = "`+testutil.FakeMPSControl(t)+`"
				mps_root = "`+testutil.MPSRoot(t)+`"`)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sent := make(chan *devicepb.FingerprintResponse, 1)
			err := s.Fingerprint(ctx, func(m *devicepb.FingerprintResponse) error {
				select {
				case sent <- m:
				default: // one message is all this case needs
				}
				cancel()
				return nil
			})
			if tt.refused == nil {
				if err != nil {
					t.Fatalf("Fingerprint: %v, want the agreeing keys accepted", err)
				}
				m := <-sent
				if got := m.DeviceGroup[0].Attributes[AttrMode].GetStringVal(); got != string(policy.ModeIsolated) {
					t.Errorf("GPU 0's mode is %q, want isolated", got)
				}
				return
			}
			if err == nil {
				t.Fatalf("Fingerprint sent %d message(s) and ended without an error; want the configuration refused", len(sent))
			}
			for _, w := range tt.refused {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %s", err, w)
				}
			}
		})
	}
}

// A GPU's mode from gpu_modes is kept in the ledger, and so is the mode `gpufrac run` sets on
// the node's GPUs. A plugin started without a gpu_modes entry for a GPU must put it back on the
// policy's mode, as docs/plugin.md says ("Others follow the policy's mode"), rather than keep
// whatever an earlier writer of the ledger left there.
func TestGPUModeLeftInTheLedgerFollowsThePolicy(t *testing.T) {
	uuid0 := gpu.SimUUID(0, "H100")
	for _, tt := range []struct {
		name string
		// before leaves GPU 0 in mps mode in the ledger in dir.
		before func(t *testing.T, dir string)
	}{
		{"a plugin whose config had gpu_modes", func(t *testing.T, dir string) {
			s := newSimIn(t, dir, Options{}, "H100=80GiB", `gpu_modes = { "0" = "mps" }
				mps_control = "`+testutil.FakeMPSControl(t)+`"
				mps_root = "`+testutil.MPSRoot(t)+`"`)
			m, _ := firstFingerprint(t, s)
			s.Shutdown()
			if got := m.DeviceGroup[0].Attributes[AttrMode].GetStringVal(); got != string(policy.ModeMPS) {
				t.Fatalf("the first plugin's GPU 0 is in mode %q, want mps", got)
			}
		}},
		{"gpufrac run, which sets the mode of the GPUs it runs on", func(t *testing.T, dir string) {
			l, err := ledger.Open(dir, ledger.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if err := l.SyncGPUs([]ledger.GPUInfo{{UUID: uuid0, Model: "H100", TotalBytes: 80 * size.GiB}}); err != nil {
				t.Fatal(err)
			}
			if err := l.SetMode(uuid0, policy.ModeMPS); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.before(t, dir)
			s := newSimIn(t, dir, Options{}, "H100=80GiB", "")
			isolated := func(m *devicepb.FingerprintResponse) bool {
				return m.DeviceGroup[0].Attributes[AttrMode].GetStringVal() == string(policy.ModeIsolated)
			}
			m, ch := firstFingerprint(t, s)
			if !isolated(m) {
				waitFP(t, ch, "GPU 0 follows the policy's mode (isolated) with no gpu_modes entry", isolated)
			}
		})
	}
}

// An mps GPU whose control daemon could not start, then left mps mode (the policy's mode
// changed): the plugin's record of the failure belongs to the mode it left. Kept, it made
// gpufrac_gpu_healthy read 0 while the fingerprint offered the GPU's units healthy, and when
// the GPU entered mps mode again its daemon was not tried at that change (docs/plugin.md:
// "has its control daemon readied at that change") but only at the next fingerprint_period,
// its units unhealthy with the old reason meanwhile although the daemon could now start.
func TestMPSFailureIsForgottenWhenTheGPULeavesMPSMode(t *testing.T) {
	bin := t.TempDir()
	control := filepath.Join(bin, mps.DefaultControl) // missing until the test installs it
	file := filepath.Join(t.TempDir(), "policy.json")
	store := policy.NewFileStore(file, policy.FileOptions{})
	setMode := func(m policy.Mode) {
		t.Helper()
		p := policy.Default()
		p.Mode = m
		if _, err := store.PutPolicyUnchecked(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	setMode(policy.ModeMPS)
	s, _ := newSim(t, "H100=80GiB", `policy_file = "`+file+`"
		fingerprint_period = "1h"
		mps_root = "`+testutil.MPSRoot(t)+`"
		mps_control = "`+control+`"`)
	m, ch := firstFingerprint(t, s)
	down := func(m *devicepb.FingerprintResponse) bool {
		return freeUnhealthy(m.DeviceGroup[0], "MPS control daemon cannot start")
	}
	if !down(m) {
		waitFP(t, ch, "the mps GPU's units say its daemon cannot start", down)
	}
	if err := copyFile(t, testutil.FakeMPSControl(t), control); err != nil {
		t.Fatal(err)
	}
	placeable := func(mode policy.Mode) func(*devicepb.FingerprintResponse) bool {
		return func(m *devicepb.FingerprintResponse) bool {
			g := m.DeviceGroup[0]
			return g.Attributes[AttrMode].GetStringVal() == string(mode) && len(ids(g, 100)) == len(g.Devices)
		}
	}

	setMode(policy.ModeIsolated)
	waitFP(t, ch, "the GPU, isolated now, offers every unit", placeable(policy.ModeIsolated))
	healthy := gatherer(t, s)
	testutil.Eventually(t, 10*time.Second, "gpufrac_gpu_healthy = 1 for the isolated GPU whose units are offered", func() bool {
		return healthy()["gpufrac_gpu_healthy"] == 1
	})

	setMode(policy.ModeMPS)
	waitFP(t, ch, "the GPU, back in mps mode, has its daemon readied at the change and offers every unit", placeable(policy.ModeMPS))
}
