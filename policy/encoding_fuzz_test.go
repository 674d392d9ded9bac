package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// fuzzItems turns a flat "k=v;k=v" string into items so the fuzzer can invent keys and values.
func fuzzItems(s string) map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Split(s, ";") {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func FuzzDecodePolicy(f *testing.F) {
	f.Add("schema_version=1;name=default;headroom_bytes=2147483648;cap_margin_percent=15;cap_margin_bytes=1500000000;max_tasks_per_gpu=6;unit_bytes=1073741824;mode=isolated;watchdog_interval=100ms;unmanaged=report",
		"x", uint64(1), 12.5, 3, uint64(size.GiB), int64(time.Second), true, false)
	f.Add("schema_version=2", "", uint64(0), -1.0, 0, uint64(0), int64(0), false, true)
	f.Fuzz(func(t *testing.T, raw, name string, headroom uint64, pct float64, tasks int, unit uint64, wd int64, mps, stop bool) {
		_, _ = DecodePolicy(fuzzItems(raw)) // must not panic

		p := Policy{Name: name, HeadroomBytes: size.Bytes(headroom), CapMarginPercent: pct,
			CapMarginBytes: size.Bytes(headroom / 3), MaxTasksPerGPU: tasks, UnitBytes: size.Bytes(unit),
			Mode: ModeIsolated, WatchdogInterval: time.Duration(wd), Unmanaged: UnmanagedReport}
		if mps {
			p.Mode = ModeMPS
		}
		if stop {
			p.Unmanaged = UnmanagedStop
		}
		items, err := EncodePolicy(p)
		if (err == nil) != (p.Validate() == nil) {
			t.Fatalf("EncodePolicy err = %v but Validate = %v", err, p.Validate())
		}
		if err != nil {
			return
		}
		checkRoundTrip(t, items, DecodePolicy, p)
	})
}

// checkRoundTrip fails the test unless decode gives back want, the value items encode.
func checkRoundTrip[T comparable](t *testing.T, items map[string]string, decode func(map[string]string) (T, error), want T) {
	t.Helper()
	got, err := decode(items)
	if err != nil {
		t.Fatalf("decode(encode(%+v)): %v", want, err)
	}
	if got != want {
		t.Fatalf("round trip: got %+v want %+v", got, want)
	}
}

func FuzzDecodeTemplate(f *testing.F) {
	f.Add("schema_version=1;name=llama;policy=default;peak_bytes=5368709120", "llama", "default", uint64(5), uint64(0), "hello")
	f.Add("schema_version=1;name=a;policy=;peak_bytes=0;cap_override_bytes=1;description=", "a", "", uint64(0), uint64(1), "")
	f.Fuzz(func(t *testing.T, raw, name, pol string, peak, override uint64, desc string) {
		_, _ = DecodeTemplate(fuzzItems(raw))

		tpl := Template{Name: name, Policy: pol, PeakBytes: size.Bytes(peak), CapOverrideBytes: size.Bytes(override), Description: desc}
		items, err := EncodeTemplate(tpl)
		if err != nil {
			return
		}
		checkRoundTrip(t, items, DecodeTemplate, tpl)
	})
}
