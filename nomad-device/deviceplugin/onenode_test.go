package deviceplugin

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
)

// The plugin's state_dir is a node's state directory, as `gpufrac status`, `gpufrac run` and
// `gpufrac probe` take it (--state-dir, /var/lib/gpufrac for root: the plugin's default too):
// status reads the plugin's reservations there, and a run or probe started on it meets the
// plugin's writer lock instead of opening a second ledger that admits onto the same GPUs.
func TestStateDirIsTheNodesStateDirectory(t *testing.T) {
	s, dir := newSim(t, "H100=80GiB", "")
	m, _ := firstFingerprint(t, s)
	held := ids(m.DeviceGroup[0], 3)
	mustReserve(t, s, held)

	snap, err := ledger.ReadSnapshot(dir) // gpufrac status --state-dir <state_dir>
	if err != nil {
		t.Fatalf("gpufrac status on state_dir %s finds no ledger: %v", dir, err)
	}
	if len(snap.GPUs) != 1 || len(snap.GPUs[0].Reservations) != 1 ||
		!slices.Equal(snap.GPUs[0].Reservations[0].InstanceIDs, held) {
		t.Errorf("gpufrac status on state_dir sees %+v, want the plugin's reservation of %v", snap.GPUs, held)
	}
	led, _, err := node.OpenLedger(dir, ledger.Options{}) // gpufrac run/probe --state-dir <state_dir>
	if err == nil {
		led.Close()
		t.Fatal("gpufrac run/probe on the plugin's state_dir opened a second writable ledger beside the plugin's")
	}
	if !errors.Is(err, ledger.ErrLocked) {
		t.Errorf("opening the node's ledger while the plugin runs: %v, want the plugin's writer lock", err)
	}
}

// A ledger an earlier version kept in <state_dir>/ledger is taken over at start: the tasks it
// holds keep their units and caps across the upgrade, and the old directory is left empty.
func TestLedgerOfAnEarlierVersionIsAdopted(t *testing.T) {
	first, dir := newSim(t, "H100=80GiB", "")
	m, _ := firstFingerprint(t, first)
	held := ids(m.DeviceGroup[0], 2)
	mustReserve(t, first, held)
	first.Shutdown()
	// Put the files where the earlier version wrote them.
	legacy := filepath.Join(dir, "ledger")
	if err := os.MkdirAll(legacy, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{ledger.StateFile, ledger.ViolationsFile} {
		if err := os.Rename(filepath.Join(dir, f), filepath.Join(legacy, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}

	s := newSimIn(t, dir, Options{}, "H100=80GiB", "")
	firstFingerprint(t, s)
	_, l, _ := s.runtime().parts()
	rs := l.Reservations()
	if len(rs) != 1 || !slices.Equal(rs[0].InstanceIDs, held) {
		t.Fatalf("reservations after the upgrade: %+v, want the one on %v", rs, held)
	}
	if _, err := os.Stat(filepath.Join(legacy, ledger.StateFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the earlier ledger file is still in %s (%v)", legacy, err)
	}
}
