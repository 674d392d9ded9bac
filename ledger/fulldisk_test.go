package ledger

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// fillDisk makes the next write of name's temp file meet a full disk: the temp path becomes a
// link to /dev/full, where every write fails with ENOSPC as on a full file system.
func fillDisk(t *testing.T, dir, name string) func() {
	t.Helper()
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full to stand in for a full disk")
	}
	tmp := filepath.Join(dir, name+tempSuffix)
	if err := os.Symlink("/dev/full", tmp); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.Remove(tmp); err != nil {
			t.Fatal(err)
		}
	}
}

// A full disk during a Reserve, a probe's footprint and a violation: each fails with an error
// that says so and names the file, the files on disk are the previous commit, and nothing is
// admitted or remembered that was not recorded. Once there is room again, all of it works.
func TestFullDiskKeepsTheLedger(t *testing.T) {
	l, dir := newTest(t, Options{})
	kept, err := l.ReserveBytes(gpuA, 2*size.GiB, Task{JobName: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	stateBefore, violBefore := read(StateFile), read(ViolationsFile)
	wantFull := func(what string, err error, file string) {
		t.Helper()
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), filepath.Join(dir, file)) {
			t.Errorf("%s on a full disk: %v; want ENOSPC naming %s", what, err, file)
		}
	}

	free := fillDisk(t, dir, StateFile)
	_, err = l.ReserveBytes(gpuA, 4*size.GiB, Task{JobName: "new"})
	wantFull("ReserveBytes", err, StateFile+tempSuffix)
	err = l.RecordProfile(Profile{Template: "t", PeakBytes: size.GiB, Source: ProfileProbe, MeasuredAt: time.Now()})
	wantFull("RecordProfile", err, StateFile+tempSuffix)
	free()
	freeV := fillDisk(t, dir, ViolationsFile)
	err = l.RecordViolation(Violation{Token: kept.Token, GPU: gpuA, Action: "sigkill", CapBytes: 2 * size.GiB})
	wantFull("RecordViolation", err, ViolationsFile+tempSuffix)
	freeV()

	if read(StateFile) != stateBefore || read(ViolationsFile) != violBefore {
		t.Fatal("a failed commit changed the files on disk")
	}
	if rs := l.Reservations(); len(rs) != 1 || rs[0].Token != kept.Token {
		t.Fatalf("reservations %+v: want only the one recorded before the disk filled", rs)
	}
	if len(l.Profiles()) != 0 || len(l.Violations()) != 0 {
		t.Fatalf("profiles %v, violations %v: remembered without being recorded", l.Profiles(), l.Violations())
	}
	if st := mustState(t, l, gpuA); st.ReservedBytes != 2*size.GiB {
		t.Fatalf("GPU A reserves %s, want the 2GiB recorded", st.ReservedBytes)
	}

	if _, err := l.ReserveBytes(gpuA, 4*size.GiB, Task{JobName: "new"}); err != nil {
		t.Fatalf("ReserveBytes with room again: %v", err)
	}
	if err := l.RecordViolation(Violation{Token: kept.Token, GPU: gpuA, Action: "sigkill", CapBytes: 2 * size.GiB}); err != nil {
		t.Fatalf("RecordViolation with room again: %v", err)
	}
	snap, err := ReadSnapshot(dir)
	if err != nil || len(snap.Reservations) != 2 || len(snap.Violations) != 1 {
		t.Fatalf("after the disk freed: %v, %d reservations, %d violations; want 2 and 1", err, len(snap.Reservations), len(snap.Violations))
	}
}
