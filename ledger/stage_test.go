package ledger

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// A staged reservation holds its small cap until Grant raises it to its promise, under the
// admission rule (it adds no task, so a GPU at max_tasks still grants it); Ungrant takes a
// grant back; what is stored survives a reopen.
func TestGrantRaisesAStagedReservation(t *testing.T) {
	l, dir := newTest(t, Options{}) // 10 GiB budget
	big, err := l.ReserveBytes(gpuA, 6*size.GiB, Task{JobName: "running"})
	if err != nil {
		t.Fatal(err)
	}
	staged, err := l.ReserveBytes(gpuA, size.GiB, Task{JobName: "staged"}, WithStage(5*size.GiB))
	if err != nil {
		t.Fatal(err)
	}
	if staged.CapBytes != size.GiB || staged.StagedFor != 5*size.GiB || staged.Promised() != 5*size.GiB {
		t.Fatalf("staged: %+v", staged)
	}
	if st := mustState(t, l, gpuA); st.ReservedBytes != 7*size.GiB {
		t.Fatalf("reserved %s with a staged job, want 7GiB (it holds its small cap only)", st.ReservedBytes)
	}
	_, err = l.Grant(staged.Token)
	wantDenied(t, err, ReasonNoFit, "4GiB", "does not fit")
	if r, _ := l.Reservation(staged.Token); r.CapBytes != size.GiB || r.StagedFor != 5*size.GiB {
		t.Fatalf("after a refused grant: %+v, want still staged", r)
	}
	if err := l.Release(big.Token, "done"); err != nil {
		t.Fatal(err)
	}
	withPolicy(t, l, func(p *policy.Policy) { p.MaxTasksPerGPU = 1 })
	granted, err := l.Grant(staged.Token)
	if err != nil {
		t.Fatalf("Grant with the memory free, on a GPU at its task limit: %v", err)
	}
	if granted.Token != staged.Token || granted.CapBytes != 5*size.GiB || granted.StagedFor != 0 || len(granted.InstanceIDs) != 5 {
		t.Fatalf("granted: %+v", granted)
	}
	st := mustState(t, l, gpuA)
	checkInvariants(t, st, false)
	if st.ReservedBytes != 5*size.GiB {
		t.Fatalf("reserved %s after the grant, want 5GiB", st.ReservedBytes)
	}
	if _, err := l.Grant(staged.Token); !errors.Is(err, ErrBadInput) {
		t.Fatalf("a second grant: %v, want ErrBadInput", err)
	}
	if err := l.Ungrant(staged); err != nil {
		t.Fatalf("Ungrant: %v", err)
	}
	if r, _ := l.Reservation(staged.Token); r.CapBytes != size.GiB || r.StagedFor != 5*size.GiB || len(r.InstanceIDs) != 1 {
		t.Fatalf("after Ungrant: %+v, want staged again on its one unit", r)
	}
	if r := reopened(t, l, dir, staged.Token); r.StagedFor != 5*size.GiB {
		t.Fatalf("reopened: %+v, want it staged", r)
	}
}

// Withdraw takes a staged reservation's promise back and its borrowing with it, keeps its small
// cap, leaves a withdrawn one as it is, and refuses a reservation that was never staged; what it
// stores survives a reopen.
func TestWithdrawTakesThePromiseBack(t *testing.T) {
	l, dir := newTest(t, Options{})
	staged, err := l.ReserveBytes(gpuA, size.GiB, Task{JobName: "staged"}, WithStage(5*size.GiB), WithLimit(9*size.GiB))
	if err != nil {
		t.Fatal(err)
	}
	if staged.Limit() != 9*size.GiB {
		t.Fatalf("staged: %+v, want a 9GiB limit", staged)
	}
	plain, err := l.ReserveBytes(gpuA, 2*size.GiB, Task{JobName: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := l.Withdraw(staged.Token)
	if err != nil {
		t.Fatalf("Withdraw: %v", err)
	}
	if w.CapBytes != size.GiB || w.StagedFor != 0 || w.Limit() != size.GiB || len(w.InstanceIDs) != 1 || !w.Withdrawn {
		t.Fatalf("withdrawn: %+v, want its 1GiB cap, no promise, no borrowing", w)
	}
	if again, err := l.Withdraw(staged.Token); err != nil || again.Withdrawn != true || again.CapBytes != size.GiB {
		t.Errorf("Withdraw again: %+v, %v; want it unchanged", again, err)
	}
	if _, err := l.Withdraw(plain.Token); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "not staged") {
		t.Errorf("Withdraw of a reservation not staged: %v, want ErrBadInput", err)
	}
	if _, err := l.Withdraw("no-such-token"); !errors.Is(err, ErrNoReservation) {
		t.Errorf("Withdraw of an unknown token: %v, want ErrNoReservation", err)
	}
	if r := reopened(t, l, dir, staged.Token); r.StagedFor != 0 || r.Limit() != size.GiB || !r.Withdrawn {
		t.Fatalf("reopened: %+v, want it withdrawn", r)
	}
}

// reopened checks l's invariants, closes it, opens the ledger in dir again and returns token's
// reservation there.
func reopened(t *testing.T, l *Ledger, dir, token string) Reservation {
	t.Helper()
	checkInvariants(t, mustState(t, l, gpuA), false)
	l.Close()
	back, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { back.Close() })
	r, ok := back.Reservation(token)
	if !ok {
		t.Fatalf("reopened: reservation %s lost", RedactToken(token))
	}
	return r
}

// A staged task is one of its GPU's clients already: a mark the enforcer set (a drain until the
// clients exit) refuses new tasks but not its grant, which the drain would otherwise wait on;
// the GPU's own fault (the backend's verdict) refuses both.
func TestGrantPassesTheEnforcersMarkNotTheGPUsFault(t *testing.T) {
	backendFault := func(t *testing.T, l *Ledger) {
		g := info(gpuA, 0, 12*size.GiB)
		g.Healthy, g.HealthReason = false, "XID 79: fallen off the bus"
		if err := l.SyncGPUs([]GPUInfo{g, info(gpuB, 1, 8*size.GiB)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		mark  func(*testing.T, *Ledger)
		grant bool
	}{
		{"drained after a stop under MPS", func(t *testing.T, l *Ledger) {
			if err := l.SetHealth(gpuA, false, "a task was stopped under MPS: other clients may fault; GPU drained until they exit"); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"the backend's fault", backendFault, false},
		{"both", func(t *testing.T, l *Ledger) {
			if err := l.SetHealth(gpuA, false, "MPS control daemon died"); err != nil {
				t.Fatal(err)
			}
			backendFault(t, l)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newTest(t, Options{})
			staged, err := l.ReserveBytes(gpuA, size.GiB, Task{JobName: "staged"}, WithStage(3*size.GiB))
			if err != nil {
				t.Fatal(err)
			}
			tc.mark(t, l)
			_, err = l.ReserveBytes(gpuA, size.GiB, Task{JobName: "new"})
			wantDenied(t, err, ReasonUnhealthy)
			granted, err := l.Grant(staged.Token)
			if !tc.grant {
				wantDenied(t, err, ReasonUnhealthy, "XID 79")
				return
			}
			if err != nil || granted.CapBytes != 3*size.GiB || granted.StagedFor != 0 {
				t.Fatalf("Grant on a GPU the enforcer drains: %+v, %v; want its 3GiB", granted, err)
			}
			if st := mustState(t, l, gpuA); st.Healthy || st.ReservedBytes != 3*size.GiB {
				t.Fatalf("after the grant: healthy %v, reserved %s; want still marked, 3GiB reserved", st.Healthy, st.ReservedBytes)
			}
		})
	}
}

// A grant waits, like an admission, while an allocation waits for borrowed memory: what comes
// free goes to the borrower first.
func TestGrantWaitsForAWaitingBorrower(t *testing.T) {
	l, _ := newTest(t, Options{})
	staged, err := l.ReserveBytes(gpuA, size.GiB, Task{JobName: "staged"}, WithStage(3*size.GiB))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetBorrowed(gpuA, 2*size.GiB, true); err != nil {
		t.Fatal(err)
	}
	_, err = l.Grant(staged.Token)
	wantDenied(t, err, ReasonBorrowed)
	if err := l.SetBorrowed(gpuA, 2*size.GiB, false); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Grant(staged.Token); err != nil {
		t.Fatalf("Grant once the borrower is served: %v", err)
	}
}

// A staged start takes what is free beside borrowers even while one waits (its grant does not):
// an ordinary admission is refused then, and a staged one that does not fit beside what
// borrowers hold is refused too.
func TestStagedStartBesideAWaitingBorrower(t *testing.T) {
	l, _ := newTest(t, Options{}) // 10 GiB budget
	if err := l.SetBorrowed(gpuA, 8*size.GiB, true); err != nil {
		t.Fatal(err)
	}
	_, err := l.ReserveBytes(gpuA, size.GiB, Task{JobName: "plain"})
	wantDenied(t, err, ReasonBorrowed)
	r, err := l.ReserveBytes(gpuA, size.GiB, Task{JobName: "staged"}, WithStage(4*size.GiB))
	if err != nil {
		t.Fatalf("a staged start beside a waiting borrower: %v", err)
	}
	if r.StagedFor != 4*size.GiB || len(r.InstanceIDs) != 1 {
		t.Fatalf("staged: %+v", r)
	}
	_, err = l.ReserveBytes(gpuA, 2*size.GiB, Task{JobName: "staged2"}, WithStage(4*size.GiB))
	wantDenied(t, err, ReasonBorrowed, "beside what borrowers hold")
}

// A staged start takes the free units below the GPU's units; where fewer are free than its cap
// needs, it is refused as an unstaged one is. After the unit grew under a reservation (its IDs
// counted in the old, smaller unit), the free budget held more units than the free IDs, and the
// staged path filled the gap with IDs it already had: one reservation held a unit twice, which
// the next Open refused as a corrupt file.
func TestStagedStartNeverTakesAUnitTwice(t *testing.T) {
	l, dir := newTest(t, Options{}) // GPU A: 10GiB budget
	withPolicy(t, l, func(p *policy.Policy) { p.UnitBytes = 512 * size.MiB })
	mustReserve(t, l, Task{JobName: "nomad"}, ids(gpuA, 0, 1, 2, 3, 4, 5, 6, 7)...) // 4GiB
	withPolicy(t, l, func(p *policy.Policy) {})                                     // 1GiB units: IDs 8 and 9 free
	tests := []struct {
		name string
		opts []ReserveOption
	}{
		{"unstaged", nil},
		{"staged", []ReserveOption{WithStage(5 * size.GiB)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.ReserveBytes(gpuA, 3*size.GiB, Task{JobName: tc.name}, tc.opts...)
			wantDenied(t, err, ReasonNoFit, "only 2 free units")
			checkInvariants(t, mustState(t, l, gpuA), false)
		})
	}
	l.Close()
	l2, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	l2.Close()
}
