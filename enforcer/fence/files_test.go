package fence

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// What a tenant may write must hold neither the library other tenants run nor the control
// copies that decide their allocations: TaskMounts is the one place that says.
func TestTaskMounts(t *testing.T) {
	const dir = "/var/lib/gpufrac/fence"
	lib := filepath.Join(LibraryDir(dir), LibraryName)
	tests := []struct {
		name    string
		library string
		want    []Mount
	}{
		{"with the library", lib, []Mount{{Path: dir}, {Path: ControlDir(dir), ReadOnly: true}, {Path: LibraryDir(dir), ReadOnly: true}}},
		{"without", "", []Mount{{Path: dir}, {Path: ControlDir(dir), ReadOnly: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := TaskMounts(dir+"/", tt.library)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("TaskMounts = %v, want %v", got, tt.want)
			}
			for _, w := range got {
				if w.ReadOnly {
					continue
				}
				for _, r := range []string{ControlDir(dir), LibraryDir(dir)} {
					if within(r, w.Path) {
						t.Errorf("%s is writable and holds %s", w.Path, r)
					}
				}
			}
		})
	}
}

func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
