package enforcer

import (
	"strings"
	"sync"
	"testing"

	"github.com/gpufrac/gpufrac/policy"
)

// The plugin readies an mps GPU in the background while a Reserve readies it too: two
// PrepareGPU calls on one GPU at once start one daemon, both succeed, and (under -race) neither
// reads the daemon's PID while the other sets it.
func TestPrepareGPUConcurrently(t *testing.T) {
	r := newRig(t, policy.ModeMPS, nil)
	ch, unsub := r.enf.Subscribe()
	defer unsub()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { errs[i] = r.enf.PrepareGPU(t.Context(), r.uuid) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("PrepareGPU %d: %v", i, err)
		}
	}
	if n := strings.Count(r.commands(), "daemon "); n != 1 {
		t.Fatalf("%d daemons started for one GPU, want 1:\n%s", n, r.commands())
	}
	// Every report of it carries its PID (the events were sent before PrepareGPU returned).
	started := 0
	for {
		select {
		case ev := <-ch:
			if ev.Kind == EventMPS && ev.Stage == "started" {
				started++
				if len(ev.PIDs) != 1 || ev.PIDs[0] != r.daemonPID() {
					t.Errorf("started event %+v, daemon pid %d", ev, r.daemonPID())
				}
			}
		default:
			if started == 0 {
				t.Fatal("no event reported the daemon started")
			}
			return
		}
	}
}
