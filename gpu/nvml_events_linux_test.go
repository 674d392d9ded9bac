//go:build linux && cgo

package gpu

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/hashicorp/go-hclog"
)

func TestHealthEventOf(t *testing.T) {
	at := time.Unix(1800000000, 0)
	tests := []struct {
		name      string
		eventType uint64
		data      uint64
		want      HealthEvent
		ok        bool
	}{
		{"XID", nvml.EventTypeXidCriticalError, 79, HealthEvent{Kind: EventXID, XID: 79, At: at}, true},
		{"application XID is still an XID", nvml.EventTypeXidCriticalError, 13, HealthEvent{Kind: EventXID, XID: 13, At: at}, true},
		{"double-bit ECC", nvml.EventTypeDoubleBitEccError, 0, HealthEvent{Kind: EventDoubleBitECC, At: at}, true},
		{"single-bit ECC says nothing of health", nvml.EventTypeSingleBitEccError, 0, HealthEvent{}, false},
		{"a clock change", nvml.EventTypeClock, 0, HealthEvent{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := healthEventOf(tc.eventType, tc.data, at)
			if ok != tc.ok || got != tc.want {
				t.Fatalf("healthEventOf = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// fakeEventSet delivers the events and errors a test sends, one per Wait, and times out as
// NVML's Wait does when there is none. Only Wait and Free are called by the watch.
type fakeEventSet struct {
	nvml.EventSet
	events chan nvml.EventData
	errs   chan nvml.Return
	freed  atomic.Bool
}

func (f *fakeEventSet) Wait(ms uint32) (nvml.EventData, nvml.Return) {
	select {
	case e := <-f.events:
		return e, nvml.SUCCESS
	case r := <-f.errs:
		return nvml.EventData{}, r
	case <-time.After(time.Duration(ms) * time.Millisecond):
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
}

func (f *fakeEventSet) Free() nvml.Return {
	f.freed.Store(true)
	return nvml.SUCCESS
}

// fakeDevice stands for a GPU handle; only its identity is used.
type fakeDevice struct {
	nvml.Device
	n int
}

// The watch's loop, without NVML: application XIDs and ignored ones leave a GPU in service, a
// critical XID or a double-bit ECC error marks the GPU it came from and the first mark stays,
// failed Waits are logged once and retried, and close returns within one Wait.
func TestEventWatchLoop(t *testing.T) {
	var logs bytes.Buffer
	set := &fakeEventSet{events: make(chan nvml.EventData), errs: make(chan nvml.Return)}
	var marks healthMarks
	w := newEventWatch(hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}), set, &marks,
		HealthOptions{IgnoredXIDs: []uint64{92}})
	w.retry = time.Millisecond
	at := time.Date(2026, 12, 8, 10, 0, 0, 0, time.UTC)
	w.now = func() time.Time { return at }
	gpu0, gpu1 := fakeDevice{n: 0}, fakeDevice{n: 1}
	w.uuids[gpu0], w.uuids[gpu1] = "GPU-0", "GPU-1"
	go w.run()

	// Each send returns once the loop took the event; the next one, once it handled it.
	send := func(d nvml.Device, typ, data uint64) {
		t.Helper()
		select {
		case set.events <- nvml.EventData{Device: d, EventType: typ, EventData: data}:
		case <-time.After(5 * time.Second):
			t.Fatal("the watch stopped taking events")
		}
	}
	send(gpu0, nvml.EventTypeXidCriticalError, 13)
	send(gpu0, nvml.EventTypeXidCriticalError, 31)
	send(gpu0, nvml.EventTypeXidCriticalError, 92)
	send(gpu1, nvml.EventTypePState, 0)
	if m := marks.get("GPU-0").reason; m != "" {
		t.Fatalf("GPU-0 marked %q after application XIDs and an ignored one", m)
	}
	send(gpu0, nvml.EventTypeXidCriticalError, 79)
	send(gpu1, nvml.EventTypeDoubleBitEccError, 0)
	send(gpu0, nvml.EventTypeXidCriticalError, 48)
	send(nil, nvml.EventTypeXidCriticalError, 48)
	for range 2 {
		select {
		case set.errs <- nvml.ERROR_UNKNOWN:
		case <-time.After(5 * time.Second):
			t.Fatal("the watch stopped waiting after a failed Wait")
		}
	}
	send(gpu1, nvml.EventTypePState, 0) // the loop lives on after failed Waits

	if m := marks.get("GPU-0").reason; !strings.HasPrefix(m, "XID 79 at 2026-12-08T10:00:00Z: GPU has fallen off the bus") {
		t.Errorf("GPU-0 mark %q, want the first critical XID's (79), not the later 48", m)
	}
	if m := marks.get("GPU-1").reason; !strings.HasPrefix(m, "double-bit ECC error at 2026-12-08T10:00:00Z") {
		t.Errorf("GPU-1 mark %q, want the double-bit ECC error", m)
	}

	start := time.Now()
	w.close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("close took %s; a Wait is bounded by %d ms", d, eventWaitMillis)
	}
	if !set.freed.Load() {
		t.Error("close did not free the event set")
	}
	out := logs.String()
	for _, want := range []string{
		"XID of an application's own fault: the GPU stays in service: gpu=GPU-0 xid=13",
		"critical XID the configuration ignores: the GPU stays in service: gpu=GPU-0 xid=92",
		"GPU marked unhealthy",
		"another critical event on a GPU already marked unhealthy: gpu=GPU-0",
		"GPU event from a GPU that cannot be named",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "waiting for GPU events failed"); n != 1 {
		t.Errorf("a Wait that failed twice the same way was logged %d times, want once:\n%s", n, out)
	}
}
