package fence

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// What a tenant may write must hold neither the library other tenants run, nor the control
// copies that decide their allocations, nor another task's accounting: TaskMounts is the one
// place that says. A task writes its own reservation's accounting and lock directories and
// nothing else, and reaches, even read-only, neither another task's lock file (it would
// read-lock the bytes that task's processes need to attach) nor the enforcer's claims on the
// GPUs (it would read-lock one and keep the next enforcer off that GPU).
func TestTaskMounts(t *testing.T) {
	const dir = "/var/lib/gpufrac/fence"
	const token, other = "6f1c2a9e-0d7b-4a55-9a3e-2b8f1c7d4e60", "0a7e5d2c-9b1f-4c3e-8d6a-5f4b3c2a1e09"
	lib := filepath.Join(LibraryDir(dir), LibraryName)
	own, live := AccountDir(dir, token), LiveDir(dir, token)
	tests := []struct {
		name           string
		library, token string
		want           []Mount
	}{
		{"with the library", lib, token, []Mount{{Path: dir, ReadOnly: true}, {Path: own}, {Path: live}, {Path: ControlDir(dir), ReadOnly: true}, {Path: LibraryDir(dir), ReadOnly: true}}},
		{"without", "", token, []Mount{{Path: dir, ReadOnly: true}, {Path: own}, {Path: live}, {Path: ControlDir(dir), ReadOnly: true}}},
		{"no reservation", "", "", []Mount{{Path: dir, ReadOnly: true}, {Path: ControlDir(dir), ReadOnly: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := TaskMounts(dir+"/", tt.library, tt.token)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("TaskMounts = %v, want %v", got, tt.want)
			}
			for _, w := range got {
				for _, r := range []string{liveName(dir, other, "GPU-x", 7), filepath.Join(EnforcerDir(dir), "GPU-x.lock")} {
					if within(r, w.Path) {
						t.Errorf("%s reaches the task and holds %s", w.Path, r)
					}
				}
				if w.ReadOnly {
					continue
				}
				for _, r := range []string{ControlDir(dir), LibraryDir(dir), AccountPath(dir, other, "GPU-x"), dir} {
					if within(r, w.Path) {
						t.Errorf("%s is writable and holds %s", w.Path, r)
					}
				}
				if !within(AccountPath(dir, tt.token, "GPU-x"), w.Path) && !within(liveName(dir, tt.token, "GPU-x", 7), w.Path) {
					t.Errorf("%s is writable but holds none of the task's own accounting or lock files", w.Path)
				}
			}
		})
	}
}

// An accounting directory and a lock directory are named by the token's SHA-256, as the C side
// names them, and hold no token.
func TestAccountDirIsTheTokensHash(t *testing.T) {
	const token = "6f1c2a9e-0d7b-4a55-9a3e-2b8f1c7d4e60"
	d := AccountDir("/f/", token)
	h := sha256.Sum256([]byte(token))
	if want := "/f/" + hex.EncodeToString(h[:]); d != want || strings.Contains(d, token) {
		t.Fatalf("AccountDir = %s, want %s", d, want)
	}
	if got, want := AccountPath("/f", token, "GPU-x"), filepath.Join(d, "GPU-x.fence"); got != want {
		t.Fatalf("AccountPath = %s, want %s", got, want)
	}
	if got, want := liveName("/f/", token, "GPU-x", 42), "/f-live/"+hex.EncodeToString(h[:])+"/GPU-x.42.live"; got != want {
		t.Fatalf("liveName = %s, want %s", got, want)
	}
}

func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
