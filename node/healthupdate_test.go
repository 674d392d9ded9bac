package node

import (
	"fmt"
	"testing"

	"github.com/gpufrac/gpufrac/gpu"
)

// The watch takes only health from a new listing, and only for the GPUs Open listed: one that
// vanished keeps its last listing, one that appeared is not taken on.
func TestHealthUpdate(t *testing.T) {
	ok := func(u string) gpu.Device { return gpu.Device{UUID: u, Model: "H100", Healthy: true} }
	sick := func(u, why string) gpu.Device { return gpu.Device{UUID: u, Model: "H100", HealthReason: why} }
	tests := []struct {
		name               string
		last, devs         []gpu.Device
		wantNext, wantChgd []gpu.Device
	}{
		{"nothing changed", []gpu.Device{ok("a"), ok("b")}, []gpu.Device{ok("a"), ok("b")},
			[]gpu.Device{ok("a"), ok("b")}, nil},
		{"one goes bad", []gpu.Device{ok("a"), ok("b")}, []gpu.Device{ok("a"), sick("b", "XID 79")},
			[]gpu.Device{ok("a"), sick("b", "XID 79")}, []gpu.Device{sick("b", "XID 79")}},
		{"a new reason", []gpu.Device{sick("a", "row remapping pending")}, []gpu.Device{sick("a", "XID 48")},
			[]gpu.Device{sick("a", "XID 48")}, []gpu.Device{sick("a", "XID 48")}},
		{"healthy again", []gpu.Device{sick("a", "row remapping pending")}, []gpu.Device{ok("a")},
			[]gpu.Device{ok("a")}, []gpu.Device{ok("a")}},
		{"one vanished, the other goes bad", []gpu.Device{ok("a"), ok("b")}, []gpu.Device{sick("b", "XID 94")},
			[]gpu.Device{ok("a"), sick("b", "XID 94")}, []gpu.Device{sick("b", "XID 94")}},
		{"one appeared", []gpu.Device{ok("a")}, []gpu.Device{ok("a"), sick("c", "XID 79")},
			[]gpu.Device{ok("a")}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			next, changed := healthUpdate(tc.last, tc.devs)
			if fmt.Sprint(next) != fmt.Sprint(tc.wantNext) || fmt.Sprint(changed) != fmt.Sprint(tc.wantChgd) {
				t.Fatalf("healthUpdate = %v, %v; want %v, %v", next, changed, tc.wantNext, tc.wantChgd)
			}
		})
	}
}
