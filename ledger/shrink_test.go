package ledger

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/size"
)

// A probe's protective cap is lowered in place: the token stays, the freed units are admissible
// at once, and the lower cap survives a reopen.
func TestShrink(t *testing.T) {
	l, dir := newTest(t, Options{})
	probe, err := l.ReserveBytes(gpuA, 8*size.GiB, Task{JobName: "probe"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReserveBytes(gpuA, 3*size.GiB, Task{JobName: "late"}); err == nil {
		t.Fatal("3GiB fitted beside an 8GiB reservation on a 10GiB budget")
	}
	got, err := l.Shrink(probe.Token, size.MustParse("2.5GiB"))
	if err != nil {
		t.Fatalf("Shrink: %v", err)
	}
	if got.Token != probe.Token || got.CapBytes != 3*size.GiB || !slices.Equal(got.InstanceIDs, ids(gpuA, 0, 1, 2)) {
		t.Fatalf("after Shrink: token %s cap %s ids %v, want the same token, 3GiB, units 0-2", got.Token, got.CapBytes, got.InstanceIDs)
	}
	st := mustState(t, l, gpuA)
	if st.ReservedBytes != 3*size.GiB {
		t.Fatalf("reserved %s after Shrink, want 3GiB", st.ReservedBytes)
	}
	checkInvariants(t, st, false)
	late, err := l.ReserveBytes(gpuA, 7*size.GiB, Task{JobName: "late"})
	if err != nil {
		t.Fatalf("the freed units are not admissible: %v", err)
	}
	if !slices.Equal(late.InstanceIDs, ids(gpuA, 3, 4, 5, 6, 7, 8, 9)) {
		t.Fatalf("late got %v", late.InstanceIDs)
	}
	l.Close()
	back, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if r, ok := back.Reservation(probe.Token); !ok || r.CapBytes != 3*size.GiB {
		t.Fatalf("after reopen: %+v %v, want the 3GiB cap", r, ok)
	}
}

func TestShrinkRefuses(t *testing.T) {
	l, _ := newTest(t, Options{})
	runner, err := l.ReserveBytes(gpuA, 4*size.GiB, Task{JobName: "j"})
	if err != nil {
		t.Fatal(err)
	}
	nomad := mustReserve(t, l, Task{JobName: "n"}, ids(gpuA, 8, 9)...)
	tests := []struct {
		name  string
		token string
		cap   size.Bytes
		is    error
		frag  string
	}{
		{"unknown token", "no-such-token-at-all", size.GiB, ErrNoReservation, "no-such"},
		{"grow", runner.Token, 5 * size.GiB, ErrBadInput, "more than reservation"},
		{"zero", runner.Token, 0, ErrBadInput, "a cap of 0B"},
		{"overflow", runner.Token, size.Bytes(1<<64 - 1), ErrBadInput, "does not grow in place"},
		{"nomad reservation", nomad.Token, size.GiB, ErrBadInput, "comes from nomad"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Shrink(tc.token, tc.cap)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.frag) {
				t.Fatalf("Shrink: %v, want %v naming %q", err, tc.is, tc.frag)
			}
		})
	}
	// Nothing was lost on the way.
	if r, _ := l.Reservation(runner.Token); r.CapBytes != 4*size.GiB || len(r.InstanceIDs) != 4 {
		t.Fatalf("a refused Shrink changed the reservation: %+v", r)
	}
	// The same cap is a no-op.
	if r, err := l.Shrink(runner.Token, 4*size.GiB); err != nil || r.CapBytes != 4*size.GiB {
		t.Fatalf("Shrink to the same cap: %+v %v", r, err)
	}
}
