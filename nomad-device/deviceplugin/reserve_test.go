package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node/nodetest"
)

// A task gets the fence's directory read-only with its own accounting directory writable on top
// and its own lock directory writable (the only paths it may write), the library, which every
// task's processes run, and the control copies in separate mounts: all but its own accounting and
// lock directories read-only, so no tenant can rewrite what the others load, what decides their
// allocations, or what they count. Nothing reaches it of the other tasks' lock directories or of
// the enforcer's claims on the GPUs.
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
	token := res.Envs[enforcer.EnvReservation]
	own, live := fence.AccountDir(tables, token), fence.LiveDir(tables, token)
	var sawTables, sawOwn, sawLive, sawLib, sawCaps bool
	for _, mt := range res.Mounts {
		switch {
		case mt.TaskPath == tables:
			sawTables = mt.ReadOnly && mt.HostPath == mt.TaskPath
		case mt.TaskPath == own:
			sawOwn = !mt.ReadOnly && mt.HostPath == mt.TaskPath
		case mt.TaskPath == live:
			sawLive = !mt.ReadOnly && mt.HostPath == mt.TaskPath
		case mt.TaskPath == fence.ControlDir(tables):
			sawCaps = mt.ReadOnly && mt.HostPath == mt.TaskPath
		case mt.TaskPath == filepath.Dir(preload):
			sawLib = mt.ReadOnly && mt.HostPath == mt.TaskPath
		}
		if strings.HasPrefix(preload, mt.TaskPath+"/") && !mt.ReadOnly {
			t.Fatalf("the library %s reaches the task through a writable mount %+v", preload, mt)
		}
		if !mt.ReadOnly && mt.TaskPath != own && mt.TaskPath != live {
			t.Fatalf("a writable mount %+v besides the task's own accounting %s and lock directory %s", mt, own, live)
		}
		for _, d := range []string{fence.LiveRoot(tables), fence.EnforcerDir(tables)} {
			if mt.TaskPath == d || (strings.HasPrefix(mt.TaskPath, d+"/") && mt.TaskPath != live) {
				t.Fatalf("the mount %+v reaches the task and holds what only the enforcer or another task may reach", mt)
			}
		}
	}
	if !sawTables || !sawOwn || !sawLive || !sawLib || !sawCaps {
		t.Fatalf("want the fence directory %s, the library's %s and the control copies' read-only, the task's accounting %s and lock directory %s writable, got %v", tables, filepath.Dir(preload), own, live, res.Mounts)
	}
	for _, d := range []string{own, live, fence.ControlDir(tables)} {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			t.Fatalf("%s must exist before the task mounts it: %v", d, err)
		}
	}
	st, err := os.Stat(preload)
	if err != nil || st.Mode().Perm()&0o222 != 0 {
		t.Fatalf("the installed library must be read-only to everyone: %v %v", st.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(tables, fence.LibraryName)); !os.IsNotExist(err) {
		t.Fatalf("no library may lie in the tables' directory: %v", err)
	}
}

// The plugin admits through the node exactly as gpufrac run does: the same table of cases
// (runner's TestAdmissionTable runs it too) brings the same decisions, with Nomad's instance
// IDs for the units it would place.
func TestAdmissionTable(t *testing.T) {
	nodetest.Run(t, func(t *testing.T, c nodetest.Case, s nodetest.Setup) (ledger.Reservation, bool, error) {
		ids := nodetest.FreeIDs(s.Ledger, int(c.Cap/nodetest.Unit))
		out, a, err := admit(context.Background(), s.Node, ids)
		if got := out.GetEnvs()["GPUFRAC_RESERVATION"]; err == nil && got != a.Reservation.Token {
			t.Fatalf("the task's environment names reservation %q, want the admitted one", got)
		}
		return a.Reservation, err == nil, err
	})
}
