package runner

import (
	"slices"

	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/report"
)

func (r *run) result() *record.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := &record.Result{
		Arm: r.o.Arm, Mode: string(r.o.modeOf()), Profiles: r.o.Profiles,
		Backend: r.o.Backend.Kind(), Driver: r.o.Backend.DriverVersion(),
		Queue: r.q.Path, Policy: r.o.Policy, Start: r.start, End: r.o.Now(), OutDir: r.o.OutDir,
	}
	res.Attempts = slices.Clone(r.attempts)
	slices.SortStableFunc(res.Attempts, func(a, b record.Attempt) int { return a.Start.Compare(b.Start) })
	var busySum, busyN float64
	for _, g := range r.s.GPUs() {
		gr := r.gpus[g]
		var sum float64
		for _, u := range r.busy[g] {
			sum += float64(u)
		}
		if n := len(r.busy[g]); n > 0 {
			gr.Busy = sum / float64(n) / 100
			busySum += sum
			busyN += float64(n)
		}
		res.GPUs = append(res.GPUs, gr)
	}
	if busyN > 0 {
		res.BusyFraction = busySum / busyN / 100
	}
	for _, j := range r.s.Jobs() {
		jr := record.JobResult{Name: j.Name, Template: j.Template, Outcome: j.Final, Attempts: j.Attempts, ExitCode: -1, Result: r.resultPath(j),
			MaxAttempts: j.Limit(), Reason: j.Reason, Ladder: record.Ladder(res.Attempts, j.Name)}
		for _, a := range res.Attempts {
			if a.Job == j.Name {
				jr.ExitCode = a.ExitCode
			}
		}
		if !j.Done {
			jr.Outcome = record.OutcomeCanceled
		}
		res.Jobs = append(res.Jobs, jr)
	}
	res.GPUEvents = r.wide.All()
	res.Tally()
	return res
}

// writeOutputs writes the run's records (results.json, attempts.csv) and its report.
func writeOutputs(res *record.Result, dir string) error {
	if err := record.Write(res, dir); err != nil {
		return err
	}
	return report.Write(res, dir)
}
