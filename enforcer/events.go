package enforcer

import (
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/size"
)

// EventKind classifies an Event.
type EventKind string

// Event kinds.
const (
	// EventViolation: a task passed its cap (StageCrossed, StageStopping, StageForced), the
	// allocation fence refused it at its cap (StageFenced), or it was contained
	// (StageContained, Violation set).
	EventViolation EventKind = "violation"
	// EventUnmanaged: a GPU process holds memory without a reservation (StageSeen), or was
	// stopped by policy (StageStopped).
	EventUnmanaged EventKind = "unmanaged"
	// EventMPS: the MPS control daemon of a GPU started, was adopted, restarted, stopped or died.
	EventMPS EventKind = "mps"
	// EventGPUHealth: the enforcer marked a GPU unhealthy (or healthy again) in the ledger.
	EventGPUHealth EventKind = "gpu-health"
)

// Stage says what happened within an event's kind. Subscribers switch on these constants; the
// strings are what the logs and the acceptance tests' records show.
type Stage string

// Stages of EventViolation.
const (
	StageCrossed   Stage = "crossed"
	StageStopping  Stage = "stopping"
	StageForced    Stage = "forced"
	StageFenced    Stage = "fenced"
	StageContained Stage = "contained"
)

// Stages of EventUnmanaged (StageStopped also ends an MPS daemon).
const (
	StageSeen    Stage = "seen"
	StageStopped Stage = "stopped"
)

// Stages of EventMPS.
const (
	StageStarted       Stage = "started"
	StageAdopted       Stage = "adopted"
	StageStartFailed   Stage = "start-failed"
	StageRestarted     Stage = "restarted"
	StageRestartFailed Stage = "restart-failed"
	StageDied          Stage = "died"
)

// Stages of EventGPUHealth.
const (
	StageUnhealthy Stage = "unhealthy"
	StageHealthy   Stage = "healthy"
)

// Event is one thing the enforcer saw or did. Violations also go to the ledger, so
// `gpufrac status` shows them after the plugin is gone.
type Event struct {
	Time  time.Time
	Kind  EventKind
	Stage Stage
	GPU   string
	// Token is the reservation concerned, if any. It is secret: print ledger.RedactToken(Token) only.
	Token string
	Task  ledger.Task
	PIDs  []int
	Bytes size.Bytes
	// Violation is the record written to the ledger (EventViolation, StageContained).
	Violation *ledger.Violation
	Message   string
}

// subscriberBuffer is how many events a slow subscriber may lag before it misses some.
const subscriberBuffer = 256

// Subscribe returns a channel of events and a function that ends the subscription and closes the
// channel. Events are never blocked on: a subscriber that lags by more than 256 misses events.
func (e *Enforcer) Subscribe() (<-chan Event, func()) {
	return e.events.Subscribe()
}

// emit logs ev and hands it to every subscriber.
func (e *Enforcer) emit(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = e.now()
	}
	args := []any{"kind", string(ev.Kind), "gpu", ev.GPU}
	if ev.Stage != "" {
		args = append(args, "stage", string(ev.Stage))
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
	e.events.Publish(ev)
}
