// Package hub hands values to subscribers without ever blocking the sender: the ledger wakes
// the plugin's fingerprint stream after a change, the enforcer sends its events, and the
// plugin's runtime wakes its streams through it. A subscriber that lags by more than its buffer
// misses values; with a buffer of one and an empty struct as the value, wake-ups coalesce.
package hub

import "sync"

// Hub is a set of subscriptions. The zero value is not usable: call New.
type Hub[T any] struct {
	buffer int

	mu     sync.Mutex
	subs   map[int]chan T
	next   int
	closed bool
}

// New makes a hub whose subscribers each get a channel of buffer values (at least 1).
func New[T any](buffer int) *Hub[T] {
	return &Hub[T]{buffer: max(buffer, 1), subs: map[int]chan T{}}
}

// Subscribe returns a channel of what Publish sends from now on, and a function that ends the
// subscription and closes the channel (calling it again does nothing). On a closed hub the
// channel comes back closed.
func (h *Hub[T]) Subscribe() (<-chan T, func()) {
	ch := make(chan T, h.buffer)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(ch)
		return ch, func() {}
	}
	id := h.next
	h.next++
	h.subs[id] = ch
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if c, ok := h.subs[id]; ok {
			delete(h.subs, id)
			close(c)
		}
	}
}

// Publish offers v to every subscriber and returns how many had no room for it. The lock is
// held while sending, so a subscription that ends meanwhile never gets a send on its closed
// channel.
func (h *Hub[T]) Publish(v T) (dropped int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range h.subs {
		select {
		case ch <- v:
		default:
			dropped++
		}
	}
	return dropped
}

// Close ends every subscription (closing its channel); later subscriptions come back closed.
func (h *Hub[T]) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for id, ch := range h.subs {
		delete(h.subs, id)
		close(ch)
	}
}
