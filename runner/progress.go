package runner

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/report"
	"github.com/gpufrac/gpufrac/size"
)

// progress prints one line per event, and on a terminal a status line kept at the bottom.
type progress struct {
	w   io.Writer
	tty bool
	r   *run
	mu  sync.Mutex
	// shown is true while a status line is on screen.
	shown bool
	// published is when the progress was last written for gpufrac status, on the run's clock.
	published time.Time
	// held are the lines printed before begin (a dead run's reservations released, the ledger's
	// repairs): begin prints them under the header, whose first line says what GPU is used.
	held  []string
	begun bool
}

// IsTerminal reports whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newProgress(w io.Writer, r *run) *progress {
	return &progress{w: w, tty: IsTerminal(w), r: r}
}

// stamp is the time since the run started; a line printed while the run opens its ledger, before
// it starts, is at 0.
func (p *progress) stamp() string {
	var d time.Duration
	if !p.r.start.IsZero() {
		d = p.r.o.Now().Sub(p.r.start)
	}
	return fmt.Sprintf("[%6.1fs]", d.Seconds())
}

// line prints one event line above the status line.
func (p *progress) line(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
	l := fmt.Sprintf("%s %s\n", p.stamp(), fmt.Sprintf(format, args...))
	if !p.begun {
		p.held = append(p.held, l)
		return
	}
	fmt.Fprint(p.w, l)
}

// flushHeld prints the lines held for begin, for a run that fails before it begins: what they
// say happened all the same.
func (p *progress) flushHeld() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.printHeld()
}

func (p *progress) printHeld() {
	p.begun = true
	for _, l := range p.held {
		fmt.Fprint(p.w, l)
	}
	p.held = nil
}

func (p *progress) begin() {
	r := p.r
	kind := r.o.Backend.Kind()
	var gpus []string
	for _, g := range r.s.gpus {
		gr := r.gpus[g]
		gpus = append(gpus, fmt.Sprintf("GPU%d %s %s (budget %s)", gr.Index, gr.Model, gr.TotalBytes, gr.BudgetBytes))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if kind != "nvml" {
		fmt.Fprintf(p.w, "gpufrac run: %s GPU backend: no real GPU is used\n", strings.ToUpper(kind))
	}
	fmt.Fprintf(p.w, "gpufrac run: %d jobs, arm %s, mode %s, %s profiles, cap = %s\n",
		len(r.s.jobs), r.o.Arm, r.o.modeOf(), r.o.Profiles, r.o.Policy.CapFormula("peak"))
	fmt.Fprintf(p.w, "gpufrac run: %s\n", strings.Join(gpus, "; "))
	if r.fenceNote != "" {
		fmt.Fprintf(p.w, "gpufrac run: %s\n", r.fenceNote)
	}
	if r.borrowNote != "" {
		fmt.Fprintf(p.w, "gpufrac run: %s\n", r.borrowNote)
	}
	p.printHeld()
}

func (p *progress) started(a *active) {
	l := a.l
	what := "guarantee " + l.res.CapBytes.String()
	if !l.borrowing {
		what = "cap " + l.res.CapBytes.String()
	}
	switch {
	case l.probe && l.inPlace:
		span := "its whole run"
		if l.window > 0 {
			span = "its first " + l.window.String()
		}
		what = fmt.Sprintf("PROBE in place (protective cap %s) for %s to measure %q", l.res.CapBytes, span, l.job.Template)
		if l.borrowing {
			what = fmt.Sprintf("PROBE in place (a %s guarantee, borrowing the rest) for %s to measure %q", l.res.CapBytes, span, l.job.Template)
		}
	case l.probe && l.window > 0:
		what = fmt.Sprintf("PROBE alone for %s to measure %q", l.window, l.job.Template)
	case l.probe:
		what = fmt.Sprintf("PROBE alone: its whole run measures %q", l.job.Template)
	case l.whole && l.job.whole:
		what = "RE-RUN " + policy.Rung(policy.StepAlone, l.job.attempts, l.job.limit(), 0)
	case l.job.room > 0 && l.job.next.Kind == policy.StepRaise:
		what = "RE-RUN " + policy.Rung(policy.StepRaise, l.job.attempts, l.job.limit(), l.res.CapBytes)
	case l.whole:
		what = "whole GPU"
	case !l.capped:
		what = "no cap"
	}
	if l.borrowing && !l.probe {
		what += fmt.Sprintf(", may borrow up to %s", l.res.Limit())
	}
	p.line("%-8s %-20s GPU%d  %s", "start", l.job.Name, p.r.gpus[l.gpu].Index, what)
}

func (p *progress) finished(a *active, at record.Attempt) {
	tag := at.Outcome
	msg := fmt.Sprintf("peak %s in %.1fs", at.PeakBytes, at.Duration().Seconds())
	switch at.Outcome {
	case record.OutcomeProbe:
		tag = "probed"
		msg = fmt.Sprintf("peak %s in its first %s -> cap %s", at.PeakBytes, a.l.window, p.capFor(at.Template))
	case record.OutcomeOK:
		if at.Probe {
			msg += fmt.Sprintf(" -> %q measured: cap %s", at.Template, p.capFor(at.Template))
		}
	case record.OutcomeCapViolation:
		tag = "CAP"
		msg = fmt.Sprintf("broke its %s cap (peak %s)", at.CapBytes, at.PeakBytes)
		if v := at.Violation; v != nil {
			// The attempt's peak (the highest of the runner's and the watchdog's samples) is the
			// one figure the detail, attempts.csv and the report give too.
			msg = fmt.Sprintf("broke its %s cap at %s: %s", v.CapBytes, at.PeakBytes, v.Action)
			switch {
			case v.Action == enforcer.ActionOOMInProcess && at.LimitBytes > at.CapBytes:
				// A borrower is refused where more would reach into a neighbour's guarantee,
				// not at its own.
				msg = fmt.Sprintf("out of memory inside the job at peak %s: past its %s guarantee only other jobs' guarantees were left", at.PeakBytes, v.CapBytes)
				if at.BorrowWait > 0 {
					msg += fmt.Sprintf(" (it waited %.1fs in all for memory to come free)", at.BorrowWait.Seconds())
				}
			case v.Action == enforcer.ActionOOMInProcess:
				msg = fmt.Sprintf("hit its %s cap (%s): out of memory inside the job, peak %s", v.CapBytes, v.HeldBy, at.PeakBytes)
			case at.LimitBytes > at.CapBytes:
				// A borrower the watchdog stopped held more than its guarantee and its loans:
				// memory the fence never charged (a process without its token, a pool's slack).
				msg = fmt.Sprintf("held %s, past its %s guarantee and what the fence lent it (memory the fence never saw): %s", at.PeakBytes, v.CapBytes, v.Action)
			}
			if !v.ContainedAt.IsZero() && !v.CrossedAt.IsZero() {
				msg += fmt.Sprintf(", contained in %.2fs", v.ContainedAt.Sub(v.CrossedAt).Seconds())
			}
		} else {
			msg += ": " + at.Detail
		}
		if !at.WholeGPU {
			msg += "; " + neighbours(at)
		}
		msg += "; next: " + at.Next
	case record.OutcomeCollateral:
		tag = "COLLAT"
		msg = fmt.Sprintf("exit %d after %.1fs: %s (log %s); next: %s", at.ExitCode, at.Duration().Seconds(), at.Detail, at.Log, at.Next)
	case record.OutcomeFailed:
		tag = "FAILED"
		msg = fmt.Sprintf("exit %d after %.1fs: %s (log %s)", at.ExitCode, at.Duration().Seconds(), at.Detail, at.Log)
	}
	p.line("%-8s %-20s GPU%d  %s", tag, at.Job, at.GPUIndex, msg)
}

func (p *progress) capFor(t string) string {
	c, ok := p.r.s.capOf(t)
	if !ok {
		return "?"
	}
	return unitsLabel(p.r.o.Policy, c)
}

// unitsLabel says a cap as the ledger grants it, in whole units, and the formula's figure it
// was rounded up from: "3GiB (2.55GiB rounded up to 3 units of 1GiB)". A small footprint's cap
// is mostly the margin and the rounding, and this says so where the cap shows.
func unitsLabel(pol policy.Policy, c size.Bytes) string {
	u := pol.Units(c)
	granted := size.Bytes(u) * pol.UnitBytes
	if granted == c {
		return fmt.Sprintf("%s (%d units of %s)", c, u, pol.UnitBytes)
	}
	return fmt.Sprintf("%s (%s rounded up to %d units of %s)", granted, c, u, pol.UnitBytes)
}

// status redraws the terminal's status line and, about once a second, publishes the progress
// in the state directory for gpufrac status.
func (p *progress) status() {
	now := p.r.o.Now()
	due := now.Sub(p.published) >= time.Second
	if !p.tty && (p.r.o.StateDir == "" || !due) {
		return
	}
	r := p.r
	r.mu.Lock()
	perGPU := map[string]int{}
	used := map[string]size.Bytes{}
	for a := range r.active {
		perGPU[a.l.gpu]++
		a.mu.Lock()
		used[a.l.gpu] += a.now
		a.mu.Unlock()
	}
	r.mu.Unlock()
	if due {
		p.published = now
		p.publish(p.runStatus(perGPU, used))
	}
	if !p.tty {
		return
	}
	done, waiting := 0, 0
	for _, j := range r.s.jobs {
		switch {
		case j.done:
			done++
		case !j.running:
			waiting++
		}
	}
	var parts []string
	for _, st := range r.led.States() {
		if _, ok := r.gpus[st.UUID]; !ok {
			continue
		}
		parts = append(parts, fmt.Sprintf("GPU%d: %d running, using %s, guarantees %s of %s", st.Index, perGPU[st.UUID],
			used[st.UUID], st.ReservedBytes, st.BudgetBytes))
	}
	line := fmt.Sprintf("%s done %d/%d, waiting %d | %s", p.stamp(), done, len(r.s.jobs), waiting, strings.Join(parts, " | "))
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprint(p.w, "\r\033[K"+line)
	p.shown = true
}

func (p *progress) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}

// summary prints the table of jobs and the totals.
func (p *progress) summary(res *record.Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	WriteSummary(p.w, res)
}

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
			fmt.Fprintf(w, "borrower waited: %s attempt %d waited %.1fs for memory to borrow (from %.1fs), nothing new started on GPU%d meanwhile\n",
				a.Job, a.Number, a.BorrowWait.Seconds(), a.BorrowWaitAt, a.GPUIndex)
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
