package record

import (
	"fmt"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// Attempt is one run of one job.
type Attempt struct {
	Job      string `json:"job"`
	Template string `json:"template"`
	Number   int    `json:"attempt"` // 1 for a job's first attempt
	GPU      string `json:"gpu"`
	GPUIndex int    `json:"gpu_index"`
	// CapBytes is the attempt's guarantee: memory no other job may take from it (0 when uncapped).
	CapBytes size.Bytes `json:"cap_bytes"`
	// LimitBytes is the most it could hold when it could borrow past its guarantee (memory no
	// other job's guarantee covered); 0 when it could not.
	LimitBytes size.Bytes `json:"limit_bytes,omitempty"`
	// BorrowedBytes is what it held past its guarantee at its peak (PeakBytes - CapBytes when it
	// could borrow).
	BorrowedBytes size.Bytes `json:"borrowed_at_peak_bytes,omitempty"`
	// BorrowWait is how long its allocations waited for memory to borrow (sampled: a multiple
	// of the sampling period), from BorrowWaitAt, in seconds since the run started.
	BorrowWait   time.Duration `json:"borrow_wait_ns,omitempty"`
	BorrowWaitAt float64       `json:"borrow_wait_at,omitempty"`
	// GuaranteeWait is how long its allocations within its guarantee waited for borrowers that
	// held it (lend: the grace, then the reclaim), from GuaranteeWaitAt, sampled the same way.
	GuaranteeWait   time.Duration `json:"guarantee_wait_ns,omitempty"`
	GuaranteeWaitAt float64       `json:"guarantee_wait_at,omitempty"`
	Capped          bool          `json:"capped"`
	WholeGPU        bool          `json:"whole_gpu"`
	Probe           bool          `json:"probe"`
	Start           time.Time     `json:"start"`
	End             time.Time     `json:"end"`
	ExitCode        int           `json:"exit_code"`
	Outcome         Outcome       `json:"outcome"`
	// PeakBytes is the highest memory of the job's whole process tree, sampled at 50 Hz.
	PeakBytes size.Bytes `json:"peak_bytes"`
	Detail    string     `json:"detail,omitempty"`
	// Violation is set when the enforcer caught the attempt above its cap.
	Violation *ledger.Violation `json:"violation,omitempty"`
	Log       string            `json:"log,omitempty"`
	Result    string            `json:"result,omitempty"`
	// Samples is the attempt's memory over time (downsampled to about 10 a second).
	Samples []MemSample `json:"samples,omitempty"`
	// CapChanges are the changes of the cap while the attempt ran (an in-place probe's
	// protective cap lowered when its window ends); CapBytes is the cap after the last one.
	CapChanges []CapChange `json:"cap_changes,omitempty"`
	// Next is what the run did after this attempt failed, in the words printed before it
	// (policy.Step.String); NextKind is policy.StepRaise, StepAlone or StepExhausted, and
	// NextCapBytes the guarantee the next attempt was promised (StepRaise).
	Next         string     `json:"next,omitempty"`
	NextKind     string     `json:"next_kind,omitempty"`
	NextCapBytes size.Bytes `json:"next_cap_bytes,omitempty"`
}

// CapChange is a cap lowered (or raised) in place while an attempt ran.
type CapChange struct {
	At   time.Time  `json:"at"`
	From size.Bytes `json:"from_bytes"`
	To   size.Bytes `json:"to_bytes"`
}

// CapAt is the attempt's cap at time t.
func (a Attempt) CapAt(t time.Time) size.Bytes {
	c := a.CapBytes
	for i := len(a.CapChanges) - 1; i >= 0; i-- {
		if t.Before(a.CapChanges[i].At) {
			c = a.CapChanges[i].From
		}
	}
	return c
}

// CapLabel is the attempt's cap for people, with its history when it changed in place:
// "39GiB -> 5GiB". The terminal summary and the report say it the same way.
func (a Attempt) CapLabel() string {
	switch {
	case a.WholeGPU:
		return "whole GPU"
	case !a.Capped:
		return "none"
	}
	s := ""
	for _, c := range a.CapChanges {
		s += c.From.String() + " -> "
	}
	return s + a.CapBytes.String()
}

// RoomLabel is the room the attempt had, as the job's ladder shows it: "8GiB", "8GiB+borrow",
// "whole GPU".
func (a Attempt) RoomLabel() string {
	if a.LimitBytes > a.CapBytes && !a.WholeGPU && a.Capped {
		return a.CapBytes.String() + "+borrow"
	}
	return a.CapLabel()
}

// LimitLabel is the most the attempt could hold, for people: its limit when it could borrow,
// else its cap.
func (a Attempt) LimitLabel() string {
	if a.LimitBytes > a.CapBytes && a.Capped && !a.WholeGPU {
		return a.LimitBytes.String()
	}
	return a.CapLabel()
}

// Ladder is a job's rooms attempt by attempt, for people: "8GiB+borrow -> 13GiB -> whole GPU".
func Ladder(attempts []Attempt, job string) string {
	s := ""
	for _, a := range attempts {
		if a.Job != job {
			continue
		}
		if s != "" {
			s += " -> "
		}
		s += a.RoomLabel()
	}
	return s
}

// Duration is how long the attempt ran.
func (a Attempt) Duration() time.Duration { return a.End.Sub(a.Start) }

// MemSample is an attempt's memory at one moment, in seconds since the run started.
type MemSample struct {
	T     float64    `json:"t"`
	Bytes size.Bytes `json:"bytes"`
}

// JobResult is a job's final state.
type JobResult struct {
	Name     string `json:"name"`
	Template string `json:"template"`
	// Outcome is the final attempt's, or OutcomeExhausted when the ladder stopped the job.
	Outcome Outcome `json:"outcome"`
	// Reason says why an exhausted job was stopped.
	Reason   string `json:"reason,omitempty"`
	Attempts int    `json:"attempts"`
	// MaxAttempts is the job's bound on attempts (policy.DefaultMaxAttempts unless set).
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Ladder is the room of each attempt (Ladder).
	Ladder   string `json:"ladder,omitempty"`
	ExitCode int    `json:"exit_code"`
	Result   string `json:"result,omitempty"`
}

// GPUResult describes a GPU the run used.
type GPUResult struct {
	UUID        string     `json:"uuid"`
	Index       int        `json:"index"`
	Model       string     `json:"model"`
	TotalBytes  size.Bytes `json:"total_bytes"`
	BudgetBytes size.Bytes `json:"budget_bytes"`
	Mode        string     `json:"mode"`
	Busy        float64    `json:"busy_fraction"`
	// Completed counts the jobs whose final attempt exited 0 on this GPU.
	Completed int `json:"completed"`
	// JobsPerGPUHour = Completed / makespan; the run's figure is the mean over its GPUs.
	JobsPerGPUHour float64 `json:"jobs_per_gpu_hour"`
}

// Result is everything a run did.
type Result struct {
	Arm      Arm           `json:"arm"`
	Mode     string        `json:"mode"`
	Profiles Profiles      `json:"profiles"`
	Backend  string        `json:"backend"`
	Driver   string        `json:"driver"`
	Queue    string        `json:"queue,omitempty"`
	Policy   policy.Policy `json:"policy"`
	Start    time.Time     `json:"start"`
	End      time.Time     `json:"end"`
	GPUs     []GPUResult   `json:"gpus"`
	Jobs     []JobResult   `json:"jobs"`
	Attempts []Attempt     `json:"attempts"`
	// BusyFraction is the mean GPU utilization during the run, 0 to 1.
	BusyFraction float64 `json:"busy_fraction"`
	// Use is where the makespan went: jobs running on average, time a job held a GPU alone.
	Use TimeUse `json:"time_use"`
	// Completed counts jobs whose final attempt exited 0.
	Completed int `json:"completed"`
	// JobsPerGPUHour = Completed / (makespan x GPUs used).
	JobsPerGPUHour float64 `json:"jobs_per_gpu_hour"`
	// ExclusiveEstimate is the makespan one-job-at-a-time would take, from this run's alone
	// attempts per template; zero when some template never ran alone here.
	ExclusiveEstimate time.Duration `json:"exclusive_estimate,omitempty"`
	Violations        int           `json:"violations"`
	// Collateral counts attempts that failed during a GPU-wide event and were re-run.
	Collateral int `json:"collateral"`
	// GPUEvents are the enforcer's GPU-wide events during the run (GPU marked unhealthy).
	GPUEvents []GPUEvent `json:"gpu_events,omitempty"`
	OutDir    string     `json:"out_dir"`
}

// Makespan is the time from the first job's start to the last job's exit.
func (r *Result) Makespan() time.Duration { return Makespan(r.Attempts) }

// Makespan is the time from the first attempt's start to the last attempt's exit (0 for none):
// the one rule the runner's summary, the report and the benchmark's score use.
func Makespan(attempts []Attempt) time.Duration {
	var first, last time.Time
	for _, a := range attempts {
		if first.IsZero() || a.Start.Before(first) {
			first = a.Start
		}
		if a.End.After(last) {
			last = a.End
		}
	}
	if first.IsZero() || !last.After(first) {
		return 0
	}
	return last.Sub(first)
}

// GPUEvent is a GPU-wide event of the run: from the enforcer marking a GPU unhealthy (stopping a
// client under MPS, the MPS daemon dying) until it marked it healthy again (End zero: still
// unhealthy when the run ended).
type GPUEvent struct {
	GPU      string    `json:"gpu"`
	GPUIndex int       `json:"gpu_index"`
	Reason   string    `json:"reason"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end,omitzero"`
	// Neighbour marks a task over its cap in isolated mode (one the fence did not hold: it
	// unset LD_PRELOAD, or linked statically): only an out-of-memory failure of another job of
	// its GPU meanwhile is its collateral.
	Neighbour bool `json:"neighbour,omitempty"`
}

func (e GPUEvent) String() string {
	return fmt.Sprintf("GPU-wide event on GPU%d at %s: %s", e.GPUIndex, e.Start.UTC().Format("15:04:05.000"), e.Reason)
}
