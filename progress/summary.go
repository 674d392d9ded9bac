package progress

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/report"
)

// WriteSummary prints a result as a table of jobs and a few lines of totals.
func WriteSummary(w io.Writer, res *record.Result) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tTEMPLATE\tATTEMPTS\tOUTCOME\tGPU\tGUARANTEE\tBORROWED\tLIMIT\tPEAK\tTIME")
	for _, j := range res.Jobs {
		var last *record.Attempt
		for i := range res.Attempts {
			if res.Attempts[i].Job == j.Name {
				last = &res.Attempts[i]
			}
		}
		capS, borrowed, limit, peak, dur, g := "-", "-", "-", "-", "-", "-"
		if last != nil {
			g = fmt.Sprint(last.GPUIndex)
			peak = last.PeakBytes.String()
			dur = fmt.Sprintf("%.1fs", last.Duration().Seconds())
			capS, limit = last.CapLabel(), last.LimitLabel()
			if last.LimitBytes > last.CapBytes {
				borrowed = last.BorrowedBytes.String()
			}
		}
		tries := fmt.Sprint(j.Attempts)
		if j.MaxAttempts > 0 {
			tries = fmt.Sprintf("%d of %d", j.Attempts, j.MaxAttempts)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.Name, j.Template, tries, j.Outcome, g, capS, borrowed, limit, peak, dur)
	}
	tw.Flush()
	ms := res.Makespan()
	fmt.Fprintf(w, "\n%d of %d jobs completed in %.1fs on %d GPU(s): %.0f jobs per GPU-hour\n",
		res.Completed, len(res.Jobs), ms.Seconds(), len(res.GPUs), res.JobsPerGPUHour)
	if len(res.GPUs) > 1 {
		for _, g := range res.GPUs {
			fmt.Fprintf(w, "  GPU%d %s: %d jobs completed, %.0f jobs per GPU-hour, busy %.0f%%\n",
				g.Index, g.Model, g.Completed, g.JobsPerGPUHour, g.Busy*100)
		}
	}
	if res.ExclusiveEstimate > 0 && ms > 0 && res.Arm != record.ArmExclusive {
		fmt.Fprintf(w, "one job at a time would take about %.1fs (from this run's alone runs): %.2fx the throughput\n",
			res.ExclusiveEstimate.Seconds(), res.ExclusiveEstimate.Seconds()/ms.Seconds())
	}
	for _, a := range res.Attempts {
		if a.Outcome != record.OutcomeCapViolation {
			continue
		}
		how := a.Detail
		if v := a.Violation; v != nil && !v.ContainedAt.IsZero() && !v.CrossedAt.IsZero() {
			how = fmt.Sprintf("%s, contained %.2fs after crossing", v.Action, v.ContainedAt.Sub(v.CrossedAt).Seconds())
		}
		fmt.Fprintf(w, "cap violation contained: %s attempt %d (guarantee %s, %s); then %s\n", a.Job, a.Number, a.RoomLabel(), how, a.Next)
	}
	for _, a := range res.Attempts {
		if a.BorrowWait > 0 {
			fmt.Fprintf(w, "borrower waited: %s attempt %d waited %.1fs in all for memory to borrow (first at %.1fs); %s\n",
				a.Job, a.Number, a.BorrowWait.Seconds(), a.BorrowWaitAt, startedBeside(res, a))
		}
		if a.GuaranteeWait > 0 {
			fmt.Fprintf(w, "owner waited: %s attempt %d waited %.1fs in all for borrowers to give back its guarantee (first at %.1fs)\n",
				a.Job, a.Number, a.GuaranteeWait.Seconds(), a.GuaranteeWaitAt)
		}
	}
	for _, j := range res.Jobs {
		if j.Attempts > 1 || j.Outcome == record.OutcomeExhausted {
			line := fmt.Sprintf("ladder of %s: %s: %s", j.Name, j.Ladder, j.Outcome)
			if j.Reason != "" {
				line += " (" + j.Reason + ")"
			}
			fmt.Fprintln(w, line)
		}
	}
	writeCollateral(w, res)
	if u := res.Use; u.MeanRunning > 0 {
		alone := "no job held a GPU alone"
		if u.Whole > 0 {
			alone = fmt.Sprintf("some job held a GPU alone for %.1fs (re-runs alone: %d)", u.Whole.Seconds(), u.ReRuns)
		}
		fmt.Fprintf(w, "where the time went: %.1f jobs running on average; %s; %d probe(s) measured a template; at most 2 jobs running for %.1fs\n",
			u.MeanRunning, alone, u.Probes, u.Few.Seconds())
	}
	if len(res.GPUs) > 1 {
		fmt.Fprintf(w, "GPU busy %.0f%% of the run, mean of %d GPUs (%s backend)\n", res.BusyFraction*100, len(res.GPUs), res.Backend)
	} else {
		fmt.Fprintf(w, "GPU busy %.0f%% of the run (%s backend)\n", res.BusyFraction*100, res.Backend)
	}
	if res.OutDir != "" {
		fmt.Fprintf(w, "results: %s, %s, logs in %s\n", filepath.Join(res.OutDir, record.ResultsFile),
			filepath.Join(res.OutDir, record.AttemptsFile), filepath.Join(res.OutDir, "logs"))
		fmt.Fprintf(w, "report:  %s\n", filepath.Join(res.OutDir, report.File))
	}
}

// writeCollateral adds the GPU-wide events and the collateral failures to the run's summary.
func writeCollateral(w io.Writer, res *record.Result) {
	for _, e := range res.GPUEvents {
		end := "still marked at the end"
		if !e.End.IsZero() {
			end = fmt.Sprintf("healthy again after %.1fs", e.End.Sub(e.Start).Seconds())
		}
		fmt.Fprintf(w, "%s (%s)\n", e, end)
	}
	if res.Collateral == 0 {
		return
	}
	var jobs []string
	for _, a := range res.Attempts {
		if a.Outcome == record.OutcomeCollateral {
			jobs = append(jobs, a.Job)
		}
	}
	fmt.Fprintf(w, "collateral failures (a neighbour's stop under MPS, re-run): %d (%s)\n", res.Collateral, strings.Join(jobs, ", "))
}

// startedBeside names the attempts that started on a borrower's GPU between its first wait and
// its end: jobs placed on memory it may have been waiting for. The line said "nothing new
// started" until the H200's busy queue showed three jobs admitted during such a wait.
func startedBeside(res *record.Result, b record.Attempt) string {
	from := res.Start.Add(time.Duration(b.BorrowWaitAt * float64(time.Second)))
	var names []string
	for _, a := range res.Attempts {
		if a.GPU == b.GPU && a.Start.After(from) && a.Start.Before(b.End) {
			names = append(names, fmt.Sprintf("%s at %.1fs", a.Job, a.Start.Sub(res.Start).Seconds()))
		}
	}
	if len(names) == 0 {
		return fmt.Sprintf("nothing started on GPU%d from then to its end", b.GPUIndex)
	}
	return fmt.Sprintf("started on GPU%d from then to its end: %s", b.GPUIndex, strings.Join(names, ", "))
}
