package ledger

import (
	"fmt"

	"github.com/gpufrac/gpufrac/size"
)

// Staging lets `gpufrac run` start a job before the memory its cap stands for is free: the job
// holds a small reservation (what its CUDA context and first blocks take) while it imports and
// loads on the CPU, and its allocations past it wait in the fence until Grant raises its cap
// under the same admission rule as any reservation. A job's start-up (8-14 s of Python on the
// H200, docs/bench/results.md) then overlaps the work of the jobs whose memory it waits for.

// WithStage marks a reservation as staged for a cap of promised (Reservation.StagedFor); a
// promise at or below the reservation's cap stages nothing.
func WithStage(promised size.Bytes) ReserveOption {
	return func(r *Reservation) {
		if promised > r.CapBytes {
			r.StagedFor = promised
		}
	}
}

// Grant raises a staged runner reservation's cap to what it was promised (rounded up to whole
// units), keeping its token and its units, when the rest fits under the admission rule: healthy,
// within the budget, and (unless guarantees are lent) beside what borrowers hold with none of
// their allocations waiting. A refusal is a *DeniedError and leaves it staged.
//
// Healthy here means the GPU's own verdict (the backend's, a GPU still listed): a mark set with
// SetHealth does not refuse a grant. Those marks (a drain after a stop under MPS, a dead MPS
// daemon, processes the enforcer cannot read) keep new tasks off the GPU, and a grant adds no
// task: the staged task's process is already one of the GPU's clients, exposed to whatever the
// mark is about. A drain lasts until those clients have exited, and a staged client cannot exit
// while its allocation waits for this grant, so refusing it held the drain open on the staged
// job itself: on an H100 under MPS with borrowing two staged jobs waited 47-49 s that way,
// until they were unstaged and started again (leakers.sh, 2026-12-06).
func (l *Ledger) Grant(token string) (Reservation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, r, err := l.beginOn(token)
	if err != nil {
		return Reservation{}, err
	}
	if r.StagedFor <= r.CapBytes {
		return Reservation{}, fmt.Errorf("%w: reservation %s is not staged", ErrBadInput, RedactToken(token))
	}
	l.advanceHold(r.GPU, l.now())
	gs := l.st.capacity(r.GPU)
	if g := l.st.gpus[r.GPU]; g.Unhealthy {
		g.Unhealthy = false
		gs.Healthy, gs.HealthReason = health(g)
	}
	units, ok := unitsFor(r.StagedFor, gs.UnitBytes)
	if !ok || gs.UnitBytes == 0 {
		return Reservation{}, denied(ReasonNoFit, "a cap of %s does not fit GPU %s: its budget is %s", r.StagedFor, r.GPU, gs.BudgetBytes)
	}
	more := units - len(r.InstanceIDs)
	extra := size.Bytes(more) * gs.UnitBytes
	if err := checkRoom(gs, extra, more, false, false); err != nil {
		return Reservation{}, err
	}
	// The free units, not the placeable ones: a GPU at max_tasks shows its free units
	// unplaceable, but a grant adds no task.
	next := cloneRes(r)
	next.InstanceIDs = l.st.freeIDs(r.GPU, gs.Units, units, next.InstanceIDs)
	if len(next.InstanceIDs) < units {
		return Reservation{}, denied(ReasonNoFit, "a cap of %s (%d units) does not fit GPU %s: only %d free units",
			size.Bytes(units)*gs.UnitBytes, units, r.GPU, len(next.InstanceIDs)-len(r.InstanceIDs))
	}
	next.CapBytes, next.StagedFor = size.Bytes(units)*gs.UnitBytes, 0
	l.st.res[token] = next
	for _, id := range next.InstanceIDs {
		l.st.byID[id] = token
	}
	if err := l.commit(prev, true); err != nil {
		return Reservation{}, err
	}
	l.log.Info("staged reservation granted", "token", RedactToken(token), "gpu", r.GPU, "from", r.CapBytes.String(),
		"to", next.CapBytes.String(), "task", r.Task.String())
	return cloneRes(next), nil
}

// Ungrant puts back staged, the reservation as it was before a Grant whose cap the fence could
// not take (a borrower took the memory since the ledger last heard): the units Grant added
// go back to the pool and the job stays staged.
func (l *Ledger) Ungrant(staged Reservation) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, r, err := l.beginOn(staged.Token)
	if err != nil {
		return err
	}
	if staged.StagedFor == 0 || len(staged.InstanceIDs) > len(r.InstanceIDs) {
		return fmt.Errorf("%w: reservation %s was not staged with fewer units than it holds", ErrBadInput, RedactToken(staged.Token))
	}
	l.st.dropIDs(staged.Token, r.InstanceIDs[len(staged.InstanceIDs):])
	next := cloneRes(r)
	next.InstanceIDs = next.InstanceIDs[:len(staged.InstanceIDs)]
	next.CapBytes, next.StagedFor = staged.CapBytes, staged.StagedFor
	l.st.res[staged.Token] = next
	return l.commit(prev, true)
}

// freeIDs appends to have the lowest instance IDs of GPU uuid below units that no reservation
// holds, until it holds want.
func (s *state) freeIDs(uuid string, units, want int, have []string) []string {
	for k := 0; k < units && len(have) < want; k++ {
		if id := InstanceID(uuid, k); s.byID[id] == "" {
			have = append(have, id)
		}
	}
	return have
}

// beginOn begins a change to the reservation token holds (begin), under l.mu.
func (l *Ledger) beginOn(token string) (*state, Reservation, error) {
	prev, err := l.begin()
	if err != nil {
		return nil, Reservation{}, err
	}
	r, ok := l.st.res[token]
	if !ok {
		return nil, Reservation{}, fmt.Errorf("%w: token %s", ErrNoReservation, RedactToken(token))
	}
	return prev, r, nil
}

// dropIDs frees the instance IDs of ids that token holds.
func (s *state) dropIDs(token string, ids []string) {
	for _, id := range ids {
		if s.byID[id] == token {
			delete(s.byID, id)
		}
	}
}

// Withdraw takes back a staged reservation's promise and lets it borrow nothing: it keeps its
// small cap, and the fence refuses at once, inside the process, the allocation that waits for
// the promise. gpufrac run withdraws a staged job under MPS before it stops it for a borrower,
// so that the job ends through its own out-of-memory error, with no kernel in flight, and not
// by a forced stop, which can fault the other clients of the GPU (docs/enforcement.md). Withdrawn
// again, it is unchanged.
func (l *Ledger) Withdraw(token string) (Reservation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, r, err := l.beginOn(token)
	if err != nil {
		return Reservation{}, err
	}
	if r.Withdrawn {
		return cloneRes(r), nil // a fence sync that failed after it is tried again
	}
	if r.StagedFor <= r.CapBytes {
		return Reservation{}, fmt.Errorf("%w: reservation %s is not staged", ErrBadInput, RedactToken(token))
	}
	next := cloneRes(r)
	next.StagedFor, next.LimitBytes, next.Withdrawn = 0, 0, true
	l.st.res[token] = next
	if err := l.commit(prev, true); err != nil {
		return Reservation{}, err
	}
	l.log.Info("staged reservation withdrawn", "token", RedactToken(token), "gpu", r.GPU, "cap", r.CapBytes.String(),
		"promised", r.StagedFor.String(), "task", r.Task.String())
	return cloneRes(next), nil
}
