package sched

import (
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/size"
)

// NewJobs are the queue's jobs at their start, each with its ladder's bound: its own
// max_attempts, else its template's, else the queue's bound, else policy.DefaultMaxAttempts;
// its cap is fixed where the job says cap_fixed = true, or its template does and the job says
// nothing (a job's false undoes its template's true).
func NewJobs(q queue.Queue) []*Job {
	jobs := make([]*Job, len(q.Jobs))
	for i, qj := range q.Jobs {
		j := &Job{Job: qj, maxAttempts: policy.DefaultMaxAttempts}
		spec := q.Templates[j.Template]
		for _, n := range []int{q.MaxAttempts, spec.MaxAttempts, j.MaxAttempts} {
			if n > 0 {
				j.maxAttempts = n
			}
		}
		j.FixedCap = spec.CapFixed
		if j.CapFixed != nil {
			j.FixedCap = *j.CapFixed
		}
		jobs[i] = j
	}
	return jobs
}

// Limit is the job's bound in attempt numbers: a probe window the runner ended is not a
// failure, nor a staged start stopped for a borrower, nor a failure a neighbour's violation or a
// GPU-wide event caused (collateral, re-run at most collateral.MaxReruns times), so none uses
// one up: a job with max_attempts = 1 must not end exhausted for what another job did.
func (j *Job) Limit() int { return j.maxAttempts + j.ProbeStops + j.Unstages + j.Collateral }

// Grow records that a job of template t needed a guarantee of c: the template's jobs that start
// from now on start there too (a declared cap is where a job starts, not a ceiling), except
// those whose cap is fixed.
func (s *Sched) Grow(t string, c size.Bytes) { s.grown[t] = max(s.grown[t], c) }

// capFor is the cap job j starts with: its template's, grown by the ladder unless j's is fixed.
func (s *Sched) capFor(j *Job) (size.Bytes, bool) {
	c, ok := s.CapOf(j.Template)
	if g := s.grown[j.Template]; g > c && !j.FixedCap {
		return g, true
	}
	return c, ok
}
