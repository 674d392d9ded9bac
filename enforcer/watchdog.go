package enforcer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// Violation actions (ledger.Violation.Action).
const (
	ActionOOMInProcess = "oom-in-process"
	ActionSIGINT       = "sigint"
	ActionSIGKILL      = "sigkill"
	ActionReported     = "reported"
)

// nearFraction: under MPS a task seen within 5% of its cap whose processes then leave the GPU
// without a stop from the watchdog is recorded as having failed at its pinned limit.
const nearFraction = 0.95

// unmanagedRound is the step unmanaged use is rounded up to before it is written to the ledger,
// so small wobbles in NVML readings do not cost a commit each.
const unmanagedRound = 64 * size.MiB

// track is one violation in progress.
type track struct {
	token, gpu string
	task       ledger.Task
	mode       policy.Mode
	capBytes   size.Bytes
	crossedAt  time.Time
	peak       size.Bytes
	sigintAt   time.Time
	action     string
	forced     bool
	detail     string
	fence      string // what the allocation fence saw of the task
}

// nearCap remembers a task that met its cap at allocation time, to record a violation when it
// leaves the GPU: an MPS task close to its cap (its pinned limit), or one the fence refused.
type nearCap struct {
	gpu      string
	task     ledger.Task
	mode     policy.Mode
	capBytes size.Bytes
	since    time.Time
	peak     size.Bytes
	fenced   bool   // the allocation fence refused it: no guess involved
	refused  uint64 // allocations the fence refused
}

type procKey struct {
	pid   int
	start uint64
}

type unmanagedProc struct {
	sigintAt time.Time
	killed   bool
}

// watch samples one GPU and acts on what it sees.
func (e *Enforcer) watch(ctx context.Context, st ledger.GPUState) {
	uuid := st.UUID
	e.evicting = "" // reclaim names this pass's borrower to stop, if any
	if isMine(st.HealthReason) {
		e.adoptSick(uuid, st.HealthReason) // marked by an earlier enforcer: clear it when due
	}
	// The fence as it was just before NVML is read: with the table read after it, what a
	// borrower held is known on both sides of the reading (it may grow, or free and exit, in
	// between).
	var pre fence.Snapshot
	if e.fence != nil {
		pre, _ = e.fence.view(uuid)
	}
	procs, err := e.cfg.Backend.Processes(ctx, uuid)
	if err != nil {
		if msg := err.Error(); e.lastErr[uuid] != msg {
			e.lastErr[uuid] = msg
			e.log.Warn("cannot list GPU processes", "gpu", uuid, "error", err)
		}
		// Unseen, tasks here are held to nothing: admit no more until the GPU can be read.
		if ctx.Err() == nil && e.sickReason(uuid) == "" {
			e.setUnhealthy(uuid, reasonUnreadable)
		}
		return
	}
	delete(e.lastErr, uuid)
	e.healIf(uuid, reasonUnreadable)
	e.procs.newPass()
	now := e.now()
	res := make(map[string]ledger.Reservation, len(st.Reservations))
	for _, r := range st.Reservations {
		res[r.Token] = r
	}
	sample := Sample{GPU: uuid, Time: now, Mode: st.Mode}
	byToken := map[string][]ProcUsage{}
	var unmanaged []ProcUsage
	clients := 0
	for _, p := range procs {
		pu := ProcUsage{PID: p.PID, Bytes: p.UsedBytes}
		if id, err := e.procs.get(p.PID); err == nil && id.mpsServer {
			pu.MPSServer = true
			sample.Processes = append(sample.Processes, pu)
			continue
		}
		clients++
		tok, via, note := e.procs.attribute(p.PID, uuid, res)
		pu.Token, pu.Via = tok, via
		if tok == "" {
			unmanaged = append(unmanaged, pu)
			sample.UnmanagedBytes += p.UsedBytes
			e.noteUnmanaged(uuid, pu, note)
		} else {
			byToken[tok] = append(byToken[tok], pu)
		}
		sample.Processes = append(sample.Processes, pu)
	}
	e.publish(uuid, sample, byToken)
	e.followers.see(sample)
	lent := map[string]size.Bytes{}
	if snap, ok := e.watchFence(st, now); ok {
		for tok, tr := range e.tracks {
			if tr.gpu == uuid {
				u, seen := snap.Task(tok)
				tr.fence = fenceNote(u, seen)
			}
		}
		for tok, l := range e.lent {
			if _, ok := res[tok]; !ok && l.gpu == uuid {
				delete(e.lent, tok) // its reservation ended
			}
		}
		for _, r := range st.Reservations {
			if u, seen := snap.Task(r.Token); seen && r.LimitBytes > r.CapBytes {
				before, _ := pre.Task(r.Token)
				// The table is the tasks' to write: what it says a task borrowed is believed up
				// to the limit its reservation holds, never past it.
				lent[r.Token] = min(max(u.Borrowed(), before.Borrowed(), e.lent[r.Token].bytes), r.LimitBytes-r.CapBytes)
				e.lent[r.Token] = lentBytes{gpu: uuid, bytes: u.Borrowed()}
			} else {
				delete(e.lent, r.Token)
			}
		}
		if tok := e.reclaim(uuid, snap, now); tok != "" {
			lent[tok] = 0 // judged by its guarantee alone: over it, it is stopped below
		}
	}

	for tok, ps := range byToken {
		e.check(uuid, st.Mode, res[tok], ps, lent[tok], now)
	}
	e.settle(uuid, byToken, now)
	e.stopUnmanaged(uuid, st.Mode, unmanaged, now)
	e.accountUnmanaged(st, sample.UnmanagedBytes)
	if clients == 0 {
		e.healIf(uuid, reasonForced, reasonStopped) // every client of the faulted MPS server is gone
	}
}

// publish stores the sample and the per-task sums for TaskUsage.
func (e *Enforcer) publish(uuid string, s Sample, byToken map[string][]ProcUsage) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.samples[uuid] = s
	for tok, u := range e.usage {
		if u.gpu == uuid {
			delete(e.usage, tok)
		}
	}
	for tok, ps := range byToken {
		e.usage[tok] = taskUsage{gpu: uuid, bytes: sum(ps)}
	}
}

// check compares one task with its cap plus the per-process allowance plus what the fence lent it
// past its cap (a borrower's allocations, each one admitted by the fence against every other
// task's guarantee), and runs the mode's stop protocol on a violator.
func (e *Enforcer) check(uuid string, mode policy.Mode, r ledger.Reservation, ps []ProcUsage, lent size.Bytes, now time.Time) {
	used := sum(ps)
	limit := r.CapBytes + lent + e.cfg.Allowance*size.Bytes(len(ps))
	if n := e.near[r.Token]; n != nil && n.fenced {
		n.peak = max(n.peak, used) // NVML's view, context included
		if n.task == (ledger.Task{}) {
			n.task = e.taskOf(ps)
		}
	}
	tr := e.tracks[r.Token]
	if tr == nil {
		if mode == policy.ModeMPS && float64(used) >= nearFraction*float64(r.CapBytes) {
			n := e.near[r.Token]
			if n == nil {
				n = &nearCap{gpu: uuid, task: r.Task, mode: mode, capBytes: r.CapBytes, since: now}
				e.near[r.Token] = n
			}
			n.peak = max(n.peak, used)
		} else if n := e.near[r.Token]; n != nil && !n.fenced {
			delete(e.near, r.Token) // fell back from the cap while alive: it did not die at it
		}
		if used <= limit || e.driverBounds(mode, uuid, r.CapBytes, ps) {
			return
		}
		delete(e.near, r.Token)
		task := r.Task
		if task == (ledger.Task{}) {
			// Before the first token scan the ledger knows no names: read them off the processes,
			// so a task that breaks its cap in its first second is still attributed.
			task = e.taskOf(ps)
		}
		tr = &track{token: r.Token, gpu: uuid, task: task, mode: mode, capBytes: r.CapBytes, crossedAt: now}
		e.tracks[r.Token] = tr
		e.emit(Event{Kind: EventViolation, Stage: "crossed", GPU: uuid, Token: r.Token, Task: task, PIDs: pids(ps), Bytes: used,
			Message: fmt.Sprintf("task passed its cap: %s used, cap %s + borrowed %s + allowance %s x %d processes", used, r.CapBytes, lent, e.cfg.Allowance, len(ps))})
	}
	tr.peak = max(tr.peak, used)
	// The token scan may learn the task's names after the crossing (a restarted enforcer can
	// cross on its first sample, before any scan): record the violation under the latest ones.
	if r.Task != (ledger.Task{}) {
		tr.task = r.Task
	}
	// A violator is stopped whole: once over, every process of the task goes, even if its sum
	// dips back under the cap while it is being stopped.
	switch {
	case mode != policy.ModeMPS:
		e.signal(tr, ps, syscall.SIGKILL)
		tr.action = ActionSIGKILL
		tr.detail = "SIGKILL at once (isolated mode: separate CUDA contexts, a kill harms no neighbour)"
		if e.evicting == r.Token {
			tr.detail = "SIGKILL at once: it held borrowed memory that a neighbour's guarantee needed back " +
				"(isolated mode: separate CUDA contexts, a kill harms no neighbour)"
		}
	case tr.sigintAt.IsZero():
		// SIGINT is the gentlest stop there is, yet on the H200 a neighbour of a busy MPS task
		// stopped this way failed with an illegal address (docs/benchmarks.md): no stop of a
		// running MPS client is known to be safe, so every one is a GPU-wide event. The GPU
		// takes no new work until its clients are gone, and whoever runs them is told.
		e.signal(tr, ps, syscall.SIGINT)
		tr.sigintAt, tr.action = now, ActionSIGINT
		tr.detail = "SIGINT under MPS: a GPU-wide event (stopping a busy MPS client can fault the other clients)"
		e.emit(Event{Kind: EventViolation, Stage: "stopping", GPU: uuid, Token: r.Token, Task: r.Task, PIDs: pids(ps), Bytes: used,
			Message: fmt.Sprintf("SIGINT sent under MPS, other clients of this GPU may fault; forced stop after %s", e.cfg.StopGrace)})
		e.setUnhealthy(uuid, reasonStopped)
	case now.Sub(tr.sigintAt) >= e.cfg.StopGrace:
		e.signal(tr, ps, syscall.SIGKILL)
		if !tr.forced {
			tr.forced, tr.action = true, ActionSIGKILL
			tr.detail = fmt.Sprintf("SIGINT, then SIGKILL after %s grace under MPS: a GPU-wide event", e.cfg.StopGrace)
			e.emit(Event{Kind: EventViolation, Stage: "forced", GPU: uuid, Token: r.Token, Task: r.Task, PIDs: pids(ps), Bytes: used,
				Message: "task did not leave within the grace: SIGKILL under MPS, other clients of this GPU may fault"})
			e.setUnhealthy(uuid, reasonForced)
		}
	}
}

// driverBounds says whether, under MPS, the driver already holds this task to its cap: a single
// client process whose pinned limit (read from its environment) is at most the cap fails inside
// itself at the limit, and NVML's reading above the cap is its context, which the limit does not
// count. The watchdog then only watches; stopping a busy MPS client by force can fault its
// neighbours (docs/enforcement.md). Several processes, or a limit raised past the cap, it must stop.
func (e *Enforcer) driverBounds(mode policy.Mode, uuid string, capBytes size.Bytes, ps []ProcUsage) bool {
	if mode != policy.ModeMPS || len(ps) != 1 {
		return false
	}
	id, err := e.procs.get(ps[0].PID)
	if err != nil {
		return false
	}
	lim, ok := pinnedLimit(id.mpsLimit, uuid)
	return ok && lim <= capBytes
}

// signal sends sig to every process of the task; a process that cannot be signalled turns the
// action into "reported".
func (e *Enforcer) signal(tr *track, ps []ProcUsage, sig syscall.Signal) {
	for _, p := range ps {
		err := e.cfg.Signal(p.PID, sig)
		if err != nil && !errors.Is(err, syscall.ESRCH) {
			tr.action, tr.detail = ActionReported, fmt.Sprintf("cannot signal pid %d (%s): %v", p.PID, sig, err)
			e.log.Error("cannot stop a violator", "gpu", tr.gpu, "pid", p.PID, "signal", sig.String(), "error", err)
		}
	}
}

// settle closes violations whose task holds no GPU memory any more, and recognises MPS tasks that
// left at their pinned limit.
func (e *Enforcer) settle(uuid string, byToken map[string][]ProcUsage, now time.Time) {
	for tok, tr := range e.tracks {
		if tr.gpu != uuid || len(byToken[tok]) > 0 {
			continue
		}
		delete(e.tracks, tok)
		detail := tr.detail
		if tr.fence != "" {
			detail += "; " + tr.fence
		}
		e.record(ledger.Violation{Token: tok, GPU: uuid, Task: tr.task, Mode: tr.mode, CapBytes: tr.capBytes, PeakBytes: tr.peak,
			Action: tr.action, CrossedAt: tr.crossedAt, ContainedAt: now, Detail: detail})
	}
	for tok, n := range e.near {
		if n.gpu != uuid || len(byToken[tok]) > 0 {
			continue
		}
		delete(e.near, tok)
		detail := fmt.Sprintf("left the GPU at %.0f%% of its cap without a stop from the watchdog; the MPS pinned limit fails "+
			"an allocation past the cap inside the process, so this is most likely its out-of-memory exit "+
			"(the watchdog cannot see exit statuses)", 100*float64(n.peak)/float64(n.capBytes))
		if n.fenced {
			detail = fmt.Sprintf(fencedDetail+" %d allocations past the cap (the task held %s of %s); the task "+
				"failed inside its own process, no signal sent", n.refused, n.peak, n.capBytes)
		}
		e.record(ledger.Violation{Token: tok, GPU: uuid, Task: n.task, Mode: n.mode, CapBytes: n.capBytes, PeakBytes: n.peak,
			Action: ActionOOMInProcess, CrossedAt: n.since, ContainedAt: now, Detail: detail})
	}
}

func (e *Enforcer) record(v ledger.Violation) {
	if err := e.cfg.Ledger.RecordViolation(v); err != nil {
		e.log.Error("cannot record violation", "gpu", v.GPU, "error", err)
	}
	e.emit(Event{Time: v.ContainedAt, Kind: EventViolation, Stage: "contained", GPU: v.GPU, Token: v.Token, Task: v.Task,
		Bytes: v.PeakBytes, Violation: &v,
		Message: fmt.Sprintf("violation contained (%s) %s after crossing; peak %s, cap %s", v.Action, v.ContainedAt.Sub(v.CrossedAt), v.PeakBytes, v.CapBytes)})
}

// noteUnmanaged reports each unmanaged process once.
func (e *Enforcer) noteUnmanaged(uuid string, p ProcUsage, note string) {
	id, err := e.procs.get(p.PID)
	if err != nil {
		return
	}
	k := procKey{p.PID, id.start}
	if _, seen := e.unmanaged[k]; seen {
		return
	}
	e.unmanaged[k] = &unmanagedProc{}
	msg := "GPU process without a reservation"
	if note != "" {
		msg += " (" + note + ")"
	}
	e.emit(Event{Kind: EventUnmanaged, Stage: "seen", GPU: uuid, PIDs: []int{p.PID}, Bytes: p.Bytes, Message: msg})
}

// stopUnmanaged applies policy unmanaged = "stop": at once where a kill is safe, SIGINT first for
// MPS clients of this GPU's daemon.
func (e *Enforcer) stopUnmanaged(uuid string, mode policy.Mode, ps []ProcUsage, now time.Time) {
	if e.cfg.Ledger.Policy().Unmanaged != policy.UnmanagedStop {
		return
	}
	for _, p := range ps {
		id, err := e.procs.get(p.PID)
		if err != nil {
			continue
		}
		u := e.unmanaged[procKey{p.PID, id.start}]
		if u == nil || u.killed {
			continue
		}
		mpsClient := mode == policy.ModeMPS && id.pipeDir != ""
		switch {
		case !mpsClient || (!u.sigintAt.IsZero() && now.Sub(u.sigintAt) >= e.cfg.StopGrace):
			if err := e.cfg.Signal(p.PID, syscall.SIGKILL); err == nil || errors.Is(err, syscall.ESRCH) {
				u.killed = true
			}
			e.emit(Event{Kind: EventUnmanaged, Stage: "stopped", GPU: uuid, PIDs: []int{p.PID}, Bytes: p.Bytes,
				Message: "unmanaged GPU process stopped (SIGKILL) by policy unmanaged = stop"})
		case u.sigintAt.IsZero():
			_ = e.cfg.Signal(p.PID, syscall.SIGINT)
			u.sigintAt = now
		}
	}
}

// accountUnmanaged writes the GPU's unmanaged use, rounded up, into the ledger so fewer units are
// advertised, and forgets processes that have gone.
func (e *Enforcer) accountUnmanaged(st ledger.GPUState, b size.Bytes) {
	rounded := (b + unmanagedRound - 1) / unmanagedRound * unmanagedRound
	if rounded != st.UnmanagedBytes {
		if err := e.cfg.Ledger.SetUnmanaged(st.UUID, rounded); err != nil {
			e.log.Error("cannot record unmanaged use", "gpu", st.UUID, "error", err)
		}
	}
}

// scanTokens tells the ledger which reservations a live process carries, so the reservations of
// tasks that are alive but not (yet) on a GPU do not expire, then expires the others.
func (e *Enforcer) scanTokens() {
	pids, err := e.cfg.Procs.PIDs()
	if err != nil {
		e.log.Warn("cannot list processes for the token scan", "error", err)
		return
	}
	e.procs.newPass()
	live := make(map[int]bool, len(pids))
	tasks := map[string]ledger.Task{}
	for _, pid := range pids {
		live[pid] = true
		id, err := e.procs.get(pid)
		if err != nil {
			continue
		}
		for _, tok := range id.tokens() {
			t := tasks[tok]
			fill(&t.AllocID, id.task.AllocID)
			fill(&t.JobName, id.task.JobName)
			fill(&t.TaskName, id.task.TaskName)
			fill(&t.Template, id.task.Template)
			tasks[tok] = t
		}
	}
	e.procs.prune(live)
	for k := range e.unmanaged {
		if !live[k.pid] {
			delete(e.unmanaged, k)
		}
	}
	for tok, t := range tasks {
		if err := e.cfg.Ledger.Seen(tok, t); err != nil && !errors.Is(err, ledger.ErrNoReservation) {
			e.log.Warn("cannot mark reservation seen", "token", ledger.RedactToken(tok), "error", err)
		}
	}
	// A gpufrac run killed outright is gone for good: its reservations need not wait the grace.
	orphans, err := e.cfg.Ledger.ReleaseOrphans(func(h ledger.Holder) bool {
		st, err := e.cfg.Procs.Stat(h.PID)
		return err == nil && st.StartTicks == h.StartTicks
	})
	if err != nil {
		e.log.Warn("cannot release the reservations of a holder that is gone", "error", err)
	}
	for _, r := range orphans {
		e.log.Info("reservation ended: the gpufrac run that held it is gone", "gpu", r.GPU, "token", ledger.RedactToken(r.Token),
			"task", r.Task.String(), "holder", r.Holder.String())
	}
	gone, err := e.cfg.Ledger.ExpireUnseen()
	if err != nil {
		e.log.Warn("cannot expire unseen reservations", "error", err)
	}
	for _, r := range gone {
		e.log.Info("reservation ended: no live process carried its token", "gpu", r.GPU, "token", ledger.RedactToken(r.Token), "task", r.Task.String())
	}
}

// taskOf is the task identity its processes' environments carry.
func (e *Enforcer) taskOf(ps []ProcUsage) ledger.Task {
	var t ledger.Task
	for _, p := range ps {
		id, err := e.procs.get(p.PID)
		if err != nil {
			continue
		}
		fill(&t.AllocID, id.task.AllocID)
		fill(&t.JobName, id.task.JobName)
		fill(&t.TaskName, id.task.TaskName)
		fill(&t.Template, id.task.Template)
	}
	return t
}

func fill(dst *string, src string) {
	if *dst == "" {
		*dst = src
	}
}

func isMine(reason string) bool {
	return reason == reasonMPSDied || reason == reasonMPSDown || reason == reasonForced || reason == reasonStopped ||
		reason == reasonUnreadable
}

func sum(ps []ProcUsage) size.Bytes {
	var b size.Bytes
	for _, p := range ps {
		b += p.Bytes
	}
	return b
}

func pids(ps []ProcUsage) []int {
	out := make([]int, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.PID)
	}
	slices.Sort(out)
	return out
}

// reclaimGrace is how long an owner may wait for its guarantee before the watchdog stops a
// borrower that holds on to it: long enough for a borrower whose next allocation the fence
// refused to fail and exit by itself, short against the owner's bounded wait.
const reclaimGrace = time.Second

// reclaim picks the borrower to stop on a GPU where an owner has waited reclaimGrace for the
// guarantee borrowers took while it was not yet allocating: the one that borrowed most, one a
// pass, until the owner is served. A borrower's loss is its own (it outgrew its guarantee);
// the owner's wait ends without harm.
func (e *Enforcer) reclaim(uuid string, snap fence.Snapshot, now time.Time) string {
	e.evicting = ""
	if !snap.Owed() {
		delete(e.owedSince, uuid)
		return ""
	}
	since, ok := e.owedSince[uuid]
	if !ok {
		e.owedSince[uuid] = now
		return ""
	}
	if now.Sub(since) < reclaimGrace {
		return ""
	}
	var most fence.TaskUse
	for _, u := range snap.Tasks {
		if u.Borrowed() > most.Borrowed() {
			most = u
		}
	}
	if most.Borrowed() == 0 {
		return ""
	}
	e.evicting = most.Token
	e.log.Info("stopping a borrower: an owner waits for its guarantee", "gpu", uuid,
		"borrower", ledger.RedactToken(most.Token), "borrowed", most.Borrowed().String(), "owed_for", now.Sub(since).String())
	return most.Token
}
