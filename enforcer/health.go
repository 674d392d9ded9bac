package enforcer

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gpufrac/gpufrac/policy"
)

// The enforcer's health marks in the ledger: a GPU it drains (an MPS daemon gone, a stop under
// MPS, processes it cannot read) admits nothing until the enforcer clears the mark it set.

// checkMPS asks every daemon this enforcer runs whether it answers. A dead daemon is restarted
// when no client runs; with clients, it is a GPU-wide event and the GPU goes unhealthy until they
// are gone. A changed budget becomes the new ceiling.
func (e *Enforcer) checkMPS(ctx context.Context) {
	e.healthMu.Lock()
	defer e.healthMu.Unlock()
	for _, st := range e.cfg.Ledger.States() {
		if st.Mode != policy.ModeMPS {
			continue
		}
		pid, adopted, err := e.mps.Adopt(ctx, st.UUID, st.BudgetBytes)
		if err != nil {
			e.log.Warn("MPS pinned limit not set on an adopted daemon", "gpu", st.UUID, "error", err)
		}
		if adopted {
			e.emit(Event{Kind: EventMPS, Stage: StageAdopted, GPU: st.UUID, PIDs: nonZero(pid),
				Message: "MPS control daemon left by an earlier enforcer adopted"})
		}
	}
	for _, uuid := range e.mps.Running() {
		_ = e.checkDaemon(ctx, uuid)
	}
}

// ErrMPSDied says a GPU's daemon is gone while clients run: the enforcer has marked the GPU
// unhealthy in the ledger and restarts the daemon once they have exited.
var ErrMPSDied = errors.New("MPS control daemon died while clients ran: the GPU is drained until they exit")

// checkDaemon decides for one GPU whose daemon this enforcer runs: an answering daemon gets the
// budget as its ceiling; a dead one is restarted when no client runs, and with clients the GPU
// goes unhealthy (ErrMPSDied). The health pass and PrepareGPU both decide here, so a task's
// preparation never restarts a daemon under running clients. Caller holds healthMu.
func (e *Enforcer) checkDaemon(ctx context.Context, uuid string) error {
	st, err := e.cfg.Ledger.State(uuid)
	if err != nil {
		return err
	}
	err = e.mps.Check(ctx, uuid)
	if err == nil {
		e.healIf(uuid, reasonMPSDied)
		if err := e.mps.UpdateLimit(ctx, uuid, st.BudgetBytes); err != nil {
			e.log.Warn("MPS pinned limit not updated", "gpu", uuid, "error", err)
		}
		return nil
	}
	procs, perr := e.cfg.Backend.Processes(ctx, uuid)
	if n := e.clients(procs); perr != nil || n > 0 {
		if e.sickReason(uuid) != reasonMPSDied {
			// The ledger first: whoever the event wakes finds the GPU already drained.
			e.setUnhealthy(uuid, reasonMPSDied)
			e.emit(Event{Kind: EventMPS, Stage: StageDied, GPU: uuid,
				Message: fmt.Sprintf("MPS control daemon is gone while %d client process(es) run: %v", n, err)})
		}
		return fmt.Errorf("GPU %s: %w", uuid, ErrMPSDied)
	}
	if _, _, rerr := e.mps.Ensure(ctx, uuid, st.BudgetBytes); rerr != nil {
		e.setUnhealthy(uuid, reasonMPSDown)
		e.emit(Event{Kind: EventMPS, Stage: StageRestartFailed, GPU: uuid, Message: "MPS control daemon could not be restarted: " + rerr.Error()})
		return fmt.Errorf("MPS control daemon of GPU %s could not be restarted: %w", uuid, rerr)
	}
	e.emit(Event{Kind: EventMPS, Stage: StageRestarted, GPU: uuid, Message: "MPS control daemon restarted (no client was running): " + err.Error()})
	e.healIf(uuid, reasonMPSDied, reasonMPSDown)
	return nil
}

// Health reasons this enforcer sets (and clears) in the ledger.
const (
	reasonMPSDied = "MPS control daemon died while clients ran; GPU drained until they exit"
	reasonMPSDown = "MPS control daemon cannot be started"
	reasonForced  = "forced stop under MPS may have faulted other clients"
	reasonStopped = "a task was stopped under MPS: other clients may fault; GPU drained until they exit"
	// reasonUnreadable: NVML cannot list the GPU's processes (an NVML error, a GPU fallen off
	// the bus), so the watchdog cannot enforce caps there.
	reasonUnreadable = "GPU processes cannot be read: caps cannot be enforced, nothing is admitted until they can"
)

func (e *Enforcer) setUnhealthy(uuid, reason string) {
	e.sickMu.Lock()
	defer e.sickMu.Unlock()
	e.markLocked(uuid, reason)
}

// markUnlessSick marks the GPU unhealthy for reason unless this enforcer already marked it for
// another: the check and the mark are one step, so a mark the MPS check sets in between (its
// daemon died) is not replaced by this one, whose heal would then clear it.
func (e *Enforcer) markUnlessSick(uuid, reason string) {
	e.sickMu.Lock()
	defer e.sickMu.Unlock()
	if e.sick[uuid] == "" {
		e.markLocked(uuid, reason)
	}
}

// markLocked is setUnhealthy with e.sickMu held.
func (e *Enforcer) markLocked(uuid, reason string) {
	if err := e.cfg.Ledger.SetHealth(uuid, false, reason); err != nil {
		e.log.Error("cannot mark GPU unhealthy", "gpu", uuid, "error", err)
		return
	}
	e.sick[uuid] = reason
	e.emit(Event{Kind: EventGPUHealth, Stage: StageUnhealthy, GPU: uuid, Message: reason})
}

// healIf marks the GPU healthy again when this enforcer marked it unhealthy for one of reasons;
// the check and the change are one step, so the sampling and the MPS check never undo each other.
func (e *Enforcer) healIf(uuid string, reasons ...string) {
	e.sickMu.Lock()
	defer e.sickMu.Unlock()
	if !slices.Contains(reasons, e.sick[uuid]) || e.sick[uuid] == "" {
		return
	}
	if err := e.cfg.Ledger.SetHealth(uuid, true, ""); err != nil {
		e.log.Error("cannot mark GPU healthy", "gpu", uuid, "error", err)
		return
	}
	delete(e.sick, uuid)
	e.emit(Event{Kind: EventGPUHealth, Stage: StageHealthy, GPU: uuid, Message: "GPU healthy again"})
}

func (e *Enforcer) sickReason(uuid string) string {
	e.sickMu.Lock()
	defer e.sickMu.Unlock()
	return e.sick[uuid]
}

// adoptSick takes over a health mark an earlier enforcer set, so this one clears it when due.
func (e *Enforcer) adoptSick(uuid, reason string) {
	e.sickMu.Lock()
	defer e.sickMu.Unlock()
	if e.sick[uuid] == "" {
		e.sick[uuid] = reason
	}
}

// isMine says whether a health mark is one an enforcer sets, so a restarted one takes it over.
func isMine(reason string) bool {
	return reason == reasonMPSDied || reason == reasonMPSDown || reason == reasonForced || reason == reasonStopped ||
		reason == reasonUnreadable
}
