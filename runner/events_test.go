package runner

import (
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/record"
)

// The violation the enforcer reports contained reaches the attempt whose reservation it names,
// from the event alone: the attempt's end need not read the ledger until it shows up.
func TestContainedEventReachesItsAttempt(t *testing.T) {
	clk := testutil.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	const uuid = "GPU-events"
	r := clockRun(t, clk, "", map[string]record.GPUResult{uuid: {UUID: uuid, Index: 0}})
	mine := &active{token: "mine", contained: make(chan struct{})}
	other := &active{token: "other", contained: make(chan struct{})}
	r.active[mine], r.active[other] = true, true

	v := ledger.Violation{Token: "mine", GPU: uuid, Action: enforcer.ActionOOMInProcess, HeldBy: ledger.HeldByFence}
	r.onEvent(enforcer.Event{Kind: enforcer.EventViolation, Stage: enforcer.StageContained, GPU: uuid, Token: "mine", Violation: &v})
	select {
	case <-mine.contained:
	default:
		t.Fatal("the attempt was not told its violation was contained")
	}
	select {
	case <-other.contained:
		t.Fatal("another attempt was told of a violation that is not its own")
	default:
	}
	mine.exit = 1
	if got := r.violationOf(mine); got == nil || got.HeldBy != ledger.HeldByFence || len(r.led.Violations()) != 0 {
		t.Fatalf("violation %+v with %d in the ledger: want the event's, the ledger empty", got, len(r.led.Violations()))
	}
	// An out-of-memory record only says the task left the GPU near its cap: a job that exited
	// 0 broke nothing.
	mine.exit = 0
	if got := r.violationOf(mine); got != nil {
		t.Fatalf("violation %+v for a job that exited 0 after leaving near its cap", got)
	}

	// A second report for the same attempt (an event is never blocked on, so none is awaited
	// twice) replaces the first without closing the channel again.
	killed := ledger.Violation{Token: "mine", GPU: uuid, Action: enforcer.ActionSIGKILL}
	r.onEvent(enforcer.Event{Kind: enforcer.EventViolation, Stage: enforcer.StageContained, GPU: uuid, Token: "mine", Violation: &killed})
	mine.exit = -1 // killed by the signal
	if got := r.violationOf(mine); got == nil || got.Action != enforcer.ActionSIGKILL {
		t.Fatalf("violation %+v: want the latest report", got)
	}
	// A SIGKILL that found the job already exiting 0 (judged on its teardown's memory, as seed
	// 2's leaker on the H200 was) stopped nothing: the job's work was done.
	mine.exit = 0
	if got := r.violationOf(mine); got != nil {
		t.Fatalf("violation %+v for a job that exited 0: a killed process cannot", got)
	}

	// Where the event never came (a subscription that lagged), the ledger's record stands in.
	if err := r.led.RecordViolation(ledger.Violation{Token: "other", GPU: uuid, Action: enforcer.ActionSIGKILL}); err != nil {
		t.Fatal(err)
	}
	other.exit = -1
	if got := r.violationOf(other); got == nil || got.Token != "other" || got.Action != enforcer.ActionSIGKILL {
		t.Fatalf("violation %+v: want the ledger's record of the other attempt", got)
	}
}
