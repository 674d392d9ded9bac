package probe

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/size"
	"github.com/hashicorp/go-hclog"
)

// countingGPM counts the backend's OpenGPM calls: a GPU found without a monitor is not asked again.
type countingGPM struct {
	gpu.Backend
	opens atomic.Int32
}

func (c *countingGPM) OpenGPM(ctx context.Context, uuid string) (gpu.GPMSampler, error) {
	c.opens.Add(1)
	return c.Backend.OpenGPM(ctx, uuid)
}

// shareLedger is a ledger of the simulated GPU d, holding template t's footprint profile.
func shareLedger(t *testing.T, d gpu.Device, profile string) *ledger.Ledger {
	t.Helper()
	l, err := ledger.Open(t.TempDir(), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.SyncGPUs([]ledger.GPUInfo{{UUID: d.UUID, Index: d.Index, Model: d.Model, TotalBytes: d.MemoryBytes, Healthy: true}}); err != nil {
		t.Fatal(err)
	}
	if profile != "" {
		if err := l.RecordProfile(ledger.Profile{Template: profile, PeakBytes: size.GiB, Source: ledger.ProfileProbe}); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// An attempt is metered only when it is worth it and its GPU is its own: wanted, metering on, a
// GPU with a monitor (one found without is not asked again) and no other process's reservation.
func TestSharesOpen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		model  string
		wanted bool
		off    bool
		other  bool // another process holds a reservation on the GPU
		want   bool
		opens  int32 // OpenGPM calls over two Opens
	}{
		{"alone, wanted", "H100=80GiB", true, false, false, true, 2},
		{"not wanted", "H100=80GiB", false, false, false, false, 0},
		{"metering off", "H100=80GiB", true, true, false, false, 0},
		{"another process's reservation", "H100=80GiB", true, false, true, false, 0},
		{"no monitor: asked once", "A100=80GiB", true, false, false, false, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sim, devs := testutil.NewSim(t, tc.model)
			b := &countingGPM{Backend: sim}
			l := shareLedger(t, devs[0], "")
			if tc.other {
				if _, err := l.ReserveBytes(devs[0].UUID, size.GiB, ledger.Task{JobName: "theirs"}); err != nil {
					t.Fatal(err)
				}
			}
			s := NewShares(b, l, tc.off)
			for i := range 2 {
				m := s.Open(devs[0].UUID, "ours", tc.wanted, hclog.NewNullLogger())
				if (m != nil) != tc.want {
					t.Fatalf("Open #%d metered: %v, want %v", i+1, m != nil, tc.want)
				}
				m.Close(t.Context())
			}
			if got := b.opens.Load(); got != tc.opens {
				t.Errorf("the backend's monitor was opened %d times, want %d", got, tc.opens)
			}
		})
	}
}

// What a meter measured becomes its template's share only when the attempt did its work and had
// its GPU alone throughout; it is stored where the template has a footprint profile.
func TestSharesLearn(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		shared   bool // another attempt joined the GPU
		done     bool
		other    bool // another process reserved the GPU during the attempt
		profile  bool
		measured bool
		want     bool
	}{
		{"alone, done", false, true, false, true, true, true},
		{"alone, done, no footprint profile yet", false, true, false, false, true, true},
		{"joined by another attempt", true, true, false, true, true, false},
		{"failed or stopped early", false, false, false, true, true, false},
		{"another process reserved the GPU", false, true, true, true, true, false},
		{"the monitor covered nothing", false, true, false, true, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, devs := testutil.NewSim(t, "H100=80GiB")
			prof := ""
			if tc.profile {
				prof = "tmpl"
			}
			l := shareLedger(t, devs[0], prof)
			mine, err := l.ReserveBytes(devs[0].UUID, size.GiB, ledger.Task{JobName: "ours"})
			if err != nil {
				t.Fatal(err)
			}
			if tc.other {
				if _, err := l.ReserveBytes(devs[0].UUID, size.GiB, ledger.Task{JobName: "theirs"}); err != nil {
					t.Fatal(err)
				}
			}
			m := &SMMeter{gpu: devs[0].UUID}
			if tc.shared {
				m.Share()
			}
			var pct *float64
			if tc.measured {
				pct = ptr(37.5)
			}
			got, ok := NewShares(nil, l, false).Learn(m, pct, "tmpl", mine.Token, tc.done, hclog.NewNullLogger())
			if ok != tc.want || (ok && got != 37.5) {
				t.Fatalf("Learn = %g, %v; want 37.5 learned: %v", got, ok, tc.want)
			}
			p, has := l.Profile("tmpl")
			stored := has && p.SMActivePercent != nil && *p.SMActivePercent == 37.5
			if wantStored := tc.want && tc.profile; stored != wantStored || has != tc.profile {
				t.Errorf("profile %+v (present %v): share stored %v, want %v", p, has, stored, wantStored)
			}
		})
	}
}

// A nil meter (an attempt not metered) learns nothing and may be marked shared.
func TestSharesNilMeter(t *testing.T) {
	t.Parallel()
	var m *SMMeter
	m.Share()
	if _, ok := NewShares(nil, nil, false).Learn(m, ptr(50), "tmpl", "ours", true, hclog.NewNullLogger()); ok {
		t.Fatal("a nil meter learned a share")
	}
}
