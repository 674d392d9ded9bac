package ledger

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// A damaged violations file costs only the violations that cannot be read: the reservations,
// footprints and the violations before the damage stay, the run and status say what was lost,
// and the damaged file is kept aside for a person to read.
func TestDamagedViolationsKeepTheLedger(t *testing.T) {
	setup := func(t *testing.T) (string, []byte, Reservation) {
		l, dir := newTest(t, Options{})
		res, err := l.ReserveBytes(gpuA, 2*size.GiB, Task{JobName: "kept"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			at := time.Date(2026, 11, 29, 9, i, 0, 0, time.UTC)
			if err := l.RecordViolation(Violation{Token: "tok" + string(rune('a'+i)), GPU: gpuA, Action: "sigkill", CapBytes: size.GiB,
				PeakBytes: 2 * size.GiB, CrossedAt: at, ContainedAt: at.Add(time.Second)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.RecordProfile(Profile{Template: "t", PeakBytes: size.GiB, Source: ProfileProbe, MeasuredAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		l.Close()
		b, err := os.ReadFile(filepath.Join(dir, ViolationsFile))
		if err != nil {
			t.Fatal(err)
		}
		return dir, b, res
	}
	for _, tc := range []struct {
		name     string
		mangle   func(path string, b []byte) // damages the file at path
		kept     int
		wantLost string
	}{
		{"truncated inside the third", func(p string, b []byte) {
			i := strings.LastIndex(string(b), `"token":"tokc"`)
			os.WriteFile(p, b[:i+5], 0o600)
		}, 2, "kept the 2 violation(s) that read whole"},
		{"garbage", func(p string, b []byte) { os.WriteFile(p, []byte("\x00\x00not json"), 0o600) }, 0, "kept the 0 violation(s)"},
		{"a bad value in the first", func(p string, b []byte) {
			os.WriteFile(p, []byte(strings.Replace(string(b), `"cap_bytes":"1073741824"`, `"cap_bytes":"lots"`, 1)), 0o600)
		}, 0, "lots"},
		{"missing", func(p string, b []byte) { os.Remove(p) }, 0, "cannot be read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, b, res := setup(t)
			vpath := filepath.Join(dir, ViolationsFile)
			tc.mangle(vpath, b)
			damaged, _ := os.ReadFile(vpath)

			snap, err := ReadSnapshot(dir) // status reads without repairing
			if err != nil {
				t.Fatalf("ReadSnapshot: %v", err)
			}
			if len(snap.Violations) != tc.kept || len(snap.Reservations) != 1 || len(snap.Profiles) != 1 ||
				!strings.Contains(snap.Damage, vpath) || !strings.Contains(snap.Damage, tc.wantLost) {
				t.Fatalf("snapshot: %d violations, %d reservations, %d profiles, damage %q; want %d, 1, 1 and %q",
					len(snap.Violations), len(snap.Reservations), len(snap.Profiles), snap.Damage, tc.kept, tc.wantLost)
			}

			l, err := Open(dir, Options{})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer l.Close()
			// A missing file leaves nothing aside, and the repair must not send anyone looking for it.
			aside := tc.name != "missing"
			if rep := l.Repairs(); len(rep) != 1 || !strings.Contains(rep[0], tc.wantLost) || strings.Contains(rep[0], vpath+DamagedSuffix) != aside {
				t.Fatalf("repairs %q: want what was lost and where the damaged file went (kept aside: %v)", rep, aside)
			}
			if _, err := os.Stat(vpath + DamagedSuffix); os.IsNotExist(err) == aside {
				t.Errorf("%s: kept aside %v, want %v", vpath+DamagedSuffix, err == nil, aside)
			}
			if _, ok := l.Reservation(res.Token); !ok || len(l.Violations()) != tc.kept {
				t.Fatalf("after Open: reservation kept %v, %d violations; want it kept and %d", ok, len(l.Violations()), tc.kept)
			}
			if aside, err := os.ReadFile(vpath + DamagedSuffix); tc.name != "missing" && (err != nil || string(aside) != string(damaged)) {
				t.Errorf("the damaged file was not kept aside as it was: %v", err)
			}
			// The repaired file reads whole: the next reader finds nothing damaged.
			if snap, err := ReadSnapshot(dir); err != nil || snap.Damage != "" || len(snap.Violations) != tc.kept {
				t.Errorf("after the repair: %v, damage %q, %d violations", err, snap.Damage, len(snap.Violations))
			}
		})
	}
}
