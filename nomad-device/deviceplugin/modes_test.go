package deviceplugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/policy"
)

// gpu_modes may name a GPU by its index and by its UUID. Two keys of one GPU with different
// modes cannot both hold: the GPU's mode would follow whichever key a re-listing applied last,
// which Go's map order decides anew each time. The first listing, which alone knows which index
// is which UUID, refuses it naming both keys; two keys that agree are only said twice.
func TestGPUModesOfOneGPUMustAgree(t *testing.T) {
	uuid0 := gpu.SimUUID(0, "H100")
	for _, tt := range []struct {
		name, modes string
		refused     bool
	}{
		{"index and UUID disagree", `gpu_modes = { "0" = "mps", "` + uuid0 + `" = "isolated" }`, true},
		{"index and UUID agree", `gpu_modes = { "0" = "isolated", "` + uuid0 + `" = "isolated" }`, false},
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
			if !tt.refused {
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
			for _, w := range []string{`gpu_modes.0 = "mps"`, `gpu_modes.` + uuid0 + ` = "isolated"`, "GPU 0"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %s", err, w)
				}
			}
		})
	}
}
