package ledger

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/size"
)

// A reader (gpufrac status) tells a fresh directory from one whose state file was removed beside
// recorded violations, as Open does: the first is an empty ledger, the second an error naming
// both files, never an empty ledger that hides the violations.
func TestReadSnapshotOfARemovedStateFile(t *testing.T) {
	for _, tc := range []struct {
		name       string
		violations int
		wantErr    error
	}{
		{"fresh", -1, fs.ErrNotExist},
		{"no violations recorded", 0, fs.ErrNotExist},
		{"violations recorded", 1, ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.violations >= 0 {
				l, err := Open(dir, Options{})
				if err != nil {
					t.Fatal(err)
				}
				if err := l.SyncGPUs([]GPUInfo{info(gpuA, 0, 12*size.GiB)}); err != nil {
					t.Fatal(err)
				}
				for range tc.violations {
					if err := l.RecordViolation(Violation{Token: "tok", GPU: gpuA, Action: "sigkill", CapBytes: size.GiB}); err != nil {
						t.Fatal(err)
					}
				}
				l.Close()
				if err := os.Remove(filepath.Join(dir, StateFile)); err != nil {
					t.Fatal(err)
				}
			}
			_, err := ReadSnapshot(dir)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ReadSnapshot: %v; want %v", err, tc.wantErr)
			}
			if tc.wantErr == ErrCorrupt && !strings.Contains(err.Error(), filepath.Join(dir, ViolationsFile)) {
				t.Errorf("ReadSnapshot: %v; want it to name %s", err, ViolationsFile)
			}
		})
	}
}
