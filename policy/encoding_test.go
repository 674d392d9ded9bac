package policy

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

func samplePolicy() Policy {
	p := Default()
	p.Name = "gpu-pool_a"
	p.HeadroomBytes = 3*size.GiB + 7
	p.CapMarginPercent = 12.5
	p.Mode = ModeMPS
	p.WatchdogInterval = 250 * time.Millisecond
	p.Unmanaged = UnmanagedStop
	return p
}

func TestEncodePolicyItems(t *testing.T) {
	items, err := EncodePolicy(samplePolicy())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"schema_version":     "1",
		"name":               "gpu-pool_a",
		"headroom_bytes":     "3221225479",
		"cap_margin_percent": "12.5",
		"cap_margin_bytes":   "1500000000",
		"max_tasks_per_gpu":  "6",
		"unit_bytes":         "1073741824",
		"mode":               "mps",
		"watchdog_interval":  "250ms",
		"unmanaged":          "stop",
	}
	if !maps.Equal(items, want) {
		t.Fatalf("items = %v\nwant    %v", items, want)
	}
	got, err := DecodePolicy(items)
	if err != nil {
		t.Fatal(err)
	}
	if got != samplePolicy() {
		t.Fatalf("round trip: got %+v want %+v", got, samplePolicy())
	}
}

func TestEncodeTemplateItems(t *testing.T) {
	tests := []struct {
		name string
		in   Template
		want map[string]string
	}{
		{"minimal", Template{Name: "llama", PeakBytes: 5 * size.GiB},
			map[string]string{"schema_version": "1", "name": "llama", "policy": "", "peak_bytes": "5368709120"}},
		{"full", Template{Name: "sd", Policy: "default", PeakBytes: 1, CapOverrideBytes: 2 * size.GiB, Description: "Stable Diffusion"},
			map[string]string{"schema_version": "1", "name": "sd", "policy": "default", "peak_bytes": "1",
				"cap_override_bytes": "2147483648", "description": "Stable Diffusion"}},
		{"override only", Template{Name: "x", CapOverrideBytes: 3},
			map[string]string{"schema_version": "1", "name": "x", "policy": "", "peak_bytes": "0", "cap_override_bytes": "3"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			items, err := EncodeTemplate(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(items, tc.want) {
				t.Fatalf("items = %v\nwant    %v", items, tc.want)
			}
			got, err := DecodeTemplate(items)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.in {
				t.Fatalf("round trip: got %+v want %+v", got, tc.in)
			}
		})
	}
}

func TestEncodeRejectsInvalid(t *testing.T) {
	p := samplePolicy()
	p.Mode = "fast"
	if _, err := EncodePolicy(p); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"fast"`) {
		t.Fatalf("EncodePolicy(mode=fast) err = %v", err)
	}
	if _, err := EncodeTemplate(Template{Name: "a b", PeakBytes: 1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("EncodeTemplate(bad name) err = %v", err)
	}
}

func TestCheckSize(t *testing.T) {
	big := map[string]string{"k": strings.Repeat("x", MaxItemsBytes)}
	if err := checkSize(big); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "65537") {
		t.Fatalf("checkSize(65537 bytes) = %v", err)
	}
	ok := map[string]string{"k": strings.Repeat("x", MaxItemsBytes-1)}
	if err := checkSize(ok); err != nil {
		t.Fatalf("checkSize(65536 bytes) = %v", err)
	}
}

func TestDecodePolicyErrors(t *testing.T) {
	good, err := EncodePolicy(samplePolicy())
	if err != nil {
		t.Fatal(err)
	}
	with := func(k, v string) map[string]string {
		m := maps.Clone(good)
		m[k] = v
		return m
	}
	without := func(k string) map[string]string {
		m := maps.Clone(good)
		delete(m, k)
		return m
	}
	tests := []struct {
		name  string
		items map[string]string
		want  []string // substrings of the error
		too   bool     // errors.Is ErrSchemaTooNew
	}{
		{"nil", nil, []string{"no items"}, false},
		{"newer schema", with("schema_version", "7"), []string{`schema_version "7" is newer than this gpufrac understands (1): upgrade gpufrac`}, true},
		{"newer schema beats unknown keys", with("cpu_share", "1"), nil, false},
		{"schema zero", with("schema_version", "0"), []string{`schema_version = "0"`}, false},
		{"schema text", with("schema_version", "one"), []string{`schema_version = "one"`}, false},
		{"schema missing", without("schema_version"), []string{"schema_version", "missing"}, false},
		{"missing name", without("name"), []string{"name = (missing)"}, false},
		{"missing two", without("unit_bytes"), []string{"unit_bytes = (missing)"}, false},
		{"unknown key", with("headroom", "2GiB"), []string{`"headroom"`, "unknown"}, false},
		{"size with unit", with("headroom_bytes", "2GiB"), []string{`headroom_bytes = "2GiB"`, "base 10"}, false},
		{"negative bytes", with("unit_bytes", "-1"), []string{`unit_bytes = "-1"`}, false},
		{"overflow bytes", with("cap_margin_bytes", "18446744073709551616"), []string{`cap_margin_bytes = "18446744073709551616"`}, false},
		{"percent NaN", with("cap_margin_percent", "NaN"), []string{`cap_margin_percent = "NaN"`}, false},
		{"percent hex", with("cap_margin_percent", "0x1p3"), []string{`cap_margin_percent = "0x1p3"`}, false},
		{"percent text", with("cap_margin_percent", "ten"), []string{`cap_margin_percent = "ten"`}, false},
		{"tasks float", with("max_tasks_per_gpu", "2.5"), []string{`max_tasks_per_gpu = "2.5"`}, false},
		{"duration bare", with("watchdog_interval", "100"), []string{`watchdog_interval = "100"`, "Go duration"}, false},
		{"validate runs", with("max_tasks_per_gpu", "0"), []string{"max_tasks_per_gpu = 0", "between 1 and 64"}, false},
		{"bad mode", with("mode", "MPS"), []string{`mode = "MPS"`}, false},
		{"two errors at once", with("unit_bytes", "x"), []string{`unit_bytes = "x"`}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "newer schema beats unknown keys" {
				tc.items["schema_version"] = "2"
				tc.want = []string{"upgrade gpufrac"}
				tc.too = true
			}
			if tc.name == "two errors at once" {
				tc.items["mode"] = "fast"
				tc.want = append(tc.want, `unit_bytes = "x"`)
			}
			_, err := DecodePolicy(tc.items)
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			if errors.Is(err, ErrSchemaTooNew) != tc.too {
				t.Errorf("errors.Is(err, ErrSchemaTooNew) = %v, want %v (%v)", !tc.too, tc.too, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestDecodeTemplateErrors(t *testing.T) {
	tests := []struct {
		name  string
		items map[string]string
		want  string
	}{
		{"missing policy", map[string]string{"schema_version": "1", "name": "a", "peak_bytes": "1"}, "policy = (missing)"},
		{"unknown", map[string]string{"schema_version": "1", "name": "a", "policy": "", "peak_bytes": "1", "peak": "1"}, `"peak"`},
		{"bad override", map[string]string{"schema_version": "1", "name": "a", "policy": "", "peak_bytes": "1", "cap_override_bytes": "1.5"}, `cap_override_bytes = "1.5"`},
		{"no peak no override", map[string]string{"schema_version": "1", "name": "a", "policy": "", "peak_bytes": "0"}, "peak"},
		{"newer", map[string]string{"schema_version": "2"}, `schema_version "2" is newer`},
		{"bad policy name", map[string]string{"schema_version": "1", "name": "a", "policy": "x/y", "peak_bytes": "1"}, `policy = "x/y"`},
		{"sm active past 100", map[string]string{"schema_version": "1", "name": "a", "policy": "", "peak_bytes": "1", "sm_active_percent": "101"}, "sm_active_percent = 101"},
		{"sm active not a number", map[string]string{"schema_version": "1", "name": "a", "policy": "", "peak_bytes": "1", "sm_active_percent": "lots"}, `sm_active_percent = "lots"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeTemplate(tc.items)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestPaths(t *testing.T) {
	if got := PolicyPath("default"); got != "gpufrac/policy/default" {
		t.Errorf("PolicyPath = %q", got)
	}
	if got := TemplatePath("llama"); got != "gpufrac/templates/llama" {
		t.Errorf("TemplatePath = %q", got)
	}
}

func BenchmarkEncodePolicy(b *testing.B) {
	p := samplePolicy()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodePolicy(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodePolicy(b *testing.B) {
	items, err := EncodePolicy(samplePolicy())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodePolicy(items); err != nil {
			b.Fatal(err)
		}
	}
}

func TestFieldErrorsUseItemKeys(t *testing.T) {
	items, err := EncodePolicy(samplePolicy())
	if err != nil {
		t.Fatal(err)
	}
	items["unit_bytes"] = "1"
	items["headroom_bytes"] = "99999999999999999"
	items["mode"] = "fast"
	_, err = DecodePolicy(items)
	var fields []string
	for _, fe := range FieldErrors(fmt.Errorf("wrapped: %w", err)) {
		fields = append(fields, fe.Field)
	}
	if got := strings.Join(fields, ","); got != "unit_bytes,headroom_bytes,mode" {
		t.Fatalf("fields = %s (err %v)", got, err)
	}
	_, err = EncodeTemplate(Template{Name: "a"})
	if fes := FieldErrors(err); len(fes) != 1 || fes[0].Field != "peak_bytes" {
		t.Fatalf("template field errors = %v", err)
	}
	if FieldErrors(nil) != nil {
		t.Fatal("FieldErrors(nil) not empty")
	}
}
