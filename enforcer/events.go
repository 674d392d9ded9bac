package enforcer

import (
	"sync"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/size"
)

// EventKind classifies an Event.
type EventKind string

// Event kinds.
const (
	// EventViolation: a task passed its cap (Stage "crossed", "stopping", "forced"), the
	// allocation fence refused it at its cap (Stage "fenced"), or it was contained (Stage
	// "contained", Violation set).
	EventViolation EventKind = "violation"
	// EventUnmanaged: a GPU process holds memory without a reservation.
	EventUnmanaged EventKind = "unmanaged"
	// EventMPS: the MPS control daemon of a GPU started, was adopted, restarted, stopped or died.
	EventMPS EventKind = "mps"
	// EventGPUHealth: the enforcer marked a GPU unhealthy (or healthy again) in the ledger.
	EventGPUHealth EventKind = "gpu-health"
)

// Event is one thing the enforcer saw or did. Violations also go to the ledger, so
// `gpufrac status` shows them after the plugin is gone.
type Event struct {
	Time  time.Time
	Kind  EventKind
	Stage string
	GPU   string
	// Token is the reservation concerned, if any. It is secret: print ledger.RedactToken(Token) only.
	Token string
	Task  ledger.Task
	PIDs  []int
	Bytes size.Bytes
	// Violation is the record written to the ledger (EventViolation, Stage "contained").
	Violation *ledger.Violation
	Message   string
}

// subscriberBuffer is how many events a slow subscriber may lag before it misses some.
const subscriberBuffer = 256

type hub struct {
	mu   sync.Mutex
	subs map[int]chan Event
	next int
}

// Subscribe returns a channel of events and a function that ends the subscription and closes the
// channel. Events are never blocked on: a subscriber that lags by more than 256 misses events.
func (e *Enforcer) Subscribe() (<-chan Event, func()) {
	h := &e.hub
	ch := make(chan Event, subscriberBuffer)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[int]chan Event{}
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

// emit logs ev and hands it to every subscriber.
func (e *Enforcer) emit(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = e.now()
	}
	args := []any{"kind", string(ev.Kind), "gpu", ev.GPU}
	if ev.Stage != "" {
		args = append(args, "stage", ev.Stage)
	}
	if ev.Token != "" {
		args = append(args, "token", ledger.RedactToken(ev.Token), "task", ev.Task.String())
	}
	if len(ev.PIDs) > 0 {
		args = append(args, "pids", ev.PIDs)
	}
	if ev.Bytes > 0 {
		args = append(args, "bytes", ev.Bytes.String())
	}
	// The message is fixed, like the controller's "controller event", so every event can be found
	// by one search; what happened is in kind, stage and detail.
	args = append(args, "detail", ev.Message)
	switch ev.Kind {
	case EventViolation, EventGPUHealth:
		e.log.Warn("enforcer event", args...)
	default:
		e.log.Info("enforcer event", args...)
	}
	h := &e.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range h.subs {
		select {
		case ch <- ev:
		default:
			e.dropped.Add(1)
		}
	}
}
