package runner

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// Output file names inside Options.OutDir.
const (
	ResultsFile  = "results.json"
	AttemptsFile = "attempts.csv"
	ReportFile   = "report.html"
)

// CSVHeader is the first row of attempts.csv.
var CSVHeader = []string{"job", "template", "attempt", "gpu_index", "gpu", "cap_bytes", "capped", "whole_gpu", "probe",
	"start", "end", "duration_s", "exit_code", "outcome", "peak_bytes", "violation_action", "containment_s", "detail"}

func (r *run) result() *Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := &Result{
		Arm: r.o.Arm, Mode: string(r.o.modeOf()), Profiles: r.o.Profiles,
		Backend: r.o.Backend.Kind(), Driver: r.o.Backend.DriverVersion(),
		Queue: r.q.Path, Policy: r.o.Policy, Start: r.start, End: time.Now(), OutDir: r.o.OutDir,
	}
	res.Attempts = slices.Clone(r.attempts)
	slices.SortStableFunc(res.Attempts, func(a, b Attempt) int { return a.Start.Compare(b.Start) })
	var busySum, busyN float64
	for _, g := range r.s.gpus {
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
	res.Use = UseOf(res.Attempts)
	for _, j := range r.s.jobs {
		jr := JobResult{Name: j.Name, Template: j.Template, Outcome: j.final, Attempts: j.attempts, ExitCode: -1, Result: r.resultPath(j)}
		for _, a := range res.Attempts {
			if a.Job == j.Name {
				jr.ExitCode = a.ExitCode
			}
		}
		if !j.done {
			jr.Outcome = OutcomeCanceled
		}
		if jr.Outcome == OutcomeOK {
			res.Completed++
		}
		res.Jobs = append(res.Jobs, jr)
	}
	for _, a := range res.Attempts {
		switch a.Outcome {
		case OutcomeCapViolation:
			res.Violations++
		case OutcomeCollateral:
			res.Collateral++
		}
	}
	res.GPUEvents = r.wide.all()
	if ms := res.Makespan(); ms > 0 && len(res.GPUs) > 0 {
		res.JobsPerGPUHour = float64(res.Completed) / (ms.Hours() * float64(len(res.GPUs)))
	}
	perGPUTotals(res)
	res.ExclusiveEstimate = exclusiveEstimate(res)
	return res
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

func writeOutputs(res *Result, dir string) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ResultsFile), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, AttemptsFile))
	if err != nil {
		return fmt.Errorf("writing attempts: %w", err)
	}
	w := csv.NewWriter(f)
	_ = w.Write(CSVHeader)
	for _, a := range res.Attempts {
		action, contain := "", ""
		if v := a.Violation; v != nil {
			action = v.Action
			if !v.ContainedAt.IsZero() && !v.CrossedAt.IsZero() {
				contain = strconv.FormatFloat(v.ContainedAt.Sub(v.CrossedAt).Seconds(), 'f', 3, 64)
			}
		}
		_ = w.Write([]string{a.Job, a.Template, strconv.Itoa(a.Number), strconv.Itoa(a.GPUIndex), a.GPU,
			strconv.FormatUint(uint64(a.CapBytes), 10), strconv.FormatBool(a.Capped), strconv.FormatBool(a.WholeGPU),
			strconv.FormatBool(a.Probe), a.Start.UTC().Format(time.RFC3339Nano), a.End.UTC().Format(time.RFC3339Nano),
			strconv.FormatFloat(a.Duration().Seconds(), 'f', 3, 64), strconv.Itoa(a.ExitCode), a.Outcome,
			strconv.FormatUint(uint64(a.PeakBytes), 10), action, contain, a.Detail})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("writing attempts: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing attempts: %w", err)
	}
	html, err := renderReport(res)
	if err != nil {
		return fmt.Errorf("rendering the report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ReportFile), html, 0o644); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}
