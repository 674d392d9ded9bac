package gpuacc

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// Under MPS with borrowing, a staged job that must make way for a borrower is ended by a refusal
// inside it, not by a signal, which can fault every client of the GPU (gpu-facts.md): gpufrac
// run withdraws its promise (ledger.Withdraw, then the fence's table), and PyTorch, blocked in
// its first large allocation in the fence's staged wait, gets CUDA's out-of-memory error and
// exits by itself. Two busy MPS neighbours finish with their solo results.
func TestMPSWithdrawnStagedJobEndsInsideItself(t *testing.T) {
	h := newHarnessFenceWith(t, policy.ModeMPS, 10*time.Millisecond, true, func(fc *enforcer.FenceConfig) {
		fc.Borrow(enforcer.BorrowWait, 5*time.Second)
	})
	if err := h.enf.PrepareGPU(context.Background(), h.uuid); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.enf.Shutdown(context.Background()) }()
	h.start()
	nb := h.startNeighbours()
	nb.ready(t)
	st, err := h.led.State(h.uuid)
	if err != nil {
		t.Fatal(err)
	}
	// Staged as gpufrac run stages under MPS with borrowing: a unit, a 16 GiB promise, and the
	// budget as its limit (its client's pinned limit, fixed at its start).
	staged, err := h.led.ReserveBytes(h.uuid, size.GiB, ledger.Task{JobName: "staged", TaskName: "main"},
		ledger.WithStage(16*size.GiB), ledger.WithLimit(st.BudgetBytes))
	if err != nil {
		t.Fatal(err)
	}
	j := h.runScript(staged, "staged", "fence.py", nil, "grow", "--to-mb", "8192", "--step-mb", "2048", "--interval", "0.1", "--seconds", "1")
	deadline := time.Now().Add(90 * time.Second) // Python, torch and a CUDA context first
	for {
		if _, waits := h.enf.FenceWaiters(h.uuid); slices.Contains(waits, staged.Token) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the staged job never waited in the fence for its grant: %s", tail(j.out.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t0 := time.Now()
	if _, err := h.led.Withdraw(staged.Token); err != nil {
		t.Fatal(err)
	}
	st, err = h.led.State(h.uuid)
	if err == nil {
		err = h.enf.SyncFence(st)
	}
	if err != nil {
		t.Fatalf("withdrawing the staged job's promise: %v", err)
	}
	code, sig := j.wait(t, 30*time.Second)
	took := time.Since(t0)
	res := j.fenceResult(t)
	okA, okB, whyA, whyB := nb.finished(t)
	var wide []string
	for _, ev := range h.eventsOf(enforcer.EventGPUHealth) {
		if ev.Stage == enforcer.StageUnhealthy {
			wide = append(wide, ev.Message)
		}
	}
	record(t, map[string]any{"staged_exit": code, "staged_signal": sig.String(), "staged_outcome": res.Outcome,
		"staged_error": res.Error, "exit_after_withdraw_ms": took.Milliseconds(), "gpu_health_events": wide,
		"neighbour_a": whyA, "neighbour_b": whyB})
	if code != 1 || sig != 0 || res.Outcome != "oom" || res.AllocatedMB != 0 {
		t.Errorf("the withdrawn job: exit %d %v %+v; want its own out-of-memory exit 1 before any allocation", code, sig, res)
	}
	if len(wide) > 0 {
		t.Errorf("GPU-wide events: %v", wide)
	}
	if !okA || !okB {
		t.Errorf("neighbours harmed: %s; %s", whyA, whyB)
	}
}
