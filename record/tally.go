package record

import "time"

// Tally fills the figures of a result whose GPUs, Jobs (with their final outcomes) and
// Attempts (in start order) are set: time use, completed jobs, violations, collateral
// failures, jobs per GPU-hour (per GPU and over the run) and the one-at-a-time estimate.
func (r *Result) Tally() {
	r.Use = UseOf(r.Attempts)
	r.Completed, r.Violations, r.Collateral = 0, 0, 0
	for _, j := range r.Jobs {
		if j.Outcome == OutcomeOK {
			r.Completed++
		}
	}
	for _, a := range r.Attempts {
		switch a.Outcome {
		case OutcomeCapViolation:
			r.Violations++
		case OutcomeCollateral:
			r.Collateral++
		}
	}
	r.JobsPerGPUHour = 0
	if ms := r.Makespan(); ms > 0 && len(r.GPUs) > 0 {
		r.JobsPerGPUHour = float64(r.Completed) / (ms.Hours() * float64(len(r.GPUs)))
	}
	perGPUTotals(r)
	r.ExclusiveEstimate = exclusiveEstimate(r)
}

// exclusiveEstimate sums, over the jobs, the mean duration of their template's attempts that
// ran alone and finished (probes and whole-GPU re-runs): what one-at-a-time would have taken.
func exclusiveEstimate(res *Result) time.Duration {
	sum := map[string]time.Duration{}
	n := map[string]int{}
	for _, a := range res.Attempts {
		if a.WholeGPU && a.Outcome == OutcomeOK {
			sum[a.Template] += a.Duration()
			n[a.Template]++
		}
	}
	var total time.Duration
	for _, j := range res.Jobs {
		if n[j.Template] == 0 {
			return 0
		}
		total += sum[j.Template] / time.Duration(n[j.Template])
	}
	return total / time.Duration(max(1, len(res.GPUs)))
}
