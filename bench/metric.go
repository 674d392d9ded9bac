package bench

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// ArmRun is what one arm's run of one queue produced.
type ArmRun struct {
	Label    string          `json:"label"` // unique in an invocation: "exclusive-1", "packed-mps"
	Arm      record.Arm      `json:"arm"`
	Mode     string          `json:"mode"`
	Profiles record.Profiles `json:"profiles"`
	Seed     uint64          `json:"seed"`
	Jobs     []Entry         `json:"jobs"`
	// Attempts are the runner's records of the arm's attempts, without their memory samples
	// (the runner's own results.json keeps those).
	Attempts []record.Attempt `json:"attempts"`
	// BusyFraction is the share of the run's samples in which NVML saw a kernel running.
	BusyFraction float64 `json:"busy_fraction"`
	// Workload is the size of the queue's jobs ("" in runs recorded before profiles: startup).
	Workload WorkloadProfile `json:"workload,omitempty"`
	// GPM are the GPUs' performance monitor periods read while the arm ran; GPMNotes say why
	// some or all are missing (a GPU without GPM, a failed read).
	GPM      []GPMSample `json:"gpm,omitempty"`
	GPMNotes []string    `json:"gpm_notes,omitempty"`
	// Error is set when the arm did not run to the end (runner error, deadline): its score
	// still counts what finished, and the report shows the error.
	Error string `json:"error,omitempty"`
	// Budgets is each GPU's budget (by UUID), which the memory bound measures guarantees
	// against; runs recorded before it existed fall back to the attempts' borrowing limits.
	Budgets map[string]size.Bytes `json:"budgets,omitempty"`
}

// JobScore is one job's verdict in one arm.
type JobScore struct {
	Job       string         `json:"job"`
	Template  string         `json:"template"`
	Attempts  int            `json:"attempts"`
	FinalExit int            `json:"final_exit"`
	Final     record.Outcome `json:"final_outcome"`
	// Completed: the final attempt exited cleanly and the result agrees with the exclusive run.
	Completed bool   `json:"completed"`
	Why       string `json:"why,omitempty"` // why not completed
	// FailedTime is the time of its failed attempts (failed, cap-violating, collateral).
	FailedTime time.Duration `json:"failed_attempts_ns,omitempty"`
	// Wall is the final attempt's time, and SM its use of the SMs, in exclusive arms only
	// (where a job has the GPU to itself, so the GPU's figures are the job's).
	Wall time.Duration `json:"wall_ns,omitempty"`
	SM   *SMUse        `json:"sm,omitempty"`
	// Share is its final attempt's guarantee over its GPU's budget (0: uncapped, a whole GPU,
	// or no budget known); above one half, no other such job can hold its guarantee beside it.
	Share float64 `json:"guarantee_share,omitempty"`
}

// Loss is the work an arm lost to failed attempts. Caps exist to keep it at zero for every job
// but the leaker: on real fine-tunes an innocent job's lost attempt is hours.
type Loss struct {
	// Innocent is the time of the failed attempts of jobs other than the leaker, whether or not
	// the job completed later.
	Innocent time.Duration `json:"innocent_work_lost_ns"`
	// Lost names the jobs that ran but did not complete (final attempt failed, or a result off
	// its exclusive run's), the leaker included; InnocentLost counts those that are not it.
	Lost         []string `json:"jobs_lost"`
	InnocentLost int      `json:"innocent_jobs_lost"`
	// ReRun names the jobs started again after a failed attempt: a retry, a re-run after a
	// broken cap, a collateral failure.
	ReRun []string `json:"jobs_rerun"`
}

// Score is one arm's figures.
type Score struct {
	Label     string          `json:"label"`
	Arm       record.Arm      `json:"arm"`
	Mode      string          `json:"mode"`
	Profiles  record.Profiles `json:"profiles"`
	Seed      uint64          `json:"seed"`
	Jobs      int             `json:"jobs"`
	Completed int             `json:"completed"`
	Makespan  time.Duration   `json:"makespan_ns"`
	// JobsPerGPUHour: completed jobs divided by the makespan in hours (one GPU).
	JobsPerGPUHour float64 `json:"jobs_per_gpu_hour"`
	// Ratio to the exclusive baseline of the same seed; 0 when there is none.
	Ratio float64 `json:"ratio"`
	// FailedOthers counts failed, cap-violating or collateral attempts by jobs other than the
	// leaker. A collateral attempt is a neighbour harmed by a GPU-wide event (a stop under MPS):
	// the runner re-runs it, so it may still complete, but the harm counts here.
	FailedOthers int `json:"failed_attempts_non_leaker"`
	// Collateral is the part of FailedOthers that was collateral.
	Collateral int `json:"collateral_attempts_non_leaker,omitempty"`
	// LeakerCap is the cap of the leaker's first capped attempt (0: it never ran capped).
	LeakerCap size.Bytes `json:"leaker_cap_bytes"`
	// LeakerContained is, for the leaker's capped attempt that broke its cap, the time from
	// its usage first passing the cap to its holding no GPU memory (the enforcer's record); 0
	// when unknown. LeakerAction is how it was stopped ("oom-in-process", "sigint", ...), or
	// "not contained" when its capped attempt ended without a violation.
	LeakerContained time.Duration `json:"leaker_contained_ns"`
	LeakerAction    string        `json:"leaker_action,omitempty"`
	BusyFraction    float64       `json:"busy_fraction"`
	// Use is where the makespan went.
	Use record.TimeUse `json:"time_use"`
	// Loss is the work failed attempts cost; nil in summaries written before it existed.
	Loss *Loss `json:"loss,omitempty"`
	// Workload is the queue's workload profile ("" before profiles existed: startup).
	Workload WorkloadProfile `json:"workload,omitempty"`
	// WorkloadsDigest is its invocation's (Summary.WorkloadsDigest), on a reference run only.
	WorkloadsDigest string `json:"workloads_digest,omitempty"`
	// SM is the arm's use of the SMs over its makespan and its distance to the SM bound; nil
	// when no GPM was read.
	SM *SMScore `json:"sm,omitempty"`
	// GPUs is how many GPUs its attempts ran on; Mem its memory bound (SetMemBounds), nil when
	// no guarantee exceeded half a GPU's budget.
	GPUs int       `json:"gpus,omitempty"`
	Mem  *MemBound `json:"memory_bound,omitempty"`
	// Busy is its time-slicing bound (SetBusyBounds), nil without an exclusive run that sampled
	// GPU utilization.
	Busy   *BusyBound `json:"busy_bound,omitempty"`
	Error  string     `json:"error,omitempty"`
	PerJob []JobScore `json:"per_job"`
}

// Verdict says whether a job's result agrees with its exclusive run (nil when it does).
type Verdict func(job Entry) error

// clean is an attempt that ended as a normal job does: exit 0 and recorded as ok (a probe
// that ran to its end is recorded ok; a probe window that was cut short is not a finished job).
// capOf is the cap an attempt ran under: 0 when it was not enforced (uncapped arms, a whole
// GPU in the exclusive arm), whatever reservation it held.
func capOf(a record.Attempt) size.Bytes {
	if !a.Capped {
		return 0
	}
	return a.CapBytes
}

func clean(a record.Attempt) bool {
	return a.ExitCode == 0 && a.Outcome == record.OutcomeOK
}

// ScoreRun computes an arm's figures exactly as BENCHMARK.md defines them: a job completed when
// its final attempt exited cleanly and verdict accepts its result; the time is from the first
// attempt's start (any job, probes included) to the last attempt's exit (re-runs included).
func ScoreRun(run ArmRun, verdict Verdict) Score {
	s := Score{Label: run.Label, Arm: run.Arm, Mode: run.Mode, Profiles: run.Profiles, Seed: run.Seed,
		Jobs: len(run.Jobs), BusyFraction: run.BusyFraction, Error: run.Error, Use: UseOf(run), Workload: run.Workload}
	byJob := map[string][]record.Attempt{}
	for _, a := range run.Attempts {
		byJob[a.Job] = append(byJob[a.Job], a)
	}
	s.Makespan = record.Makespan(run.Attempts)
	budgets := budgetOf(run)
	for _, j := range run.Jobs {
		as := byJob[j.Name]
		sort.SliceStable(as, func(a, b int) bool { return as[a].Start.Before(as[b].Start) })
		js := JobScore{Job: j.Name, Template: j.Template, Attempts: len(as)}
		for _, a := range as {
			if j.Template == Leaker {
				if s.LeakerCap == 0 && capOf(a) > 0 && !a.WholeGPU {
					s.LeakerCap = capOf(a)
				}
				if s.LeakerAction == "" && capOf(a) > 0 && !a.WholeGPU && a.Outcome != record.OutcomeProbe {
					switch {
					case a.Outcome == record.OutcomeCapViolation:
						s.LeakerAction = "cap-violation"
						if v := a.Violation; v != nil {
							if v.Action != "" {
								s.LeakerAction = v.Action
							}
							if !v.CrossedAt.IsZero() && v.ContainedAt.After(v.CrossedAt) {
								s.LeakerContained = v.ContainedAt.Sub(v.CrossedAt)
							}
						}
					case a.Outcome == record.OutcomeOK:
						s.LeakerAction = "not contained"
					default:
						s.LeakerAction = string(a.Outcome)
					}
				}
			} else if failedAttempt(a) {
				s.FailedOthers++
				if a.Outcome == record.OutcomeCollateral {
					s.Collateral++
				}
			}
		}
		switch {
		case len(as) == 0:
			js.Why = "never ran"
		default:
			fin := as[len(as)-1]
			js.FinalExit, js.Final = fin.ExitCode, fin.Outcome
			js.Share = shareOf(fin, budgets)
			if run.Arm == record.ArmExclusive {
				js.Wall = fin.End.Sub(fin.Start)
				if u := SMUseOf(run.GPM, fin.Start, fin.End); u.Coverage > 0 {
					js.SM = &u
				}
			}
			if !clean(fin) {
				js.Why = fmt.Sprintf("final attempt: %s, exit %d", fin.Outcome, fin.ExitCode)
			} else if err := verdict(j); err != nil {
				js.Why = err.Error()
			} else {
				js.Completed = true
				s.Completed++
			}
		}
		s.PerJob = append(s.PerJob, js)
	}
	s.GPUs = gpusOf(run)
	s.Loss = lossOf(run, s.PerJob)
	if s.LeakerAction == "" && hasLeaker(run.Jobs) && len(run.Attempts) > 0 {
		s.LeakerAction = "never capped"
	}
	if s.Makespan > 0 {
		s.JobsPerGPUHour = float64(s.Completed) / s.Makespan.Hours()
	}
	if from, to, ok := span(run.Attempts); ok && len(run.GPM) > 0 {
		if u := SMUseOf(run.GPM, from, to); u.Coverage > 0 {
			s.SM = &SMScore{SMUse: u}
		}
	}
	return s
}

// span is the time from the first attempt's start to the last one's end.
func span(as []record.Attempt) (from, to time.Time, ok bool) {
	for _, a := range as {
		if !ok || a.Start.Before(from) {
			from = a.Start
		}
		if !ok || a.End.After(to) {
			to = a.End
		}
		ok = true
	}
	return from, to, ok && to.After(from)
}

// SetRatios fills each score's Ratio against the exclusive baseline of its seed and workload
// profile: the mean jobs-per-GPU-hour of those exclusive runs (two per seed in bench-seed;
// averaging them halves the noise the second run measures), then the SM, memory and
// time-slicing bounds (SetBounds, SetMemBounds, SetBusyBounds).
// Scores with no exclusive run of their seed and profile keep 0.
func SetRatios(scores []Score) {
	sum := map[baselineKey]float64{}
	n := map[baselineKey]int{}
	for _, s := range scores {
		// An exclusive run cut short scored a subset of the queue, whose rate is not the
		// queue's: it would bias the baseline, so only runs that reached every job count.
		if s.Arm == record.ArmExclusive && s.JobsPerGPUHour > 0 && !s.unfinished() {
			sum[keyOf(s)] += s.JobsPerGPUHour
			n[keyOf(s)]++
		}
	}
	for i := range scores {
		if k := keyOf(scores[i]); n[k] > 0 {
			scores[i].Ratio = scores[i].JobsPerGPUHour / (sum[k] / float64(n[k]))
		}
	}
	SetBounds(scores)
	SetMemBounds(scores)
	SetBusyBounds(scores)
}

// cutShort is true when some job of the run never started.
func (s Score) cutShort() bool {
	for _, j := range s.PerJob {
		if j.Why == "never ran" {
			return true
		}
	}
	return false
}

func hasLeaker(jobs []Entry) bool {
	return slices.ContainsFunc(jobs, func(j Entry) bool { return j.Template == Leaker })
}

// failedAttempt: the attempt's work was lost (a probe window that ended or a canceled attempt
// is not a failure).
func failedAttempt(a record.Attempt) bool { return a.Outcome.Failed() }

// lossOf is the work a run lost, given each job's verdict; it sets each job's FailedTime.
func lossOf(run ArmRun, perJob []JobScore) *Loss {
	byJob := map[string][]record.Attempt{}
	for _, a := range run.Attempts {
		byJob[a.Job] = append(byJob[a.Job], a)
	}
	l := &Loss{Lost: []string{}, ReRun: []string{}}
	for i, js := range perJob {
		as := byJob[js.Job]
		sort.SliceStable(as, func(a, b int) bool { return as[a].Start.Before(as[b].Start) })
		var failed time.Duration
		rerun := false
		for k, a := range as {
			if !failedAttempt(a) {
				continue
			}
			failed += a.End.Sub(a.Start)
			rerun = rerun || k < len(as)-1
		}
		perJob[i].FailedTime = failed
		if rerun {
			l.ReRun = append(l.ReRun, js.Job)
		}
		innocent := js.Template != Leaker
		if innocent {
			l.Innocent += failed
		}
		// A job cut short by the arm's end (never ran, or stopped) was not lost to a failure.
		if !js.Completed && len(as) > 0 && js.Final != record.OutcomeCanceled {
			l.Lost = append(l.Lost, js.Job)
			if innocent {
				l.InnocentLost++
			}
		}
	}
	return l
}
