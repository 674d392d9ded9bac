// Package runstatus is the progress file of a running `gpufrac run` (run.json in its state
// directory): the runner rewrites it about once a second and removes it when the run ends, and
// `gpufrac status`, another process, reads it. The ledger knows the reservations; this file says
// what the ledger cannot: the jobs still waiting, and why.
package runstatus

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// File is the progress file's name in the run's state directory.
const File = "run.json"

// Status is a running queue's progress.
type Status struct {
	PID       int        `json:"pid"`
	Queue     string     `json:"queue"`
	Arm       record.Arm `json:"arm"`
	OutDir    string     `json:"out_dir"`
	Start     time.Time  `json:"start"`
	UpdatedAt time.Time  `json:"updated_at"`
	Jobs      int        `json:"jobs"`
	Done      int        `json:"done"`
	Failed    int        `json:"failed"` // done, and the last attempt did not end ok
	Running   int        `json:"running"`
	Waiting   int        `json:"waiting"`
	Waits     []Wait     `json:"waits"`
	GPUs      []GPU      `json:"gpus"`
	// Attempts are the attempts running now, each with its room; Stopped the jobs the ladder
	// stopped, with why.
	Attempts []Attempt `json:"attempts"`
	Stopped  []Stopped `json:"stopped"`
}

// Attempt is a running attempt: its guarantee, the most it may hold (its limit, the guarantee
// when it cannot borrow), what it holds now and what of that is borrowed.
type Attempt struct {
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

// Stopped is a job the ladder stopped (exhausted).
type Stopped struct {
	Job    string `json:"job"`
	Reason string `json:"reason"`
}

// Wait is the waiting jobs that wait for one reason; Jobs names the first few (Named).
type Wait struct {
	Reason string   `json:"reason"`
	Count  int      `json:"count"`
	Jobs   []string `json:"jobs"`
}

// Named is how many waiting jobs a Wait names.
const Named = 5

// GPU is one GPU of a running queue.
type GPU struct {
	Index         int        `json:"index"`
	Running       int        `json:"running"`
	UsedBytes     size.Bytes `json:"used_bytes"`
	ReservedBytes size.Bytes `json:"reserved_bytes"`
	BudgetBytes   size.Bytes `json:"budget_bytes"`
	// BorrowedBytes is what its jobs hold past their guarantees now (ReservedBytes counts the
	// guarantees only).
	BorrowedBytes size.Bytes `json:"borrowed_bytes"`
}

// Write replaces the progress file in dir whole, so a reader never sees half a file.
func Write(dir string, st Status) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, File+".tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, File))
}

// Remove deletes the progress file of a run that ended: `gpufrac status` shows no progress of it.
func Remove(dir string) { _ = os.Remove(filepath.Join(dir, File)) }

// Read reads the progress a `gpufrac run` keeps in dir; ok is false when there is none.
func Read(dir string) (Status, bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, File))
	if errors.Is(err, fs.ErrNotExist) {
		return Status{}, false, nil
	}
	if err != nil {
		return Status{}, false, fmt.Errorf("reading the run's progress: %w", err)
	}
	var st Status
	if err := json.Unmarshal(data, &st); err != nil {
		return Status{}, false, fmt.Errorf("reading the run's progress %s: %w", filepath.Join(dir, File), err)
	}
	return st, true, nil
}

// String says a GPU of a running queue for people, as `gpufrac status` shows it: what its jobs
// use, the guarantees held of the budget, and what of the use is borrowed past them.
func (g GPU) String() string {
	return fmt.Sprintf("GPU%d: %d running, using %s, guarantees %s of %s, borrowed %s", g.Index, g.Running, g.UsedBytes,
		g.ReservedBytes, g.BudgetBytes, g.BorrowedBytes)
}

// String says a running attempt for people: "leaker-1 on GPU0, attempt 2 of 3: guarantee 46GiB,
// limit 78GiB, using 49.9GiB (3.9GiB borrowed)".
func (a Attempt) String() string {
	s := fmt.Sprintf("%s on GPU%d, attempt %d of %d: guarantee %s, limit %s, using %s", a.Job, a.GPUIndex, a.Attempt, a.MaxAttempts,
		a.Room, a.LimitBytes, a.UsedBytes)
	if a.BorrowedBytes > 0 {
		s += fmt.Sprintf(" (%s borrowed)", a.BorrowedBytes)
	}
	return s
}
