package ledger

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/size"
)

// FuzzLoad gives the ledger's loaders any state and violations files: ReadSnapshot and Open
// never panic, refuse what they cannot read with an error that names the file (never an empty
// ledger in its place), and agree with each other on what they accept.
func FuzzLoad(f *testing.F) {
	dir := f.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		f.Fatal(err)
	}
	if err := l.SyncGPUs([]GPUInfo{info(gpuA, 0, 12*size.GiB)}); err != nil {
		f.Fatal(err)
	}
	if _, err := l.ReserveBytes(gpuA, 2*size.GiB, Task{JobName: "j"}); err != nil {
		f.Fatal(err)
	}
	if err := l.RecordViolation(Violation{Token: "tok", GPU: gpuA, Action: "sigkill", CapBytes: size.GiB}); err != nil {
		f.Fatal(err)
	}
	l.Close()
	st, _ := os.ReadFile(filepath.Join(dir, StateFile))
	vi, _ := os.ReadFile(filepath.Join(dir, ViolationsFile))
	f.Add(st, vi)
	f.Add(st[:len(st)/2], vi)
	f.Add([]byte(`{"schema_version":1}`), []byte(`{"schema_version":1,"violations":[{"token":`))
	f.Add([]byte(`{"schema_version":9}`), []byte(`null`))
	f.Fuzz(func(t *testing.T, state, viol []byte) {
		dir := t.TempDir()
		spath := filepath.Join(dir, StateFile)
		if err := os.WriteFile(spath, state, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ViolationsFile), viol, 0o600); err != nil {
			t.Fatal(err)
		}
		snap, rerr := ReadSnapshot(dir)
		if rerr != nil && (!strings.Contains(rerr.Error(), dir) || !(errors.Is(rerr, ErrCorrupt) || errors.Is(rerr, ErrSchema))) {
			t.Fatalf("ReadSnapshot: %v: want ErrCorrupt or ErrSchema naming the file", rerr)
		}
		l, oerr := Open(dir, Options{})
		if (rerr == nil) != (oerr == nil) {
			t.Fatalf("ReadSnapshot says %v but Open says %v", rerr, oerr)
		}
		if oerr != nil {
			if after, _ := os.ReadFile(spath); string(after) != string(state) {
				t.Fatal("a refused state file was modified")
			}
			return
		}
		defer l.Close()
		if got := len(l.Reservations()); got != len(snap.Reservations) {
			t.Fatalf("Open holds %d reservations, ReadSnapshot %d", got, len(snap.Reservations))
		}
	})
}
