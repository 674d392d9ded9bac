package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/violations"
)

// Config wires a Controller. Client is required.
type Config struct {
	Client *api.Client
	// Namespace holds the violation variables (the plugins' violations.namespace).
	Namespace string
	// Templates, when set, gets each violating template's footprint raised.
	Templates policy.Store
	// DryRun only says what would be done: nothing is written.
	DryRun bool
	Logger hclog.Logger
	// OnEvent receives every event (the command prints them as JSON lines with --json).
	OnEvent func(Event)
	// Retry is the pause after a Nomad API error (default 5s); Wait bounds one blocking query.
	Retry, Wait time.Duration
	// Name identifies this controller in the handled_by item (default "gpufrac-controller").
	Name string
	// Registerer, when set, gets the controller's Prometheus metrics.
	Registerer prometheus.Registerer
	// Policy's cap formula sizes the larger guarantee after a violation when the violating
	// template's own policy cannot be read from Templates (ladder.go); zero: policy.Default().
	Policy policy.Policy
}

// Event kinds.
const (
	EventReregistered    = "reregistered"     // the job now asks for more units (the ladder's next step)
	EventWouldReregister = "would-reregister" // dry run
	EventTemplateRaised  = "template-raised"
	EventExhausted       = "exhausted" // the ladder gives it no more room: reported, not re-registered
	EventSkipped         = "skipped"   // nothing to do (job gone, no gpufrac device, already done)
	EventReplaced        = "replaced"  // the re-registered job's new allocation runs
	EventStopped         = "stopped"   // the allocation that broke its cap, stopped once its job asks for more
	EventError           = "error"
)

// EventKinds are the kinds an Event may have.
var EventKinds = []string{EventReregistered, EventWouldReregister, EventTemplateRaised, EventExhausted, EventSkipped,
	EventReplaced, EventStopped, EventError}

// Event is one thing the controller did or found.
type Event struct {
	Time      time.Time `json:"time"`
	Kind      string    `json:"kind"`
	Violation string    `json:"violation,omitempty"`
	Namespace string    `json:"namespace,omitempty"`
	Job       string    `json:"job,omitempty"`
	Group     string    `json:"group,omitempty"`
	Task      string    `json:"task,omitempty"`
	Alloc     string    `json:"alloc,omitempty"`
	Device    string    `json:"device,omitempty"`
	FromUnits uint64    `json:"from_units,omitempty"`
	ToUnits   uint64    `json:"to_units,omitempty"`
	Version   uint64    `json:"job_version,omitempty"`
	Message   string    `json:"message"`
}

// MetaEscalated prefixes the job meta key that records, per task group and task, the allocation
// whose violation raised the count: a controller that restarts before marking the violation
// handled finds it there and does not register twice.
const MetaEscalated = "gpufrac_escalated."

// Controller follows violations. Run it once per cluster (or per namespace of violations).
type Controller struct {
	cfg Config
	log hclog.Logger

	mu      sync.Mutex
	done    map[string]bool // violation paths handled or reported in this process
	pending map[pendingKey]pending

	events  *prometheus.CounterVec
	contain prometheus.Histogram
}

// pending is a re-registration waiting for its replacement allocation to run.
type pending struct {
	version uint64
	ev      Event
}

// pendingKey is the task a re-registration raised. Each raised task waits for its own
// replacement: a later re-registration of another group or task of the job replaces none.
type pendingKey struct{ ns, job, group, task string }

// New checks cfg and fills in defaults.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil {
		return nil, errors.New("controller: Config.Client is nil")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = api.DefaultNamespace
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Retry <= 0 {
		cfg.Retry = 5 * time.Second
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 5 * time.Minute
	}
	if cfg.Name == "" {
		cfg.Name = "gpufrac-controller"
	}
	c := &Controller{cfg: cfg, log: cfg.Logger.Named("controller"), done: map[string]bool{}, pending: map[pendingKey]pending{},
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpufrac_controller_events_total",
			Help: "Controller events by kind (reregistered, exhausted, skipped, replaced, error...)."}, []string{"kind"}),
		contain: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpufrac_controller_violation_containment_seconds",
			Help:    "Time from a task passing its cap to its containment, for each violation the controller acted on.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30}}),
	}
	// Every kind starts at 0, so rate() and increase() see its first event, and a dashboard
	// shows a kind that has not happened as 0, not as no data.
	for _, k := range EventKinds {
		c.events.WithLabelValues(k)
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(c.events); err != nil {
			return nil, fmt.Errorf("controller metrics: %w", err)
		}
		if err := cfg.Registerer.Register(c.contain); err != nil {
			return nil, fmt.Errorf("controller metrics: %w", err)
		}
	}
	return c, nil
}

func (c *Controller) emit(ev Event) {
	ev.Time = time.Now().UTC()
	args := []any{"kind", ev.Kind, "violation", ev.Violation, "job", ev.Job, "group", ev.Group, "task", ev.Task, "alloc", ev.Alloc}
	if ev.ToUnits != 0 {
		args = append(args, "from_units", ev.FromUnits, "to_units", ev.ToUnits)
	}
	args = append(args, "detail", ev.Message)
	switch ev.Kind {
	case EventError:
		c.log.Warn("controller event", args...)
	default:
		c.log.Info("controller event", args...)
	}
	c.events.WithLabelValues(ev.Kind).Inc()
	if c.cfg.OnEvent != nil {
		c.cfg.OnEvent(ev)
	}
}

// Run follows the violations (a blocking list query) and the allocation events until ctx ends.
// API errors are reported and retried; they never end Run.
func (c *Controller) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.followAllocations(ctx)
	}()
	defer wg.Wait()
	var index uint64
	failing := ""
	for ctx.Err() == nil {
		next, err := c.Pass(ctx, index)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if msg := err.Error(); msg != failing && !errors.Is(err, errNotYet) {
				c.emit(Event{Kind: EventError, Message: msg})
				failing = msg
			}
			index = 0
			sleep(ctx, c.cfg.Retry)
			continue
		}
		failing = ""
		index = next
	}
	return ctx.Err()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Pass waits until the violation list changes past index (0: at once), handles every violation
// not handled yet, and returns the index to wait on next.
func (c *Controller) Pass(ctx context.Context, index uint64) (uint64, error) {
	vars := c.cfg.Client.Variables()
	q := (&api.QueryOptions{Namespace: c.cfg.Namespace, WaitIndex: index, WaitTime: c.cfg.Wait}).WithContext(ctx)
	list, meta, err := vars.PrefixList(violations.PathPrefix, q)
	if err != nil {
		return 0, fmt.Errorf("listing %s in namespace %s: %w", violations.PathPrefix, c.cfg.Namespace, err)
	}
	c.forgetGone(list)
	var errs []error
	undecided := false
	for _, v := range list {
		c.mu.Lock()
		done := c.done[v.Path]
		c.mu.Unlock()
		if done {
			continue
		}
		if err := c.Handle(ctx, v.Path); errors.Is(err, errNotYet) {
			undecided = true
		} else if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// A failed violation is tried again on the next pass, not at the next change.
		return 0, errors.Join(errs...)
	}
	if undecided {
		return 0, errNotYet
	}
	return meta.LastIndex, nil
}

// forgetGone drops what this process remembers of violations no longer listed (the plugin
// trims its oldest): a controller that runs for months remembers as many as Nomad holds.
func (c *Controller) forgetGone(list []*api.VariableMetadata) {
	listed := make(map[string]bool, len(list))
	for _, v := range list {
		listed[v.Path] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for path := range c.done {
		if !listed[path] {
			delete(c.done, path)
		}
	}
}

func statusOf(err error) int {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) {
		return ue.StatusCode()
	}
	var up *api.UnexpectedResponseError
	if errors.As(err, &up) {
		return up.StatusCode()
	}
	return 0
}

// isGPUFrac says whether a device request asks the gpufrac plugin ("gpumem", "nvidia/gpumem"
// or "nvidia/gpumem/<group>").
func isGPUFrac(name string) bool {
	parts := strings.SplitN(name, "/", 3)
	switch len(parts) {
	case 1:
		return parts[0] == "gpumem"
	default:
		return parts[0] == "nvidia" && parts[1] == "gpumem"
	}
}
