package controller

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpufrac/gpufrac/policy/violations"
)

// errNotYet: a violation cannot be decided yet (its task has not ended); it is tried again at
// the next pass, without an error event.
var errNotYet = errors.New("not decided yet")

// runsOnBound is how long after a refused task left the GPU the controller waits for it to end
// before it takes the task as one that survived the refusal and runs on without the GPU.
const runsOnBound = 10 * time.Minute

// clockSkew is how far the Nomad client's event times and the plugin's may differ: both are the
// same node's clock, read by two processes.
const clockSkew = 5 * time.Second

// taskStateDead is Nomad's state of a task that will not run again in its allocation.
const taskStateDead = "dead"

type fate int

const (
	fateFailed    fate = iota // the task failed after the refusal, or nothing says otherwise
	fateCompleted             // it ended well after the refusal: its framework asked again
	fateRunning               // it has not ended since; undecided
)

// fateOf says what became of the task of an "oom-in-process" violation: the fence refused its
// allocation and it left the GPU, which a task that failed with out-of-memory does and so does
// one whose framework asked again, was served and finished (PyTorch's caching allocator frees
// its cache and retries). Only the first is a violation to climb the ladder for: re-registering a
// job that completed would run it again. The task's first exit after the refusal decides; a
// task with no exit since that runs on long after it left the GPU survived too.
func fateOf(alloc *api.Allocation, rec violations.Record, now time.Time) (fate, string) {
	ts := alloc.TaskStates[rec.Task]
	if ts == nil {
		return fateFailed, "" // nothing known: as before, the violation stands
	}
	since := rec.CrossedAt.Add(-clockSkew).UnixNano()
	for _, ev := range ts.Events {
		if ev == nil || ev.Type != api.TaskTerminated || ev.Time < since {
			continue
		}
		code, sig := exitOf(ev)
		if code == 0 && sig == 0 {
			return fateCompleted, fmt.Sprintf("task %s exited 0 after the fence refused it (its framework asked again and was served): nothing to re-run", rec.Task)
		}
		return fateFailed, ""
	}
	if ts.State == taskStateDead {
		if !ts.Failed {
			return fateCompleted, fmt.Sprintf("task %s ended without failing after the fence refused it: nothing to re-run", rec.Task)
		}
		return fateFailed, ""
	}
	if !rec.ContainedAt.IsZero() && now.Sub(rec.ContainedAt) > runsOnBound {
		return fateCompleted, fmt.Sprintf("task %s still runs %s after it left the GPU: it survived the refusal", rec.Task, runsOnBound)
	}
	return fateRunning, ""
}

// exitOf reads a Terminated event's exit code and signal: from Details, where Nomad keeps them,
// else from the deprecated fields.
func exitOf(ev *api.TaskEvent) (code, sig int) {
	code, sig = ev.ExitCode, ev.Signal
	if v, err := strconv.Atoi(ev.Details["exit_code"]); err == nil {
		code = v
	}
	if v, err := strconv.Atoi(ev.Details["signal"]); err == nil {
		sig = v
	}
	return code, sig
}
