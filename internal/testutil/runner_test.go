package testutil

import (
	"context"
	"slices"
	"testing"
	"time"
)

// hub is a service that publishes each value sent on publish to its one subscriber, and whose
// Run says when it started.
type hub struct {
	publish chan int
	started chan struct{}
	sub     chan int
}

func (h *hub) subscribe() (<-chan int, func()) {
	ch := make(chan int)
	h.sub = ch
	return ch, func() { close(ch) }
}

func (h *hub) run(ctx context.Context) error {
	h.started <- struct{}{}
	for {
		select {
		case v := <-h.publish:
			h.sub <- v
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// A Runner records what a run publishes, keeps it across a stop and a restart, and stops once.
func TestRunnerRecordsAcrossRestarts(t *testing.T) {
	h := &hub{publish: make(chan int), started: make(chan struct{}, 1)}
	var r Runner[int]
	r.Stop() // nothing runs: no effect
	r.Start(h.subscribe, h.run)
	<-h.started
	h.publish <- 1
	h.publish <- 2
	Eventually(t, 5*time.Second, "two events recorded", func() bool { return len(r.Events()) == 2 })
	r.Stop()
	r.Stop()
	r.Start(h.subscribe, h.run)
	<-h.started
	h.publish <- 3
	Eventually(t, 5*time.Second, "the restarted run's event recorded", func() bool { return len(r.Events()) == 3 })
	r.Stop()
	if got := r.Events(); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("events %v, want [1 2 3]", got)
	}
}
