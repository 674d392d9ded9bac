package deviceplugin

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"

	"github.com/gpufrac/gpufrac/ledger"
)

// adoptLedger returns the directory the plugin's ledger is opened in: c.LedgerDir, after moving
// there a ledger an earlier version kept in c.legacyLedgerDir, so that the tasks it holds keep
// their units and caps across the upgrade. Where it cannot be moved (a process still writes it,
// or state_dir already holds another ledger, say of a `gpufrac run` as root) the plugin goes on
// in the old directory and says why: its reservations must not be lost.
func adoptLedger(c Config, log hclog.Logger) string {
	old, dir := c.legacyLedgerDir(), c.LedgerDir()
	if !exists(filepath.Join(old, ledger.StateFile)) {
		return dir
	}
	keep := func(why string, err error) string {
		log.Warn("the ledger stays in the earlier version's directory: gpufrac status, run and probe with --state-dir set to state_dir do not see it",
			"ledger_dir", old, "state_dir", dir, "why", why, "error", err)
		return old
	}
	if exists(filepath.Join(dir, ledger.StateFile)) {
		return keep("state_dir holds another ledger; merge or remove one of them", nil)
	}
	// Taking its lock: an earlier plugin that still writes it keeps it (and the lock error
	// shows, as for any second writer).
	l, err := ledger.Open(old, ledger.Options{Logger: log})
	if err != nil {
		return keep("cannot open it", err)
	}
	if err := l.Close(); err != nil {
		return keep("cannot close it", err)
	}
	// Violations first: the state file's arrival is what marks the move done, and a ledger
	// opened without one would set its violations aside as orphans.
	for _, f := range []string{ledger.ViolationsFile, ledger.StateFile} {
		if err := os.Rename(filepath.Join(old, f), filepath.Join(dir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return keep("cannot move "+f, err)
		}
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the renames must outlive a crash, or the next start moves them again
		d.Close()
	}
	_ = os.Remove(filepath.Join(old, ledger.LockFile))
	_ = os.Remove(old) // only when empty: anything else there is not ours to delete
	log.Info("ledger moved into state_dir, where gpufrac status, run and probe find it", "from", old, "to", dir)
	return dir
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
