package deviceplugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
)

// A task gets the fence's tables, which its processes write, the library, which every task's
// processes run, and the tables' control copies in separate mounts: the library's and the
// copies' read-only, so no tenant can rewrite what the others load or what decides their
// allocations.
func TestReserveMountsTheLibraryReadOnly(t *testing.T) {
	lib := filepath.Join(t.TempDir(), fence.LibraryName)
	if err := os.WriteFile(lib, []byte("stands for the library"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, _ := newSim(t, "H100=80GiB", `fence_library = "`+lib+`"`)
	m, _ := firstFingerprint(t, s)
	res := mustReserve(t, s, ids(m.DeviceGroup[0], 1))
	tables, preload := res.Envs[fence.EnvDir], res.Envs[fence.EnvPreload]
	if tables == "" || preload == "" {
		t.Fatalf("the task is not fenced: %v", res.Envs)
	}
	var sawTables, sawLib, sawCaps bool
	for _, mt := range res.Mounts {
		switch {
		case mt.TaskPath == tables:
			sawTables = !mt.ReadOnly
		case mt.TaskPath == fence.ControlDir(tables):
			sawCaps = mt.ReadOnly && mt.HostPath == mt.TaskPath
		case mt.TaskPath == filepath.Dir(preload):
			sawLib = mt.ReadOnly && mt.HostPath == mt.TaskPath
		}
		if strings.HasPrefix(preload, mt.TaskPath+"/") && !mt.ReadOnly {
			t.Fatalf("the library %s reaches the task through a writable mount %+v", preload, mt)
		}
	}
	if !sawTables || !sawLib || !sawCaps {
		t.Fatalf("want the tables' directory %s writable, the library's %s and the control copies' read-only, got %v", tables, filepath.Dir(preload), res.Mounts)
	}
	if st, err := os.Stat(fence.ControlDir(tables)); err != nil || !st.IsDir() {
		t.Fatalf("the control copies' directory must exist before the task mounts it: %v", err)
	}
	st, err := os.Stat(preload)
	if err != nil || st.Mode().Perm()&0o222 != 0 {
		t.Fatalf("the installed library must be read-only to everyone: %v %v", st.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(tables, fence.LibraryName)); !os.IsNotExist(err) {
		t.Fatalf("no library may lie in the tables' directory: %v", err)
	}
}
