package sched

import (
	"context"
	"errors"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/size"
)

// lend brings what borrowers hold into the round's view: the node records it in the ledger,
// whose admission counts it; the view counts it as reserved too, so candidates are ranked and
// checked by what is really free; and the GPUs where an allocation waits, or that the ledger
// holds for a borrower until it is served (runner.Options.BorrowHold, the rule the plugin's ledger
// applies too), are frozen: a new job would take what it waits for. Between two waits of a
// growing borrower only the hold keeps the memory that came free for it. The ledger refuses
// those admissions anyway; freezing keeps probes and drains off those GPUs too.
func (s *Sched) lend(states map[string]ledger.GPUState) {
	clear(s.frozen)
	clear(s.refused)
	if !s.borrows {
		return
	}
	s.node.RefreshBorrowing("")
	for _, g := range s.gpus {
		st, err := s.led.State(g)
		if err != nil {
			continue
		}
		if st.Lending {
			continue // guarantees go on what borrowers hold, which they lend back
		}
		st.ReservedBytes += st.BorrowedBytes
		states[g] = st
		if st.BorrowWaiting || st.BorrowHeld {
			s.frozen[g] = true
			if s.stageMax > 0 {
				s.blockedNow(g, st) // reads who waits once this round, for lately and staging
			}
		}
	}
}

// reserve admits job j on GPU g with a guarantee of c through the node, which writes it into
// the fence's table before the job starts. The table is the last word: a borrower may have
// taken the memory since lend looked, and then the node gives the reservation back and the job
// waits for its turn.
func (s *Sched) reserve(g string, c size.Bytes, j *Job, borrow bool) (ledger.Reservation, error) {
	a, err := s.node.Admit(context.Background(), node.Request{GPU: g, Cap: c, Borrow: borrow && s.borrows, EnvLater: true,
		Task: ledger.Task{JobName: j.Name, TaskName: j.Name, Template: j.Template}})
	var de *ledger.DeniedError
	switch {
	case err == nil:
		s.ledgerErr = nil
		return a.Reservation, nil
	case errors.Is(err, node.ErrFence):
		s.refused[g] = err
		s.log.Debug("the fence has no room for the job's guarantee; it waits", "gpu", g, "job", j.Name, "why", err)
	case !errors.As(err, &de):
		// Not a denial: the ledger could not record it (a full disk). Nothing was admitted; the
		// run says so while it waits, and logs each new cause once, not every round.
		if s.ledgerErr == nil || s.ledgerErr.Error() != err.Error() {
			s.log.Error("ledger could not record a reservation; nothing admitted", "job", j.Name, "gpu", g, "error", err)
		}
		s.ledgerErr = err
	}
	return ledger.Reservation{}, err
}

// probeGuarantee is what a probe that borrows is promised: what any job needs before its first
// allocation (the policy's cap of nothing: the margin that covers a CUDA context), at least one
// unit; the ledger rounds it up to whole units like every cap. It measures its footprint on
// what it borrows, so it keeps no memory from jobs whose caps are known.
func (s *Sched) probeGuarantee(st ledger.GPUState) size.Bytes {
	return max(s.pol.Cap(0), st.UnitBytes)
}

// probePrior is the guarantee a probe that borrows is offered first under Config.ProbeKnown,
// where some job on its GPU already holds memory past its guarantee: the median of the caps
// known now (every template's, this run's probes included), at most half the budget; 0 where
// nothing is known or nobody borrows. On a small guarantee a probe loads on memory it must
// borrow, and a borrower that is already growing takes what comes free before the probe asks:
// on the H200 (cold start-up, 2026-12-06) two probes beside the growing leaker waited 9.3 s and
// 6.6 s for memory to borrow, and a third tied with it and cost the leaker its attempt; their
// warm runs, on guarantees near their footprints, waited for none. Where the prior does not fit
// now the probe starts on the small guarantee, as without it.
func (s *Sched) probePrior(st ledger.GPUState) size.Bytes {
	if !s.probeKnown || st.BorrowedBytes == 0 {
		return 0
	}
	var caps []size.Bytes
	for t := range s.peaks {
		if c, ok := s.CapOf(t); ok {
			caps = append(caps, c)
		}
	}
	for t := range s.templates {
		if _, counted := s.peaks[t]; !counted {
			if c, ok := s.CapOf(t); ok {
				caps = append(caps, c)
			}
		}
	}
	return min(median(caps), st.BudgetBytes/2)
}

// FenceSync brings a GPU's fence table up to date at once when jobs may borrow: a borrower
// waiting for memory gets the guarantee a job that ended held now, not at the watchdog's next
// pass.
func (s *Sched) FenceSync(g string) {
	if s.borrows {
		_ = s.node.SyncFence(g)
	}
}
