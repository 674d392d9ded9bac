package gpu

import (
	"strings"
	"testing"
	"time"
)

func TestClassifyXID(t *testing.T) {
	tests := []struct {
		code uint64
		want XIDClass
	}{
		// A tenant's own faults: the GPU serves its neighbours as before.
		{13, XIDApplication}, {31, XIDApplication}, {43, XIDApplication}, {45, XIDApplication},
		{68, XIDApplication}, {109, XIDApplication},
		// The GPU itself: memory, micro-controllers, bus, links, firmware.
		{48, XIDCritical}, {62, XIDCritical}, {63, XIDCritical}, {64, XIDCritical}, {74, XIDCritical},
		{79, XIDCritical}, {92, XIDCritical}, {94, XIDCritical}, {95, XIDCritical}, {119, XIDCritical},
		{120, XIDCritical},
		// Codes with no name here are critical: a new driver's fault is drained, not trusted.
		{1, XIDCritical}, {150, XIDCritical}, {1 << 40, XIDCritical},
	}
	for _, tc := range tests {
		if got := ClassifyXID(tc.code); got != tc.want {
			t.Errorf("ClassifyXID(%d) = %d, want %d", tc.code, got, tc.want)
		}
	}
	for _, c := range ApplicationXIDs() {
		if XIDName(c) == "" || ClassifyXID(c) != XIDApplication {
			t.Errorf("application XID %d: name %q, class %d", c, XIDName(c), ClassifyXID(c))
		}
	}
}

func TestMarkOf(t *testing.T) {
	at := time.Date(2026, 12, 8, 10, 4, 5, 0, time.FixedZone("CET", 3600))
	ignored := xidSet([]uint64{92})
	tests := []struct {
		name string
		ev   HealthEvent
		want string // "" means no mark
	}{
		{"fallen off the bus", HealthEvent{Kind: EventXID, XID: 79, At: at},
			"XID 79 at 2026-12-08T09:04:05Z: GPU has fallen off the bus; kept until this gpufrac process restarts"},
		{"double-bit ECC XID", HealthEvent{Kind: EventXID, XID: 48, At: at},
			"XID 48 at 2026-12-08T09:04:05Z: double-bit ECC error; kept until this gpufrac process restarts"},
		{"a code with no name", HealthEvent{Kind: EventXID, XID: 150, At: at},
			"XID 150 at 2026-12-08T09:04:05Z: critical (not an application's own fault); kept until this gpufrac process restarts"},
		{"double-bit ECC event", HealthEvent{Kind: EventDoubleBitECC, At: at},
			"double-bit ECC error at 2026-12-08T09:04:05Z; kept until this gpufrac process restarts"},
		{"graphics engine exception", HealthEvent{Kind: EventXID, XID: 13, At: at}, ""},
		{"MMU fault", HealthEvent{Kind: EventXID, XID: 31, At: at}, ""},
		{"context switch timeout", HealthEvent{Kind: EventXID, XID: 109, At: at}, ""},
		{"ignored by the operator", HealthEvent{Kind: EventXID, XID: 92, At: at}, ""},
		{"an unknown kind", HealthEvent{Kind: 0, XID: 79, At: at}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := markOf(tc.ev, ignored); got != tc.want {
				t.Fatalf("markOf = %q, want %q", got, tc.want)
			}
		})
	}
	// The ignore list is the operator's: without it XID 92 marks.
	if markOf(HealthEvent{Kind: EventXID, XID: 92, At: at}, nil) == "" {
		t.Error("XID 92 left a GPU healthy with nothing ignored")
	}
}

func TestParseXIDs(t *testing.T) {
	tests := []struct {
		in      string
		want    []uint64
		wantErr string // a fragment naming the bad entry
	}{
		{"", nil, ""},
		{"63", []uint64{63}, ""},
		{" 92 , 63,92", []uint64{63, 92}, ""},
		{"63,abc", nil, `"abc"`},
		{"-1", nil, `"-1"`},
		{"63,", nil, `""`},
		{"0", nil, "XID 0"},
		{"63,13", []uint64{13, 63}, ""}, // an application XID never marks a GPU: listing it changes nothing
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseXIDs(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseXIDs(%q) = %v, %v; want an error containing %s", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || len(got) != len(tc.want) {
				t.Fatalf("ParseXIDs(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("ParseXIDs(%q) = %v, want %v", tc.in, got, tc.want)
				}
			}
		})
	}
	if err := (HealthOptions{IgnoredXIDs: []uint64{63, 0}}).check(); err == nil || !strings.Contains(err.Error(), "XID 0") {
		t.Errorf("HealthOptions with XID 0: %v, want an error naming XID 0", err)
	}
}

func TestMemoryErrorsReason(t *testing.T) {
	tests := []struct {
		name string
		m    MemoryErrors
		want string // a fragment; "" means healthy
	}{
		{"clean", MemoryErrors{}, ""},
		{"remap pending", MemoryErrors{RemapPending: true}, "row remapping pending: reset the GPU"},
		{"remap failed", MemoryErrors{RemapFailed: true}, "row remapping failed"},
		{"failed outranks pending", MemoryErrors{RemapPending: true, RemapFailed: true, Uncorrectable: 2}, "row remapping failed"},
		{"uncorrectable errors", MemoryErrors{Uncorrectable: 3}, "uncorrectable ECC errors since gpufrac started (3)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.m.reason()
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("reason = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHealthMarksKeepTheFirst(t *testing.T) {
	var m healthMarks
	if m.get("GPU-a") != (eventMark{}) {
		t.Fatal("a mark before any event")
	}
	first := eventMark{reason: "XID 48", at: time.Unix(100, 0)}
	if !m.set("GPU-a", first) || m.set("GPU-a", eventMark{reason: "XID 79", at: time.Unix(101, 0)}) {
		t.Fatal("set did not say which mark it recorded")
	}
	if got := m.get("GPU-a"); got != first {
		t.Fatalf("mark %+v, want the first one", got)
	}
	if m.get("GPU-b") != (eventMark{}) {
		t.Fatal("another GPU's mark leaked")
	}
}

func TestECCBaseline(t *testing.T) {
	var b eccBaseline
	steps := []struct {
		uuid        string
		count, want uint64
	}{
		{"A", 5, 0}, // history at the first reading
		{"A", 5, 0},
		{"A", 7, 2},
		{"B", 0, 0},
		{"B", 1, 1},
		{"A", 0, 0}, // a reset zeroed the counter: a new baseline
		{"A", 1, 1},
	}
	for i, s := range steps {
		if got := b.since(s.uuid, s.count); got != s.want {
			t.Fatalf("step %d: since(%s, %d) = %d, want %d", i, s.uuid, s.count, got, s.want)
		}
	}
}
