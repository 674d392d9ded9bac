package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DamagedSuffix names where Open keeps a damaged file (violations or state): beside it, for a
// person to read.
const DamagedSuffix = ".damaged"

// readViolations reads the violations file. A damaged one does not lose the ledger: the
// violations that still read whole are kept, and damage says what was lost. Only a file of a
// newer schema is an error, as this code cannot tell what it would drop.
func readViolations(vpath, statePath string) (viol []Violation, damage string, err error) {
	vb, rerr := os.ReadFile(vpath)
	if rerr != nil {
		return nil, fmt.Sprintf("%s, which belongs to %s, cannot be read (%v): its violations are lost", vpath, statePath, rerr), nil
	}
	herr := checkHeader(vpath, vb)
	if errors.Is(herr, ErrSchema) {
		return nil, "", herr
	}
	var vd violationsDoc
	if herr == nil {
		herr = json.Unmarshal(vb, &vd)
		if herr == nil {
			return vd.Violations, "", nil
		}
	}
	kept := salvageViolations(vb)
	return kept, fmt.Sprintf("%s is damaged (%v): kept the %d violation(s) that read whole, lost any after them", vpath, herr, len(kept)), nil
}

// salvageViolations decodes the violations array of a damaged document one entry at a time and
// keeps those before the first that does not decode (a truncated write, a torn sector).
func salvageViolations(b []byte) []Violation {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil
		}
		if key != "violations" {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return nil
			}
			continue
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('[') {
			return nil
		}
		var out []Violation
		for dec.More() {
			var v Violation
			if dec.Decode(&v) != nil {
				break
			}
			out = append(out, v)
		}
		return out
	}
	return nil
}

// repairViolations moves a damaged violations file aside and writes what was kept, so the next
// Open finds a sound file and the damaged one stays for a person to read.
func (l *Ledger) repairViolations(damage string) error {
	vpath := filepath.Join(l.dir, ViolationsFile)
	// A missing file leaves nothing to keep: saying it was kept would send a person looking
	// for a file that is not there.
	kept := "; the damaged file is kept as " + vpath + DamagedSuffix
	if err := os.Rename(vpath, vpath+DamagedSuffix); errors.Is(err, os.ErrNotExist) {
		kept = ""
	} else if err != nil {
		return fmt.Errorf("ledger: move the damaged %s aside: %w", vpath, err)
	}
	if err := l.commitViolations(nil); err != nil {
		return err
	}
	l.repairs = append(l.repairs, damage+kept)
	l.log.Warn("damaged violations file repaired", "detail", damage)
	return nil
}

// repairState keeps the damaged state file beside the ledger (a hard link, so the file stays in
// place until the repaired state has replaced it by rename) and commits the repaired state, so
// the next Open finds a sound file. A failed commit leaves the damaged file where it was, and
// the next Open repairs it again: nothing is lost on the way.
func (l *Ledger) repairState(damage []string) error {
	spath := filepath.Join(l.dir, StateFile)
	kept := spath + DamagedSuffix
	if err := os.Remove(kept); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("ledger: replace the older %s: %w", kept, err)
	}
	if err := os.Link(spath, kept); err != nil {
		return fmt.Errorf("ledger: keep the damaged %s as %s: %w", spath, kept, err)
	}
	if err := l.commit(nil, false); err != nil {
		return err
	}
	for _, d := range damage {
		l.repairs = append(l.repairs, d+"; the damaged file is kept as "+kept)
		l.log.Warn("damaged ledger state repaired", "detail", d, "kept", kept)
	}
	return nil
}

// Repairs says what Open found damaged and repaired, and what was lost; empty when nothing.
func (l *Ledger) Repairs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.repairs...)
}
