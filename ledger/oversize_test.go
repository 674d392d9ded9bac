package ledger

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/size"
)

// claim rewrites GPU A's total_bytes in the state file in dir, as a damaged file would hold it.
func claim(t testing.TB, dir string, total size.Bytes) []byte {
	t.Helper()
	path := filepath.Join(dir, StateFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	from := `"total_bytes":"` + strconv.FormatUint(uint64(12*size.GiB), 10) + `"`
	if !strings.Contains(string(b), from) {
		t.Fatalf("state file has no %s to damage:\n%s", from, b)
	}
	damaged := []byte(strings.Replace(string(b), from, `"total_bytes":"`+strconv.FormatUint(uint64(total), 10)+`"`, 1))
	if err := os.WriteFile(path, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	return damaged
}

// A state file claiming a 1PiB GPU used to cost a million instances (and a second of CPU) on
// every States call, which the plugin makes on every fingerprint pass. Now the claim is refused
// at load: that GPU's size is forgotten (no unit, unhealthy with the reason), its reservation
// and everything else in the file are kept, Open and status say what was lost naming the file
// and the value, the damaged file stays beside the ledger, and the GPU comes back whole once the
// backend reports its size again.
func TestGPUSizeNoGPUHasIsForgottenOnLoad(t *testing.T) {
	l, dir := newTest(t, Options{})
	held, err := l.ReserveBytes(gpuA, 2*size.GiB, Task{JobName: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.RecordProfile(Profile{Template: "t", PeakBytes: size.GiB, Source: ProfileProbe}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	path := filepath.Join(dir, StateFile)
	damaged := claim(t, dir, size.PiB)
	wantDamage := func(what, got string) {
		t.Helper()
		for _, f := range []string{path, gpuA, "total_bytes 1125899906842624 (1PiB)", "at most 4TiB", "1 reservation(s) are kept"} {
			if !strings.Contains(got, f) {
				t.Errorf("%s %q does not say %q", what, got, f)
			}
		}
	}

	snap, err := ReadSnapshot(dir) // status reads without repairing
	if err != nil {
		t.Fatalf("ReadSnapshot: %v", err)
	}
	wantDamage("snapshot damage", snap.Damage)
	if len(snap.Reservations) != 1 || len(snap.Profiles) != 1 || len(snap.GPUs) != 2 {
		t.Fatalf("snapshot: %d reservations, %d profiles, %d GPUs; want 1, 1 and 2", len(snap.Reservations), len(snap.Profiles), len(snap.GPUs))
	}

	l, err = Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer l.Close()
	rep := l.Repairs()
	if len(rep) != 1 {
		t.Fatalf("repairs %q: want one, for GPU A", rep)
	}
	wantDamage("repair", rep[0])
	if !strings.Contains(rep[0], path+DamagedSuffix) {
		t.Errorf("repair %q does not say where the damaged file is kept", rep[0])
	}
	if aside, err := os.ReadFile(path + DamagedSuffix); err != nil || string(aside) != string(damaged) {
		t.Errorf("the damaged file was not kept as it was: %v", err)
	}

	st := mustState(t, l, gpuA)
	if st.Healthy || !strings.Contains(st.HealthReason, "claimed 1PiB") || st.Units != 0 || st.TotalBytes != 0 {
		t.Fatalf("GPU A: healthy %v (%q), %d units of %s; want unhealthy saying what it claimed, no unit", st.Healthy, st.HealthReason, st.Units, st.TotalBytes)
	}
	// Only the held units are advertised (unhealthy, so Nomad keeps them but places nothing).
	if len(st.Instances) != len(held.InstanceIDs) {
		t.Fatalf("GPU A advertises %d instances, want only its %d held ones", len(st.Instances), len(held.InstanceIDs))
	}
	for _, in := range st.Instances {
		if in.Healthy || in.Token != held.Token {
			t.Errorf("instance %+v: want unhealthy and held by the kept reservation", in)
		}
	}
	checkInvariants(t, st, true)
	if _, ok := l.Reservation(held.Token); !ok || len(l.Profiles()) != 1 {
		t.Fatalf("reservation kept %v, %d profiles: want both kept", ok, len(l.Profiles()))
	}
	_, err = l.ReserveBytes(gpuA, size.GiB, Task{JobName: "new"})
	wantDenied(t, err, ReasonUnhealthy, "claimed 1PiB")
	if b := mustState(t, l, gpuB); !b.Healthy || b.Units != 6 {
		t.Errorf("GPU B: healthy %v, %d units; the damage was A's only", b.Healthy, b.Units)
	}
	// The repaired file reads whole.
	if snap, err := ReadSnapshot(dir); err != nil || snap.Damage != "" || len(snap.Reservations) != 1 {
		t.Errorf("after the repair: %v, damage %q, %d reservations", err, snap.Damage, len(snap.Reservations))
	}

	// The backend reports the real size: GPU A is whole again, its reservation still held.
	if err := l.SyncGPUs([]GPUInfo{info(gpuA, 0, 12*size.GiB), info(gpuB, 1, 8*size.GiB)}); err != nil {
		t.Fatal(err)
	}
	st = mustState(t, l, gpuA)
	if !st.Healthy || st.Units != 10 || st.ReservedBytes != 2*size.GiB {
		t.Fatalf("GPU A after the backend reported it: healthy %v (%q), %d units, %s reserved; want healthy, 10 units, 2GiB", st.Healthy, st.HealthReason, st.Units, st.ReservedBytes)
	}
	if _, err := l.ReserveBytes(gpuA, size.GiB, Task{JobName: "new"}); err != nil {
		t.Fatalf("ReserveBytes once the GPU is whole: %v", err)
	}
}

// The limit holds at its edge: a GPU of exactly MaxGPUBytes loads as it is, one byte more does not.
func TestGPUSizeLimitEdge(t *testing.T) {
	for _, tc := range []struct {
		total   size.Bytes
		healthy bool
	}{{MaxGPUBytes, true}, {MaxGPUBytes + 1, false}} {
		t.Run(strconv.FormatUint(uint64(tc.total), 10), func(t *testing.T) {
			l, dir := newTest(t, Options{})
			l.Close()
			claim(t, dir, tc.total)
			l, err := Open(dir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			st := mustState(t, l, gpuA)
			if repaired := len(l.Repairs()) > 0; st.Healthy != tc.healthy || repaired == tc.healthy {
				t.Fatalf("%d bytes: healthy %v (%q), repairs %q; want healthy %v", uint64(tc.total), st.Healthy, st.HealthReason, l.Repairs(), tc.healthy)
			}
			if tc.healthy && st.Units != int((MaxGPUBytes-2*size.GiB)/size.GiB) {
				t.Errorf("%d units, want every unit of a %s GPU", st.Units, MaxGPUBytes)
			}
		})
	}
}

// The backend cannot bring the size in either: SyncGPUs refuses it naming the GPU and the value,
// and keeps the inventory it had.
func TestSyncGPUsRefusesASizeNoGPUHas(t *testing.T) {
	l, _ := newTest(t, Options{})
	err := l.SyncGPUs([]GPUInfo{info(gpuA, 0, size.PiB), info(gpuB, 1, 8*size.GiB)})
	if !errors.Is(err, ErrBadInput) {
		t.Fatalf("SyncGPUs of a 1PiB GPU = %v, want ErrBadInput", err)
	}
	for _, f := range []string{gpuA, "1PiB", "1125899906842624 bytes", "at most 4TiB"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not say %q", err, f)
		}
	}
	if st := mustState(t, l, gpuA); st.TotalBytes != 12*size.GiB || !st.Healthy {
		t.Errorf("GPU A after the refused inventory: %s, healthy %v; want the 12GiB it had", st.TotalBytes, st.Healthy)
	}
}

// BenchmarkStatesByClaimedSize is the first States after a change (every GPU's state built
// afresh, as a fingerprint pass after a commit does) on a ledger loaded from a file whose GPU A
// claims each size. Before the bound, 1PiB took about 10^4 times as long as 80GiB (a million
// instances); now it costs no more than 80GiB, and MaxGPUBytes is the most any file can cost.
func BenchmarkStatesByClaimedSize(b *testing.B) {
	for _, total := range []size.Bytes{80 * size.GiB, MaxGPUBytes, size.PiB} {
		b.Run(total.String(), func(b *testing.B) {
			l, dir := newTest(b, Options{})
			l.Close()
			claim(b, dir, total)
			l, err := Open(dir, Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			b.ReportAllocs()
			for b.Loop() {
				l.mu.Lock()
				l.cache = nil
				l.mu.Unlock()
				if st := l.States(); len(st) != 2 {
					b.Fatalf("%d GPUs, want 2", len(st))
				}
			}
		})
	}
}
