package deviceplugin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/mps"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
)

// copyFile installs src at dst, executable, as an operator installing a binary would.
func copyFile(t *testing.T, src, dst string) error {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// TestMPSGPURecoversOnceItsDaemonCanStart: an mps GPU whose control daemon cannot start has its
// free units unhealthy with the reason and refuses Reserve (Unavailable); once the fault ends,
// with no restart, the next fingerprint has the units healthy again, Reserve admits a task onto
// the daemon, and the plugin logged both the fault and the recovery.
func TestMPSGPURecoversOnceItsDaemonCanStart(t *testing.T) {
	fake := testutil.FakeMPSControl(t)
	uuid := gpu.SimUUID(0, "H100")
	tests := []struct {
		name string
		// config is the mps_control line; fault and fix are what the operator's machine does.
		config     func(bin string) string
		fault, fix func(t *testing.T, bin, pipe string) error
		reason     string // a fragment of the health description and the Reserve error
	}{
		{
			name: "control binary missing, then installed",
			config: func(bin string) string {
				return `mps_control = "` + filepath.Join(bin, mps.DefaultControl) + `"`
			},
			fault: func(*testing.T, string, string) error { return nil },
			fix: func(t *testing.T, bin, _ string) error {
				return copyFile(t, fake, filepath.Join(bin, mps.DefaultControl))
			},
			reason: filepath.Join("bin", mps.DefaultControl),
		},
		{
			name: "not on PATH, then on PATH",
			config: func(bin string) string {
				return "" // the default: nvidia-cuda-mps-control looked up on PATH
			},
			fault: func(t *testing.T, bin, _ string) error {
				// The fake is a shell script that needs the system's tools, and nothing else.
				t.Setenv("PATH", bin+":/usr/bin:/bin")
				if p, err := exec.LookPath(mps.DefaultControl); err == nil {
					t.Skipf("this machine has a real %s at %s: the PATH case cannot be faked here", mps.DefaultControl, p)
				}
				return nil
			},
			fix: func(t *testing.T, bin, _ string) error {
				return copyFile(t, fake, filepath.Join(bin, mps.DefaultControl))
			},
			reason: "executable file not found",
		},
		{
			name:   "daemon refuses to start, then starts",
			config: func(string) string { return `mps_control = "` + fake + `"` },
			fault: func(_ *testing.T, _, pipe string) error {
				if err := os.MkdirAll(pipe, 0o755); err != nil {
					return err
				}
				return os.WriteFile(filepath.Join(pipe, "fail-start"), nil, 0o644)
			},
			fix:    func(_ *testing.T, _, pipe string) error { return os.Remove(filepath.Join(pipe, "fail-start")) },
			reason: "start refused",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := testutil.MPSRoot(t)
			pipe := filepath.Join(root, uuid, "pipe")
			bin := filepath.Join(t.TempDir(), "bin")
			if err := os.MkdirAll(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := tc.fault(t, bin, pipe); err != nil {
				t.Fatal(err)
			}
			var logs testutil.Buffer // the plugin's goroutines write it while the test reads
			s, _ := newSimWith(t, Options{Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})}, "H100=80GiB",
				`gpu_modes = { "0" = "mps" }
				fingerprint_period = "1s"
				mps_root = "`+root+`"
				`+tc.config(bin))
			m, ch := firstFingerprint(t, s)
			if got := m.DeviceGroup[0].Attributes[AttrUUID].GetStringVal(); got != uuid {
				t.Fatalf("the simulated GPU is %s, want %s", got, uuid)
			}
			down := func(m *devicepb.FingerprintResponse) bool {
				return freeUnhealthy(m.DeviceGroup[0], "MPS control daemon cannot start") && freeUnhealthy(m.DeviceGroup[0], tc.reason)
			}
			if !down(m) {
				m = waitFP(t, ch, "the mps GPU's units say its daemon cannot start", down)
			}
			unit := m.DeviceGroup[0].Devices[0].ID
			_, err := s.Reserve(context.Background(), []string{unit})
			wantRefused(t, err, codes.Unavailable, tc.reason)

			if err := tc.fix(t, bin, pipe); err != nil {
				t.Fatal(err)
			}
			m = waitFP(t, ch, "the units are healthy once the daemon can start", func(m *devicepb.FingerprintResponse) bool {
				return len(ids(m.DeviceGroup[0], 100)) == len(m.DeviceGroup[0].Devices)
			})
			res, err := s.Reserve(context.Background(), ids(m.DeviceGroup[0], 2))
			if err != nil {
				t.Fatalf("Reserve after the daemon could start: %v", err)
			}
			if got := res.Envs[enforcer.EnvMPSPipeDir]; got != pipe {
				t.Errorf("%s = %q, want the daemon's pipe %s", enforcer.EnvMPSPipeDir, got, pipe)
			}
			if _, err := os.Stat(filepath.Join(pipe, "daemon.pid")); err != nil {
				t.Errorf("no control daemon runs for the GPU: %v", err)
			}
			for _, want := range []string{"MPS control daemon cannot start", "MPS control daemon ready: the GPU's units are placeable again"} {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("the plugin did not log %q:\n%s", want, logs.String())
				}
			}
		})
	}
}
