package testutil

import (
	"context"
	"sync"
)

// Runner runs a service's Run loop for a test and records every event the service publishes,
// across restarts (Start after Stop keeps what was recorded). Its zero value is ready.
type Runner[E any] struct {
	mu     sync.Mutex
	events []E
	cancel context.CancelFunc
	done   chan error
}

// Start subscribes to the service's events, then runs it until Stop. The subscription ends when
// Run returns, so no event of a stopped service is lost or recorded late.
func (r *Runner[E]) Start(subscribe func() (<-chan E, func()), run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	ch, unsub := subscribe()
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() {
		for ev := range ch {
			r.mu.Lock()
			r.events = append(r.events, ev)
			r.mu.Unlock()
		}
	}()
	go func() { r.done <- run(ctx); unsub() }()
}

// Stop ends the run Start began and waits for Run to return; it does nothing when none runs.
func (r *Runner[E]) Stop() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
		r.cancel = nil
	}
}

// Events is a copy of what was recorded so far.
func (r *Runner[E]) Events() []E {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]E(nil), r.events...)
}
