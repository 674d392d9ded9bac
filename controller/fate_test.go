package controller

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
	"github.com/gpufrac/gpufrac/policy/violations"
	"github.com/gpufrac/gpufrac/size"
)

// exit is a Terminated task event at after past the refusal, with its exit code and signal.
type exit struct {
	after     time.Duration
	code, sig int
}

// state is a task state with exits as Nomad writes them (Details), the refusal at crossed.
func state(st string, failed bool, crossed time.Time, exits ...exit) *api.TaskState {
	ts := &api.TaskState{State: st, Failed: failed}
	for _, e := range exits {
		ts.Events = append(ts.Events, &api.TaskEvent{Type: api.TaskTerminated, Time: crossed.Add(e.after).UnixNano(),
			Details: map[string]string{"exit_code": strconv.Itoa(e.code), "signal": strconv.Itoa(e.sig)}})
	}
	return ts
}

// An "oom-in-process" violation (the fence refused the task, and it left the GPU) climbs the
// ladder only when the task failed after the refusal: a task whose framework asked again and was
// served, then finished, is left alone (re-registering its job would run it again); a task that
// has not ended is waited for, without an error event.
func TestOutOfMemoryInProcessCountsOnlyForAFailedTask(t *testing.T) {
	oom := violations.ActionOOMInProcess
	for _, tc := range []struct {
		name   string
		action string
		state  func(crossed time.Time) *api.TaskState // nil: the allocation has no task states
		// left is how long ago the task left the GPU (the violation's containment)
		left time.Duration
		want string // "reregistered", "undecided", or the start of the skip's outcome
	}{
		{"exited 0 after the refusal", oom, func(c time.Time) *api.TaskState { return state(taskStateDead, false, c, exit{3 * time.Second, 0, 0}) },
			time.Minute, "skipped: task main exited 0 after the fence refused it"},
		{"exited 1 after the refusal", oom, func(c time.Time) *api.TaskState { return state(taskStateDead, true, c, exit{3 * time.Second, 1, 0}) },
			time.Minute, "reregistered"},
		{"killed after the refusal, then restarted by Nomad", oom, func(c time.Time) *api.TaskState { return state("running", false, c, exit{time.Second, 0, 9}) },
			time.Minute, "reregistered"},
		{"an exit 0 before the refusal does not count", oom, func(c time.Time) *api.TaskState { return state("running", false, c, exit{-time.Minute, 0, 0}) },
			time.Minute, "undecided"},
		{"dead without failing, no exit event", oom, func(c time.Time) *api.TaskState { return state(taskStateDead, false, c) },
			time.Minute, "skipped: task main ended without failing"},
		{"still running long after it left the GPU", oom, func(c time.Time) *api.TaskState { return state("running", false, c) },
			runsOnBound + time.Minute, "skipped: task main still runs"},
		{"no task state: the violation stands", oom, nil, time.Minute, "reregistered"},
		{"a watchdog stop counts whatever the exit", "sigkill", func(c time.Time) *api.TaskState { return state(taskStateDead, false, c, exit{time.Second, 0, 0}) },
			time.Minute, "reregistered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			job := r.putJob(alloc1, device{"nvidia/gpumem", 3, gpuA})
			left := time.Now().Add(-tc.left)
			crossed := left.Add(-time.Second)
			if tc.state != nil {
				a, _ := r.vs.Alloc(alloc1)
				a.TaskStates = map[string]*api.TaskState{"main": tc.state(crossed)}
				r.vs.PutAlloc(a)
			}
			rec := violations.Record{AllocID: alloc1, Job: "train", Task: "main", Template: "lora", GPU: gpuA, GPUUnits: 78,
				UnitBytes: size.GiB, CapBytes: 3 * size.GiB, PeakBytes: 5 * size.GiB, Action: tc.action, Mode: "isolated",
				CrossedAt: crossed, ContainedAt: left}
			path, err := violations.Publish(r.api.Variables(), "default", rec)
			if err != nil {
				t.Fatal(err)
			}
			err = r.pass(r.controller(nil))
			switch tc.want {
			case "undecided":
				if !errors.Is(err, errNotYet) || r.handled(path) != "" || r.count(0) != 3 {
					t.Fatalf("pass: %v, handled %q, count %d; want undecided, untouched", err, r.handled(path), r.count(0))
				}
			case "reregistered":
				if err != nil || r.count(0) != firstStep || !strings.HasPrefix(r.handled(path), "reregistered") {
					t.Fatalf("pass: %v, handled %q, count %d; want re-registered with %d", err, r.handled(path), r.count(0), firstStep)
				}
			default:
				if err != nil || r.count(0) != 3 || !strings.HasPrefix(r.handled(path), tc.want) {
					t.Fatalf("pass: %v, handled %q, count %d; want %q, the job untouched", err, r.handled(path), r.count(0), tc.want)
				}
				if j, _ := r.vs.Job("default", "train"); *j.Version != *job.Version {
					t.Fatalf("job version %d, want %d: the job was changed", *j.Version, *job.Version)
				}
			}
			for _, e := range r.events(EventError) {
				t.Fatalf("an error event: %+v", e)
			}
		})
	}
}

// An undecided violation is decided once its task ends: the controller's run tries it again
// after its retry pause, with no error event meanwhile.
func TestUndecidedViolationIsDecidedWhenItsTaskEnds(t *testing.T) {
	r := newRig(t)
	r.putJob(alloc1, device{"nvidia/gpumem", 3, gpuA})
	crossed := time.Now().Add(-time.Second)
	a, _ := r.vs.Alloc(alloc1)
	a.TaskStates = map[string]*api.TaskState{"main": state("running", false, crossed)}
	r.vs.PutAlloc(a)
	rec := violations.Record{AllocID: alloc1, Job: "train", Task: "main", GPU: gpuA, GPUUnits: 78, UnitBytes: size.GiB,
		CapBytes: 3 * size.GiB, PeakBytes: 5 * size.GiB, Action: violations.ActionOOMInProcess, Mode: "isolated",
		CrossedAt: crossed, ContainedAt: crossed.Add(time.Second)}
	path, err := violations.Publish(r.api.Variables(), "default", rec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := r.controller(nil)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testutil.Eventually(t, 10*time.Second, "a pass that found the task running", func() bool {
		return r.vs.AllocReads(alloc1) >= 2
	})
	a.TaskStates["main"] = state(taskStateDead, true, crossed, exit{2 * time.Second, 1, 0})
	r.vs.PutAlloc(a)
	testutil.Eventually(t, 10*time.Second, "the violation handled", func() bool { return r.handled(path) != "" })
	if got := r.handled(path); !strings.HasPrefix(got, "reregistered") || r.count(0) != firstStep {
		t.Fatalf("handled %q, count %d; want re-registered with %d", got, r.count(0), firstStep)
	}
	for _, e := range r.events(EventError) {
		t.Fatalf("an error event while the task ran: %+v", e)
	}
}

// A task the fence refused one large allocation climbs to what that allocation would have taken
// it to (AskedBytes), not to the little it held: its next count covers what it asked for. Its
// template is raised only to what it held: the asked figure is the task's own word, and a
// template is other tasks' footprint too.
func TestLadderCoversTheRefusedAllocation(t *testing.T) {
	r := newRig(t)
	store, err := nomadvars.New(nomadvars.Config{Address: r.vs.URL()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := store.PutTemplateUnchecked(ctx, policy.Template{Name: "lora", Policy: "default", PeakBytes: size.GiB}); err != nil {
		t.Fatal(err)
	}
	r.putJob(alloc1, device{"nvidia/gpumem", 3, gpuA})
	at := time.Now().Add(-time.Minute)
	rec := violations.Record{AllocID: alloc1, Job: "train", Task: "main", Template: "lora", GPU: gpuA, GPUUnits: 78, UnitBytes: size.GiB,
		CapBytes: 3 * size.GiB, PeakBytes: 2 * size.GiB, AskedBytes: 20 * size.GiB, Action: violations.ActionOOMInProcess,
		Mode: "isolated", CrossedAt: at, ContainedAt: at.Add(time.Second)}
	if _, err := violations.Publish(r.api.Variables(), "default", rec); err != nil {
		t.Fatal(err)
	}
	if err := r.pass(r.controller(func(c *Config) { c.Templates = store })); err != nil {
		t.Fatal(err)
	}
	want := uint64(policy.Default().Units(policy.Default().Cap(20 * size.GiB)))
	if got := r.count(0); got != want {
		t.Fatalf("count %d, want %d: the cap formula over the 20GiB asked for", got, want)
	}
	if tpl, _, err := store.GetTemplate(ctx, "lora"); err != nil || tpl.PeakBytes != 3*size.GiB {
		t.Fatalf("template after the violation: %v, %v; want its footprint raised to the 3GiB cap it held, not to the 20GiB asked", tpl.PeakBytes, err)
	}
}
