package enforcer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"

	"github.com/gpufrac/gpufrac/attribution"
	"github.com/gpufrac/gpufrac/enforcer/mps"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/procfs"
)

// watch samples one GPU, lets decide judge the sample and carries out what it decided.
func (e *Enforcer) watch(ctx context.Context, st ledger.GPUState) {
	uuid := st.UUID
	if isMine(st.HealthReason) {
		e.adoptSick(uuid, st.HealthReason) // marked by an earlier enforcer: clear it when due
	}
	o := observation{gpu: uuid, mode: st.Mode, reservations: st.Reservations, unmanagedBytes: st.UnmanagedBytes}
	if e.fence != nil {
		o.pre, _ = e.fence.view(uuid)
	}
	procs, err := e.cfg.Backend.Processes(ctx, uuid)
	if err != nil {
		if msg := err.Error(); e.lastErr[uuid] != msg {
			e.lastErr[uuid] = msg
			e.log.Warn("cannot list GPU processes", "gpu", uuid, "error", err)
		}
		// Unseen, tasks here are held to nothing: admit no more until the GPU can be read.
		if ctx.Err() == nil {
			e.markUnlessSick(uuid, reasonUnreadable)
		}
		return
	}
	delete(e.lastErr, uuid)
	e.healIf(uuid, reasonUnreadable)
	o.reservations = e.reservationsAt(st)
	e.procs.NewPass()
	o.now = e.now()
	for _, p := range e.procs.Split(uuid, procs, attribution.Reserved(o.reservations)).Procs {
		o.procs = append(o.procs, e.see(p, uuid))
	}
	byTok := byToken(o.procs)
	e.followers.see(e.publish(o, byTok))
	named := !slices.ContainsFunc(o.procs, func(sp seenProc) bool { return sp.MPSServer || sp.Token == "" })
	o.snap, o.fenced = e.watchFence(st, byTok, named)
	r := rules{allowance: e.cfg.Allowance, stopGrace: e.cfg.StopGrace,
		stopUnmanaged: e.cfg.Ledger.Policy().Unmanaged == policy.UnmanagedStop}
	for _, a := range decide(r, e.mem, o) {
		e.apply(a)
	}
}

// reservationsAt is st's reservations with what the ledger holds now, for a pass whose sample
// of the GPU came after st was read. A staged task granted in between (ledger.Grant, then the
// fence's table) allocates what it was granted before the sample, and judged by st's cap it was
// stopped for memory it had been given: under MPS a GPU-wide event, which struck leakers.sh's
// runaway on an H100 at the instant of its grant (2026-12-07). A task reserved in between may be
// on the GPU already, and outside st its processes were nobody's, which policy unmanaged = stop
// kills. So a cap raised since is taken, and a reservation made since is added; one released
// since stays as st had it (its processes may still be leaving the GPU), and a cap lowered since
// (a grant taken back, which the fence never let through) is judged as st found it.
func (e *Enforcer) reservationsAt(st ledger.GPUState) []ledger.Reservation {
	now, err := e.cfg.Ledger.State(st.UUID)
	if err != nil {
		return st.Reservations
	}
	out := slices.Clone(st.Reservations) // st's slice is the caller's
	at := make(map[string]int, len(out))
	for i, r := range out {
		at[r.Token] = i
	}
	for _, n := range now.Reservations {
		i, ok := at[n.Token]
		switch {
		case !ok:
			out = append(out, n)
		case n.CapBytes > out[i].CapBytes:
			out[i] = n
		}
	}
	return out
}

// see is one process of Split's sample with what its environment says beyond its task: Split
// read it in this pass, so Identity answers from that read.
func (e *Enforcer) see(p attribution.Proc, uuid string) seenProc {
	sp := seenProc{ProcUsage: ProcUsage{PID: p.PID, Bytes: p.Bytes, Token: p.Token, Via: p.Via, MPSServer: p.MPSServer}, note: p.Note}
	if p.MPSServer {
		return sp
	}
	if id, err := e.procs.Identity(p.PID); err == nil {
		sp.known, sp.start, sp.task, sp.mpsClient = true, id.Start, id.Task, id.PipeDir != ""
		sp.pinned, sp.pinnedOK = mps.PinnedLimit(id.MPSLimit, uuid)
	}
	return sp
}

// apply carries out one of decide's actions.
func (e *Enforcer) apply(a action) {
	switch a := a.(type) {
	case emitEvent:
		e.emit(a.ev)
	case stopTask:
		for _, k := range a.procs {
			pid := k.pid
			err := e.cfg.Signal(pid, k.start, a.sig)
			if err == nil || errors.Is(err, syscall.ESRCH) {
				continue
			}
			if tr := e.mem.tracks[a.token]; tr != nil {
				tr.action, tr.detail = ActionReported, fmt.Sprintf("cannot signal pid %d (%s): %v", pid, a.sig, err)
			}
			e.log.Error("cannot stop a violator", "gpu", a.gpu, "pid", pid, "signal", a.sig.String(), "error", err)
		}
	case stopProc:
		err := e.cfg.Signal(a.key.pid, a.key.start, a.sig)
		if u := e.mem.unmanaged[a.key]; u != nil && a.sig == syscall.SIGKILL && (err == nil || errors.Is(err, syscall.ESRCH)) {
			u.killed = true
		}
	case recordViolation:
		e.record(a.v)
	case markUnhealthy:
		e.setUnhealthy(a.gpu, a.reason)
	case heal:
		e.healIf(a.gpu, a.reasons...)
	case setUnmanaged:
		if err := e.cfg.Ledger.SetUnmanaged(a.gpu, a.bytes); err != nil {
			e.log.Error("cannot record unmanaged use", "gpu", a.gpu, "error", err)
		}
	case evictBorrower:
		if e.fence != nil {
			e.fence.seal(a.gpu, a.owner) // an honest owner waits for its guarantee armed
		}
		e.log.Info("stopping a borrower: an owner waits for its guarantee", "gpu", a.gpu,
			"borrower", ledger.RedactToken(a.token), "owner", ledger.RedactToken(a.owner), "borrowed", a.borrowed.String(),
			"owed_for", a.owedFor.String())
	default:
		panic(fmt.Sprintf("enforcer: no effect for action %T", a))
	}
}

// publish stores the sample and the per-task sums for TaskUsage and LastSample (tasks: the
// sample's processes by token), and returns the sample for the followers.
func (e *Enforcer) publish(o observation, tasks map[string][]seenProc) Sample {
	s := Sample{GPU: o.gpu, Time: o.now, Mode: o.mode}
	for _, sp := range o.procs {
		s.Processes = append(s.Processes, sp.ProcUsage)
		if !sp.MPSServer && sp.Token == "" {
			s.UnmanagedBytes += sp.Bytes
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.samples[o.gpu] = s
	for tok, u := range e.usage {
		if u.gpu == o.gpu {
			delete(e.usage, tok)
		}
	}
	for tok, ps := range tasks {
		e.usage[tok] = taskUsage{gpu: o.gpu, bytes: sum(ps)}
	}
	return s
}

func (e *Enforcer) record(v ledger.Violation) {
	if err := e.cfg.Ledger.RecordViolation(v); err != nil {
		e.log.Error("cannot record violation", "gpu", v.GPU, "error", err)
	}
	e.emit(Event{Time: v.ContainedAt, Kind: EventViolation, Stage: StageContained, GPU: v.GPU, Token: v.Token, Task: v.Task,
		Bytes: v.PeakBytes, Violation: &v,
		Message: fmt.Sprintf("violation contained (%s) %s after crossing; peak %s, cap %s", v.Action, v.ContainedAt.Sub(v.CrossedAt), v.PeakBytes, v.CapBytes)})
}

// scanTokens tells the ledger which reservations a live process carries, so the reservations of
// tasks that are alive but not (yet) on a GPU do not expire, then expires the others.
func (e *Enforcer) scanTokens() {
	scan, err := e.procs.Scan()
	if err != nil {
		e.log.Warn("cannot list processes for the token scan", "error", err)
		return
	}
	for k := range e.mem.unmanaged {
		if !scan.Live[k.pid] {
			delete(e.mem.unmanaged, k)
		}
	}
	for tok, ids := range scan.Carriers {
		var t ledger.Task
		for _, id := range ids {
			fillTask(&t, id.Task)
		}
		if err := e.cfg.Ledger.Seen(tok, t); err != nil && !errors.Is(err, ledger.ErrNoReservation) {
			e.log.Warn("cannot mark reservation seen", "token", ledger.RedactToken(tok), "error", err)
		}
	}
	// A gpufrac run killed outright is gone for good: its reservations need not wait the grace.
	orphans, err := e.cfg.Ledger.ReleaseOrphans(func(h ledger.Holder) bool {
		return procfs.Same(e.cfg.Procs, h.PID, h.StartTicks)
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

// fillTask completes t with the names of src that t lacks: several processes of one task each
// carry some.
func fillTask(t *ledger.Task, src ledger.Task) {
	for _, f := range []struct {
		dst *string
		src string
	}{
		{&t.AllocID, src.AllocID}, {&t.JobName, src.JobName}, {&t.TaskName, src.TaskName}, {&t.Template, src.Template},
		{&t.Namespace, src.Namespace},
	} {
		if *f.dst == "" {
			*f.dst = f.src
		}
	}
}
