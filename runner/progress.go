package runner

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/progress"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/runstatus"
	"github.com/gpufrac/gpufrac/size"
)

// since is the time since the run started; a line printed while the run opens its ledger,
// before it starts, is at 0.
func (r *run) since() time.Duration {
	if r.start.IsZero() {
		return 0
	}
	return r.o.Now().Sub(r.start)
}

// header is what the run's first lines say: the backend, the rules, the GPUs, the fence and
// borrowing.
func (r *run) header() []string {
	var h []string
	if kind := r.o.Backend.Kind(); kind != "nvml" {
		h = append(h, strings.ToUpper(kind)+" GPU backend: no real GPU is used")
	}
	h = append(h, fmt.Sprintf("%d jobs, arm %s, mode %s, %s profiles, cap = %s",
		len(r.s.Jobs()), r.o.Arm, r.o.modeOf(), r.o.Profiles, r.o.Policy.CapFormula("peak")))
	var gpus []string
	for _, g := range r.s.GPUs() {
		gr := r.gpus[g]
		gpus = append(gpus, fmt.Sprintf("GPU%d %s %s (budget %s)", gr.Index, gr.Model, gr.TotalBytes, gr.BudgetBytes))
	}
	h = append(h, strings.Join(gpus, "; "))
	for _, note := range []string{r.fenceNote, r.borrowNote, r.stageNote, r.probeNote, r.probeCapNote} {
		if note != "" {
			h = append(h, note)
		}
	}
	return h
}

// started prints an attempt's start.
func (r *run) started(a *active) {
	l := a.l
	s := progress.Start{Job: l.Job.Name, Template: l.Job.Template, GPUIndex: r.gpus[l.GPU].Index, Cap: l.Res.CapBytes, Limit: l.Res.Limit(),
		Capped: l.Capped, Whole: l.Whole, Borrowing: l.Borrowing, Probe: l.Probe, InPlace: l.InPlace, Window: l.Window, Staged: l.Res.StagedFor}
	switch {
	case l.Whole && l.Job.Whole:
		s.ReRun = policy.Rung(policy.StepAlone, l.Job.Attempts, l.Job.Limit(), 0)
	case l.Job.Room > 0 && l.Job.Next.Kind == policy.StepRaise:
		s.ReRun = policy.Rung(policy.StepRaise, l.Job.Attempts, l.Job.Limit(), l.Res.CapBytes)
	}
	r.prog.Started(s)
}

// capLabel is the cap template t's jobs get now, as the ledger grants it.
func (r *run) capLabel(t string) string {
	c, ok := r.s.CapOf(t)
	if !ok {
		return "?"
	}
	return progress.UnitsLabel(r.o.Policy, c)
}

// status redraws the terminal's status line and, about once a second, publishes the progress
// in the state directory for gpufrac status.
func (r *run) status() {
	now := r.o.Now()
	due := now.Sub(r.published) >= time.Second
	if !r.prog.TTY() && (r.o.StateDir == "" || !due) {
		return
	}
	r.mu.Lock()
	perGPU := map[string]int{}
	used, borrowed := map[string]size.Bytes{}, map[string]size.Bytes{}
	for a := range r.active {
		perGPU[a.l.GPU]++
		a.mu.Lock()
		used[a.l.GPU] += a.now
		if a.l.Borrowing && a.now > a.l.Res.CapBytes {
			borrowed[a.l.GPU] += a.now - a.l.Res.CapBytes
		}
		a.mu.Unlock()
	}
	r.mu.Unlock()
	if due && r.o.StateDir != "" {
		r.published = now
		if err := runstatus.Write(r.o.StateDir, r.runStatus(perGPU, used)); err != nil {
			r.log.Debug("writing the run's progress", "error", err)
		}
	}
	if !r.prog.TTY() {
		return
	}
	done, waiting := 0, 0
	for _, j := range r.s.Jobs() {
		switch {
		case j.Done:
			done++
		case !j.Running:
			waiting++
		}
	}
	var parts []string
	for _, st := range r.led.States() {
		if _, ok := r.gpus[st.UUID]; !ok {
			continue
		}
		// The words of gpufrac status: use above the guarantees is what borrowers borrow.
		g := runstatus.GPU{Index: st.Index, Running: perGPU[st.UUID], UsedBytes: used[st.UUID], ReservedBytes: st.ReservedBytes,
			BudgetBytes: st.BudgetBytes, BorrowedBytes: borrowed[st.UUID]}
		parts = append(parts, g.String())
	}
	r.prog.Status(fmt.Sprintf("done %d/%d, waiting %d | %s", done, len(r.s.Jobs()), waiting, strings.Join(parts, " | ")))
}

// runStatus gathers the progress; it runs on the run's main loop, like the scheduler.
func (r *run) runStatus(perGPU map[string]int, used map[string]size.Bytes) runstatus.Status {
	st := runstatus.Status{PID: os.Getpid(), Queue: r.q.Path, Arm: r.o.Arm, OutDir: r.o.OutDir, Start: r.start, UpdatedAt: r.o.Now().UTC(),
		Jobs: len(r.s.Jobs()), Waits: []runstatus.Wait{}, GPUs: []runstatus.GPU{}, Attempts: []runstatus.Attempt{}, Stopped: []runstatus.Stopped{}}
	borrowed := map[int]size.Bytes{}
	r.mu.Lock()
	for a := range r.active {
		a.mu.Lock()
		ra := runstatus.Attempt{Job: a.l.Job.Name, GPUIndex: a.a.GPUIndex, Attempt: a.a.Number, MaxAttempts: a.l.Job.Limit(), Room: a.a.CapLabel(),
			GuaranteeBytes: a.l.Res.CapBytes, LimitBytes: a.l.Res.Limit(), UsedBytes: a.now}
		a.mu.Unlock()
		if a.l.Borrowing && ra.UsedBytes > ra.GuaranteeBytes {
			ra.BorrowedBytes = ra.UsedBytes - ra.GuaranteeBytes
			borrowed[ra.GPUIndex] += ra.BorrowedBytes
		}
		st.Attempts = append(st.Attempts, ra)
	}
	r.mu.Unlock()
	slices.SortFunc(st.Attempts, func(a, b runstatus.Attempt) int { return strings.Compare(a.Job, b.Job) })
	var maxBudget size.Bytes
	for _, g := range r.led.States() {
		if _, ok := r.gpus[g.UUID]; !ok {
			continue
		}
		maxBudget = max(maxBudget, g.BudgetBytes)
		st.GPUs = append(st.GPUs, runstatus.GPU{Index: g.Index, Running: perGPU[g.UUID], UsedBytes: used[g.UUID],
			ReservedBytes: g.ReservedBytes, BudgetBytes: g.BudgetBytes, BorrowedBytes: borrowed[g.Index]})
	}
	for _, j := range r.s.Jobs() {
		switch {
		case j.Done:
			st.Done++
			if j.Final != record.OutcomeOK {
				st.Failed++
			}
			if j.Final == record.OutcomeExhausted {
				st.Stopped = append(st.Stopped, runstatus.Stopped{Job: j.Name, Reason: j.Reason})
			}
		case j.Running:
			st.Running++
		default:
			st.Waiting++
			why := r.s.WaitReason(j, maxBudget)
			i := slices.IndexFunc(st.Waits, func(w runstatus.Wait) bool { return w.Reason == why })
			if i < 0 {
				st.Waits = append(st.Waits, runstatus.Wait{Reason: why, Jobs: []string{}})
				i = len(st.Waits) - 1
			}
			st.Waits[i].Count++
			if len(st.Waits[i].Jobs) < runstatus.Named {
				st.Waits[i].Jobs = append(st.Waits[i].Jobs, j.Name)
			}
		}
	}
	return st
}
