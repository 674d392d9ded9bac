package sched

import (
	"context"
	"slices"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// Staging (Config.Stage): a job whose guarantee does not fit now starts anyway on a small
// reservation (StageBytes), does its CPU start-up (imports, reading its model: 8-14 s of the
// benchmark's jobs on the H200, docs/bench/results.md) beside the jobs whose memory it waits
// for, and its first allocation past that waits in the fence until the scheduler grants its
// guarantee under the ordinary rule (Grants). Nobody lends it anything and no running job is
// stopped for it: where a borrower's wait, or the grant of the first staged job, is blocked by
// staged jobs alone, the newest of them is stopped instead and queued again (Unstage; under
// MPS by a refusal inside it, unstageOn). With the fence only, on isolated GPUs or on MPS GPUs
// where jobs borrow (stagesOn), and not where guarantees are lent (lend places jobs on borrowed
// memory already).

// StageBytes is what a staged job holds until its grant: its CUDA context and first small
// blocks (the fence's DefaultLendKeep, the watchdog's per-process allowance), rounded up to
// whole units by the ledger.
const StageBytes = 768 * size.MiB

// unstageAfter is how long a borrower's wait must be blocked by staged jobs alone before one
// is stopped: the fence's table and the ledger settle a moment after a job ends.
const unstageAfter = time.Second

// waitingJob is a job a round could not place, and the cap it waits for; or a probe that
// borrows, whose small guarantee (probeGuarantee) is the GPU's to say.
type waitingJob struct {
	job   *Job
	cap   size.Bytes
	probe bool
}

// Granted is a staged job whose guarantee was granted: its reservation now.
type Granted struct {
	Job *Job
	Res ledger.Reservation
}

// stageJob starts a waiting job staged on the first GPU that takes it, when nothing else placed
// it. A probe that borrows is staged too: on the H200 (cold start-up seed 3, 2026-12-05) the
// last probe of a queue waited 19 s unstaged while a borrower's wait held admissions, and ended
// 12 s after the warm run's whole queue. Its window opens at its grant (the runner), so it
// measures the job's work, not its wait.
func (s *Sched) stageJob(w waitingJob, states map[string]ledger.GPUState) (Launch, bool) {
	j := w.job
	for _, g := range s.candidates(states, true) {
		st := states[g]
		if !s.canStage(g, st) || !s.smFits(g, j.Template) {
			continue
		}
		c := w.cap
		if w.probe {
			c = s.probeGuarantee(st)
		}
		small := max(StageBytes, st.UnitBytes)
		if small >= c || small+st.ReservedBytes > st.BudgetBytes {
			continue
		}
		a, err := s.node.Admit(context.Background(), node.Request{GPU: g, Cap: small, Stage: c, Borrow: s.borrows, EnvLater: true,
			Task: ledger.Task{JobName: j.Name, TaskName: j.Name, Template: j.Template}})
		if err != nil {
			s.log.Debug("not staged", "job", j.Name, "gpu", g, "why", err)
			continue
		}
		st.ReservedBytes += a.Reservation.CapBytes
		states[g] = st
		s.staged[j] = a.Reservation
		s.stagedAt[j] = s.now()
		s.stageSeq = append(s.stageSeq, j)
		l := Launch{Job: j, GPU: g, Res: a.Reservation, Capped: true, Staged: true,
			Borrowing: a.Reservation.LimitBytes > a.Reservation.CapBytes}
		if w.probe {
			l.Probe, l.InPlace, l.Window = true, true, s.probeWindow(j.Template)
		}
		return l, true
	}
	return Launch{}, false
}

// canStage says whether a job may start staged on GPU g (state st) now.
func (s *Sched) canStage(g string, st ledger.GPUState) bool {
	return s.stageMax > 0 && s.adm == nil && s.node.Fenced() && s.stagesOn(st) && !st.Lending && !s.noStage[g] &&
		s.stagedOn(g) < s.stageMax && !s.blockedNow(g, st)
}

// blockedNow says whether on GPU g (state st) something waits for memory and staged jobs alone
// stand in its way (waitBlocked), the scene Unstage ends by stopping the newest staged job: a
// job staged there would be that job, its start-up thrown away. On an H100 (start-up seed 2,
// warm, 2026-12-06) a job staged the moment a neighbour ended, beside four staged jobs and the
// leaker waiting for nearly the whole GPU, was stopped 3.7 s later. A job that waited within
// the last waitedLately counts as waiting (lately): the moment a neighbour ends is the moment
// the waiters are served what it freed, and between two of a growing job's waits its table
// entry says it waits for nothing. The fence's table is read once a GPU in a round of Next
// (blockSeen).
func (s *Sched) blockedNow(g string, st ledger.GPUState) bool {
	if b, ok := s.blockSeen[g]; ok {
		return b
	}
	waiters, _ := s.node.Waiters(g)
	b := s.waitBlocked(g, st, s.lately(waiters))
	if s.blockSeen != nil {
		s.blockSeen[g] = b
	}
	return b
}

// waitedLately is how long a job that waited in the fence counts as waiting when a job is to be
// staged (blockedNow). In the simulator's busy seed 1 cold run (2026-12-06) five first-wave
// probes waited from 14 s, resnet50 the only job computing; at its end (33.3 s) they were being
// served its memory, so lora-1.7b was staged beside them. The fence counted the staged job as
// one that could free memory until the runner stopped it 8.3 s later, and only then failed the
// largest borrower of the tie its waits had become: 8.3 s of that job's work lost for nothing.
const waitedLately = time.Second

// lately is waiters, the tokens whose allocations wait now, with those seen waiting within
// waitedLately; it remembers the ones that wait now.
func (s *Sched) lately(waiters []string) []string {
	now := s.now()
	for _, t := range waiters {
		s.waitedAt[t] = now
	}
	out := slices.Clone(waiters)
	for t, at := range s.waitedAt {
		switch {
		case now.Sub(at) >= waitedLately:
			delete(s.waitedAt, t)
		case !slices.Contains(out, t):
			out = append(out, t)
		}
	}
	return out
}

// stagesOn says whether a GPU's mode lets jobs start staged there: isolated, or MPS where the
// run borrows (each client's pinned limit is then the budget, so a staged client can take its
// guarantee once granted, and the fence holds every cap).
func (s *Sched) stagesOn(st ledger.GPUState) bool {
	return st.Mode == policy.ModeIsolated || st.Mode == policy.ModeMPS && s.borrows
}

func (s *Sched) stagedOn(g string) int {
	n := 0
	for _, r := range s.staged {
		if r.GPU == g {
			n++
		}
	}
	return n
}

// Grants grants the staged jobs whose guarantees fit now, in queue order, before any new job
// is admitted: they are ahead of it in the queue, and their start-up is done or under way.
func (s *Sched) Grants() []Granted {
	var out []Granted
	clear(s.stalled)
	borrowing := map[string]bool{} // probeHeld's reading of a GPU's fence table, once a call
	for _, j := range s.jobs {
		staged, ok := s.staged[j]
		if !ok || s.unstaging[j] || s.stalled[staged.GPU] {
			continue // in queue order: none is granted past one that waits on its GPU
		}
		if s.probeHeld(j, staged.GPU, borrowing) {
			continue // it holds up no job behind it: they have guarantees of their own
		}
		res, err := s.node.Grant(staged)
		if err != nil {
			// Its start-up is under way or done: no new job overtakes it on its GPU (a later
			// one that fits would take the memory it waits for, and the staged units beside it
			// would keep it short by a unit or two: the busy queue, simulated, 2026-12-05).
			s.stalled[staged.GPU] = true
			continue
		}
		s.forgetStage(j)
		out = append(out, Granted{Job: j, Res: res})
	}
	return out
}

// Unstage names the staged jobs to stop now: on a GPU where an allocation, or the first staged
// job's grant, waits for memory and every task that holds memory there is staged or waits
// itself (stagedBlock), nothing but the staged jobs' small reservations can come free, so the
// newest of them goes (one a second), and is queued again as it was.
func (s *Sched) Unstage(now time.Time) []*Job {
	var out []*Job
	for _, g := range s.gpus {
		staged := s.stagedOn(g)
		if staged == 0 && !s.noStage[g] {
			delete(s.blocked, g)
			continue
		}
		waiters, stageWaiters := s.node.Waiters(g) // the fence's table, read once a GPU a round
		st, err := s.led.State(g)                  // read once: for waitBlocked and for unstageOn's mode
		block := err == nil && s.waitBlocked(g, st, waiters)
		if !block {
			// What waited is served, or a task that can free memory runs beside it again: on an
			// H100 (2026-12-06) jobs stopped for the leaker were staged again only 5-9 s after
			// its end, once a grant that waited for an ordinary job's end had gone through.
			delete(s.noStage, g)
		}
		if staged == 0 || !block {
			delete(s.blocked, g)
			continue
		}
		since, ok := s.blocked[g]
		if !ok {
			s.blocked[g] = now
			continue
		}
		if now.Sub(since) < unstageAfter {
			continue
		}
		if j := s.unstageOn(g, st.Mode == policy.ModeMPS, stageWaiters); j != nil {
			s.unstaging[j] = true
			s.blocked[g] = now
			s.noStage[g] = true // nothing is staged there again while the block lasts
			s.log.Info("stopping a staged job: a borrower's wait or the first staged job's grant is blocked by staged jobs alone", "job", j.Name, "gpu", g)
			out = append(out, j)
		}
	}
	return out
}

// unstageOn picks the staged job on GPU g to stop: the newest. Under MPS a forced stop of a
// client with kernels in flight can fault every client of the GPU (docs/enforcement.md), so
// there it is the newest whose allocation waits in the fence (it runs no kernel: it is blocked
// in its allocation), and its promise is withdrawn first (node.Withdraw): the fence refuses
// that allocation inside the process, which ends through its own out-of-memory error. A staged
// job that does not wait yet is left to start up; it waits, or ends, soon.
func (s *Sched) unstageOn(g string, mps bool, stageWaiters []string) *Job {
	for i := len(s.stageSeq) - 1; i >= 0; i-- {
		j := s.stageSeq[i]
		r := s.staged[j]
		if r.GPU != g || s.unstaging[j] {
			continue
		}
		if !mps {
			return j
		}
		if !slices.Contains(stageWaiters, r.Token) {
			continue
		}
		if err := s.node.Withdraw(r); err != nil {
			if now, ok := s.led.Reservation(r.Token); ok && now.Withdrawn {
				// Withdrawn in the ledger, not yet in the fence's table: the watchdog's next
				// pass writes it, and the job's stop comes with the grace a job has under MPS.
				s.log.Warn("a staged job's withdrawal is not in the fence's table yet", "job", j.Name, "gpu", g, "error", err)
				return j
			}
			s.log.Warn("a staged job's promise could not be withdrawn: it is not stopped", "job", j.Name, "gpu", g, "error", err)
			continue
		}
		return j
	}
	return nil
}

// waitBlocked says whether on GPU g (state st) something waits for memory (an allocation the
// fence names among waiters, or the first staged job's grant, stalled in the last Grants) and
// staged jobs alone stand in its way (stagedBlock).
func (s *Sched) waitBlocked(g string, st ledger.GPUState, waiters []string) bool {
	return (len(waiters) > 0 || s.stalled[g]) && stagedBlock(st, waiters)
}

// stagedBlock says whether staged jobs alone stand in the way on GPU st where something waits for
// memory (an allocation, whose tokens the fence names as waiters, or the first staged job in
// queue order, refused its grant this round by Grants): no task there that could free memory is
// left but staged ones and the waiters. No job ends to make the room, so without a stop the
// wait lasts for ever: a promise of nearly the whole budget does not fit beside the other staged
// jobs' units (the simulator's cold run, 2026-12-05: a leaker re-run for 134 GiB of 138 beside
// four staged jobs stalled the run 150 s).
func stagedBlock(st ledger.GPUState, waiters []string) bool {
	for _, r := range st.Reservations {
		if r.StagedFor == 0 && !slices.Contains(waiters, r.Token) {
			return false
		}
	}
	return true
}

// Unstaged puts a stopped staged job back in the queue as it was: its attempt does not count
// against its bound.
func (s *Sched) Unstaged(j *Job) {
	delete(s.unstaging, j)
	j.Unstages++
}

// forgetStage forgets that j is staged: it was granted, or it ended (stopped, failed while
// staged).
func (s *Sched) forgetStage(j *Job) {
	delete(s.staged, j)
	delete(s.stagedAt, j)
	s.stageSeq = slices.DeleteFunc(s.stageSeq, func(o *Job) bool { return o == j })
}

// One unknown footprint grows at a time on a GPU. A probe that would load where another job
// already borrows past its guarantee starts staged instead (stageProbe), and its first large
// allocation waits until nobody there borrows (probeHeld), at most probeHoldWindows of its
// probe window after it was staged, so that a job that borrows for hours holds no probe for
// hours. A probe loading beside a growing borrower races it for memory the two cannot both
// have: on the start-up queue's seed 3 the probe lora-1.7b tied with the growing leaker in the
// H200's one cold run and in three of five on an H100 (2026-12-06), and the fence failed the
// leaker, which re-ran alone after the rest (docs/bench/results.md); a guarantee taken from
// other templates' caps (Config.ProbeKnown) did not stop it. Warm runs do not meet the rule:
// their one probe, the leaker, starts while nobody borrows.
const probeHoldWindows = 2

// stageProbe says whether a probe that borrows should start staged on GPU g (state st) rather
// than load now: a job there borrows, and the probe can be staged there.
func (s *Sched) stageProbe(g string, st ledger.GPUState) bool {
	return st.BorrowedBytes > 0 && s.canStage(g, st)
}

// probeHeld says whether staged job j, a probe, waits on for its grant on GPU g: a job there
// borrows, and j has not waited probeHoldWindows of its window yet. borrowing keeps what the
// GPUs' tables said for the rest of the caller's pass.
func (s *Sched) probeHeld(j *Job, g string, borrowing map[string]bool) bool {
	if s.prober[j.Template] != j {
		return false // a job of known cap: its guarantee covers it
	}
	hold := probeHoldWindows * s.probeWindow(j.Template)
	if since, ok := s.stagedAt[j]; !ok || s.now().Sub(since) >= hold {
		return false
	}
	b, read := borrowing[g]
	if !read {
		s.node.RefreshBorrowing(g) // the round's view is a round old: a borrower may have ended
		st, err := s.led.State(g)
		b = err == nil && st.BorrowedBytes > 0
		borrowing[g] = b
	}
	return b
}
