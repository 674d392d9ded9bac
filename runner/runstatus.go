package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// RunStatusFile is where a running `gpufrac run` keeps its progress in its state directory,
// for `gpufrac status` (another process) to show: the ledger knows the reservations, not the
// jobs still waiting or why.
const RunStatusFile = "run.json"

// RunStatus is a running queue's progress, rewritten about once a second and removed when the
// run ends.
type RunStatus struct {
	PID       int         `json:"pid"`
	Queue     string      `json:"queue"`
	Arm       record.Arm  `json:"arm"`
	OutDir    string      `json:"out_dir"`
	Start     time.Time   `json:"start"`
	UpdatedAt time.Time   `json:"updated_at"`
	Jobs      int         `json:"jobs"`
	Done      int         `json:"done"`
	Failed    int         `json:"failed"` // done, and the last attempt did not end ok
	Running   int         `json:"running"`
	Waiting   int         `json:"waiting"`
	Waits     []WaitGroup `json:"waits"`
	GPUs      []RunGPU    `json:"gpus"`
	// Attempts are the attempts running now, each with its room; Stopped the jobs the ladder
	// stopped, with why.
	Attempts []RunAttempt `json:"attempts"`
	Stopped  []RunStopped `json:"stopped"`
}

// RunAttempt is a running attempt: its guarantee, the most it may hold (its limit, the
// guarantee when it cannot borrow), what it holds now and what of that is borrowed.
type RunAttempt struct {
	Job            string     `json:"job"`
	GPUIndex       int        `json:"gpu_index"`
	Attempt        int        `json:"attempt"`
	MaxAttempts    int        `json:"max_attempts"`
	Room           string     `json:"room"` // "8GiB", "whole GPU", as the summary's GUARANTEE column
	GuaranteeBytes size.Bytes `json:"guarantee_bytes"`
	LimitBytes     size.Bytes `json:"limit_bytes"`
	UsedBytes      size.Bytes `json:"used_bytes"`
	BorrowedBytes  size.Bytes `json:"borrowed_bytes"`
}

// RunStopped is a job the ladder stopped (exhausted).
type RunStopped struct {
	Job    string `json:"job"`
	Reason string `json:"reason"`
}

// WaitGroup is the waiting jobs that wait for one reason; Jobs names the first few.
type WaitGroup struct {
	Reason string   `json:"reason"`
	Count  int      `json:"count"`
	Jobs   []string `json:"jobs"`
}

// RunGPU is one GPU of a running queue.
type RunGPU struct {
	Index         int        `json:"index"`
	Running       int        `json:"running"`
	UsedBytes     size.Bytes `json:"used_bytes"`
	ReservedBytes size.Bytes `json:"reserved_bytes"`
	BudgetBytes   size.Bytes `json:"budget_bytes"`
	// BorrowedBytes is what its jobs hold past their guarantees now (ReservedBytes counts the
	// guarantees only).
	BorrowedBytes size.Bytes `json:"borrowed_bytes"`
}

// waitNamed is how many waiting jobs a reason names.
const waitNamed = 5

// waitReason says what a waiting job waits for, in the scheduler's terms.
func (s *sched) waitReason(j *jobState, maxBudget size.Bytes) string {
	kind, c := s.need(j, maxBudget)
	switch kind {
	case needWait:
		return fmt.Sprintf("the probe of its template %q to finish", j.Template)
	case needCapped:
		if c == 0 {
			return "half a GPU's budget to fit beside the jobs running"
		}
		if j.room > 0 {
			return fmt.Sprintf("room for %s beside the jobs running", j.next.Head())
		}
		return fmt.Sprintf("room for its %s guarantee beside the jobs running", c)
	case needWhole:
		if j.whole {
			return "a GPU to itself (" + j.next.Head() + ", after a broken cap: once the rest of the queue is admitted)"
		}
		return "a GPU to itself"
	case needProbe:
		return fmt.Sprintf("a GPU to probe its template %q", j.Template)
	default:
		return "a free slot"
	}
}

// runStatus gathers the progress; it runs on the run's main loop, like the scheduler.
func (p *progress) runStatus(perGPU map[string]int, used map[string]size.Bytes) RunStatus {
	r := p.r
	st := RunStatus{PID: os.Getpid(), Queue: r.q.Path, Arm: r.o.Arm, OutDir: r.o.OutDir, Start: r.start,
		UpdatedAt: r.o.Now().UTC(), Jobs: len(r.s.jobs), Waits: []WaitGroup{}, GPUs: []RunGPU{}, Attempts: []RunAttempt{}, Stopped: []RunStopped{}}
	borrowed := map[int]size.Bytes{}
	r.mu.Lock()
	for a := range r.active {
		a.mu.Lock()
		ra := RunAttempt{Job: a.l.job.Name, GPUIndex: a.a.GPUIndex, Attempt: a.a.Number, MaxAttempts: a.l.job.limit(), Room: a.a.CapLabel(),
			GuaranteeBytes: a.l.res.CapBytes, LimitBytes: a.l.res.Limit(), UsedBytes: a.now}
		a.mu.Unlock()
		if a.l.borrowing && ra.UsedBytes > ra.GuaranteeBytes {
			ra.BorrowedBytes = ra.UsedBytes - ra.GuaranteeBytes
			borrowed[ra.GPUIndex] += ra.BorrowedBytes
		}
		st.Attempts = append(st.Attempts, ra)
	}
	r.mu.Unlock()
	slices.SortFunc(st.Attempts, func(a, b RunAttempt) int { return strings.Compare(a.Job, b.Job) })
	var maxBudget size.Bytes
	for _, g := range r.led.States() {
		if _, ok := r.gpus[g.UUID]; !ok {
			continue
		}
		maxBudget = max(maxBudget, g.BudgetBytes)
		st.GPUs = append(st.GPUs, RunGPU{Index: g.Index, Running: perGPU[g.UUID], UsedBytes: used[g.UUID],
			ReservedBytes: g.ReservedBytes, BudgetBytes: g.BudgetBytes, BorrowedBytes: borrowed[g.Index]})
	}
	for _, j := range r.s.jobs {
		switch {
		case j.done:
			st.Done++
			if j.final != record.OutcomeOK {
				st.Failed++
			}
			if j.final == record.OutcomeExhausted {
				st.Stopped = append(st.Stopped, RunStopped{Job: j.Name, Reason: j.reason})
			}
		case j.running:
			st.Running++
		default:
			st.Waiting++
			why := r.s.waitReason(j, maxBudget)
			i := slices.IndexFunc(st.Waits, func(w WaitGroup) bool { return w.Reason == why })
			if i < 0 {
				st.Waits = append(st.Waits, WaitGroup{Reason: why, Jobs: []string{}})
				i = len(st.Waits) - 1
			}
			st.Waits[i].Count++
			if len(st.Waits[i].Jobs) < waitNamed {
				st.Waits[i].Jobs = append(st.Waits[i].Jobs, j.Name)
			}
		}
	}
	return st
}

// publish writes the progress into the state directory, replacing the last one whole so a
// reader never sees half a file. A run without a state directory publishes nothing.
func (p *progress) publish(st RunStatus) {
	dir := p.r.o.StateDir
	if dir == "" {
		return
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return
	}
	tmp := filepath.Join(dir, RunStatusFile+".tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		p.r.log.Debug("writing the run's progress", "error", err)
		return
	}
	if err := os.Rename(tmp, filepath.Join(dir, RunStatusFile)); err != nil {
		p.r.log.Debug("writing the run's progress", "error", err)
	}
}

// unpublish removes the progress when the run ends.
func (p *progress) unpublish() {
	if dir := p.r.o.StateDir; dir != "" {
		_ = os.Remove(filepath.Join(dir, RunStatusFile))
	}
}

// ReadRunStatus reads the progress a `gpufrac run` keeps in dir; ok is false when there is none.
func ReadRunStatus(dir string) (RunStatus, bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, RunStatusFile))
	if errors.Is(err, fs.ErrNotExist) {
		return RunStatus{}, false, nil
	}
	if err != nil {
		return RunStatus{}, false, fmt.Errorf("reading the run's progress: %w", err)
	}
	var st RunStatus
	if err := json.Unmarshal(data, &st); err != nil {
		return RunStatus{}, false, fmt.Errorf("reading the run's progress %s: %w", filepath.Join(dir, RunStatusFile), err)
	}
	return st, true, nil
}

// String says a GPU of a running queue for people, as `gpufrac status` shows it: what its jobs
// use, the guarantees held of the budget, and what of the use is borrowed past them.
func (g RunGPU) String() string {
	return fmt.Sprintf("GPU%d: %d running, using %s, guarantees %s of %s, borrowed %s", g.Index, g.Running, g.UsedBytes,
		g.ReservedBytes, g.BudgetBytes, g.BorrowedBytes)
}

// String says a running attempt for people: "leaker-1 on GPU0, attempt 2 of 3: guarantee 46GiB,
// limit 78GiB, using 49.9GiB (3.9GiB borrowed)".
func (a RunAttempt) String() string {
	s := fmt.Sprintf("%s on GPU%d, attempt %d of %d: guarantee %s, limit %s, using %s", a.Job, a.GPUIndex, a.Attempt, a.MaxAttempts,
		a.Room, a.LimitBytes, a.UsedBytes)
	if a.BorrowedBytes > 0 {
		s += fmt.Sprintf(" (%s borrowed)", a.BorrowedBytes)
	}
	return s
}
