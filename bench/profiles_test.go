package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/size"
)

func TestLoadProfiles(t *testing.T) {
	tests := []struct {
		name, doc string
		want      map[string]size.Bytes
		wantErr   string
	}{
		{name: "sizes and bytes", doc: `{"_source": "calibration", "lora-0.6b": "18.7GiB", "resnet50": "4601151488"}`,
			want: map[string]size.Bytes{LoRA06B: size.MustParse("18.7GiB"), ResNet50: 4601151488}},
		{name: "unknown template", doc: `{"bert": "1GiB"}`, wantErr: `"bert"`},
		{name: "bad size", doc: `{"resnet50": "lots"}`, wantErr: `resnet50 = "lots"`},
		{name: "zero", doc: `{"resnet50": "0"}`, wantErr: `resnet50 = "0"`},
		{name: "not an object", doc: `["resnet50"]`, wantErr: "JSON object"},
		{name: "bad date", doc: `{"_measured_at": "yesterday"}`, wantErr: `"yesterday"`},
		{name: "SM share of an unknown template", doc: `{"resnet50": "4GiB", "_sm_active_percent": {"bert": 50}}`, wantErr: `"bert"`},
		{name: "SM share past 100", doc: `{"resnet50": "4GiB", "_sm_active_percent": {"resnet50": 140}}`, wantErr: "_sm_active_percent.resnet50 = 140"},
		{name: "SM share without a peak", doc: `{"resnet50": "4GiB", "_sm_active_percent": {"eval-1.7b": 50}}`, wantErr: "eval-1.7b an SM share but no peak"},
		{name: "SM shares not an object", doc: `{"_sm_active_percent": 50}`, wantErr: "_sm_active_percent"},
		{name: "a note that is not a string", doc: `{"resnet50": 4}`, wantErr: "resnet50 = 4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.json")
			if err := os.WriteFile(path, []byte(tc.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := LoadProfiles(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d profiles, want %d: %+v", len(got), len(tc.want), got)
			}
			for _, p := range got {
				if tc.want[p.Template] != p.PeakBytes {
					t.Errorf("%s = %d, want %d", p.Template, p.PeakBytes, tc.want[p.Template])
				}
			}
		})
	}
}

// TestLoadProfilesSMActive: a profile's SM share is read into the ledger's profile; a template
// the file gives none is unknown, not 0.
func TestLoadProfilesSMActive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	doc := `{"resnet50": "14GiB", "eval-1.7b": "30GiB", "_sm_active_percent": {"resnet50": 56.4}}`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := LoadProfiles(path)
	if err != nil || len(got) != 2 {
		t.Fatalf("got %+v, %v", got, err)
	}
	for _, p := range got {
		switch {
		case p.Template == ResNet50 && (p.SMActivePercent == nil || *p.SMActivePercent != 56.4):
			t.Errorf("resnet50: SM active %v, want 56.4%%", p.SMActivePercent)
		case p.Template == Eval17B && p.SMActivePercent != nil:
			t.Errorf("eval-1.7b: SM active %g%%, want unknown", *p.SMActivePercent)
		}
	}
	// The committed busy footprints carry the calibration's SM shares, which a budgeted warm arm
	// sums: every stored template has one.
	busy, err := LoadProfilesFor("profiles-h200-busy.json", ProfileBusy)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range busy {
		if p.SMActivePercent == nil {
			t.Errorf("profiles-h200-busy.json: %s has no SM share", p.Template)
		}
	}
}

// The committed H200 profiles must stay loadable: the benchmark scripts pass them to warm arms.
func TestCommittedProfilesLoad(t *testing.T) {
	got, err := LoadProfiles("profiles-h200.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range got {
		if p.Template == Leaker {
			t.Errorf("the leaker has a stored profile (%s): it must be probed, so it looks small", p.PeakBytes)
		}
	}
	if len(got) != len(Templates)-1 {
		t.Errorf("%d profiles, want one per template but the leaker (%d)", len(got), len(Templates)-1)
	}
}

func TestLoadProfilesFor(t *testing.T) {
	tests := []struct {
		name, doc string
		want      WorkloadProfile
		wantErr   string
	}{
		{"no note is startup", `{"resnet50": "4GiB"}`, ProfileStartup, ""},
		{"no note, busy run", `{"resnet50": "4GiB"}`, ProfileBusy, "startup profile's jobs, not the busy"},
		{"busy footprints, busy run", `{"_workload": "busy", "resnet50": "21GiB"}`, ProfileBusy, ""},
		{"busy footprints, startup run", `{"_workload": "busy", "resnet50": "21GiB"}`, ProfileStartup, "busy profile's jobs, not the startup"},
		{"unknown note", `{"_workload": "heavy"}`, ProfileStartup, "heavy"},
		{"empty note", `{"_workload": ""}`, ProfileStartup, "_workload"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.json")
			if err := os.WriteFile(path, []byte(tc.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := LoadProfilesFor(path, tc.want)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(got) != 1 || got[0].Template != ResNet50 {
				t.Fatalf("got %+v, %v", got, err)
			}
		})
	}
}
