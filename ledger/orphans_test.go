package ledger

import (
	"testing"

	"github.com/gpufrac/gpufrac/size"
)

// A gpufrac run killed outright leaves its reservations behind; the next process that can tell
// it is gone releases them at once, and leaves alone those of live holders and Nomad's (which
// have no holder and expire by the grace).
func TestReleaseOrphans(t *testing.T) {
	dead, live := Holder{PID: 4242, StartTicks: 7}, Holder{PID: 4343, StartTicks: 9}
	l, dir := newTest(t, Options{Holder: &dead})
	orphan, err := l.ReserveBytes(gpuA, 4*size.GiB, Task{JobName: "j1"})
	if err != nil {
		t.Fatal(err)
	}
	if orphan.Holder == nil || *orphan.Holder != dead {
		t.Fatalf("reservation holder %v, want %v", orphan.Holder, dead)
	}
	nomad := mustReserve(t, l, Task{JobName: "nomad"}, ids(gpuA, 5)...)
	if nomad.Holder != nil {
		t.Fatalf("a Nomad reservation got holder %v", nomad.Holder)
	}
	l.Close()

	// The next run opens the ledger as itself.
	l2, err := Open(dir, Options{Holder: &live})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	kept, err := l2.ReserveBytes(gpuB, 2*size.GiB, Task{JobName: "j2"})
	if err != nil {
		t.Fatal(err)
	}
	var asked []Holder
	gone, err := l2.ReleaseOrphans(func(h Holder) bool { asked = append(asked, h); return h == live })
	if err != nil {
		t.Fatal(err)
	}
	if len(gone) != 1 || gone[0].Token != orphan.Token || len(asked) != 2 {
		t.Fatalf("released %+v (asked about %v), want only the dead holder's %s", gone, asked, orphan.Token)
	}
	for _, tok := range []string{nomad.Token, kept.Token} {
		if _, ok := l2.Reservation(tok); !ok {
			t.Errorf("reservation %s was released", tok)
		}
	}
	if st := mustState(t, l2, gpuA); st.ReservedBytes != size.GiB {
		t.Errorf("GPU A reserves %s after the release, want the Nomad task's 1GiB", st.ReservedBytes)
	}
	// Persisted: a reader of the file sees it gone too.
	snap, err := ReadSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Reservations) != 2 {
		t.Fatalf("the file holds %d reservations, want 2", len(snap.Reservations))
	}
	if again, err := l2.ReleaseOrphans(func(Holder) bool { return false }); err != nil || len(again) != 1 || again[0].Token != kept.Token {
		t.Fatalf("second release: %+v, %v", again, err)
	}
}
