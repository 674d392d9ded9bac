package gpu

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestOpen(t *testing.T) {
	tests := []struct {
		kind     string
		sim      []string
		wantKind string // "" when an error is expected
		wantErr  string
		wantLog  string
		gpuOnly  bool // the expectation holds only where NVML works
		noGPU    bool // the expectation holds only where NVML fails
	}{
		{kind: "simulated", sim: []string{"2xA100=40GiB"}, wantKind: KindSimulated},
		{kind: "auto", wantKind: KindSimulated, wantLog: "using the SIMULATED GPU backend", noGPU: true},
		{kind: "", wantKind: KindSimulated, wantLog: "no NVIDIA GPU found", noGPU: true},
		{kind: "nvml", wantErr: "NVML", noGPU: true},
		{kind: "auto", wantKind: KindNVML, gpuOnly: true},
		{kind: "cuda", wantErr: `"cuda"`},
		{kind: "simulated", sim: []string{"A100"}, wantErr: `"A100"`},
	}
	for _, tc := range tests {
		if (tc.gpuOnly && !gpuTests) || (tc.noGPU && gpuTests) {
			continue
		}
		t.Run(tc.kind+"/"+strings.Join(tc.sim, ","), func(t *testing.T) {
			var logs bytes.Buffer
			logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})
			b, err := Open(tc.kind, OpenOptions{SimGPUs: tc.sim, SimDir: filepath.Join(t.TempDir(), "sim"), Logger: logger})
			if tc.wantKind == "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Open(%q) error %v, want one containing %s", tc.kind, err, tc.wantErr)
				}
				// A typed nil inside the interface would pass callers' nil checks and panic later.
				if b != nil {
					t.Fatalf("Open(%q) returned a non-nil backend %#v with its error", tc.kind, b)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%q): %v", tc.kind, err)
			}
			defer b.Close()
			if b.Kind() != tc.wantKind {
				t.Fatalf("Open(%q).Kind() = %q, want %q", tc.kind, b.Kind(), tc.wantKind)
			}
			if !strings.Contains(logs.String(), tc.wantLog) {
				t.Fatalf("log %q lacks %q", logs.String(), tc.wantLog)
			}
			if tc.wantLog != "" && !strings.Contains(logs.String(), "[WARN]") {
				t.Fatalf("the fallback is not logged as a warning: %q", logs.String())
			}
		})
	}
}

func TestOpenSimulatedDefault(t *testing.T) {
	b, err := Open(KindSimulated, OpenOptions{SimDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	devs, err := b.Devices(t.Context())
	if err != nil || len(devs) != 1 || devs[0].Model != "H100" || devs[0].UUID != SimUUID(0, "H100") {
		t.Fatalf("default simulated GPUs = %+v, %v", devs, err)
	}
}
