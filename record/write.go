package record

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Output file names inside a run's results directory (runner.Options.OutDir).
const (
	ResultsFile  = "results.json"
	AttemptsFile = "attempts.csv"
	ReportFile   = "report.html"
)

// CSVHeader is the first row of attempts.csv.
// cap_bytes is the guarantee; limit_bytes and borrowed_at_peak_bytes are 0 for an attempt that
// could not borrow, borrow_wait_s how long it waited for memory to borrow; next is what the run
// did after a failed attempt (Attempt.Next); guarantee_wait_s how long it waited for borrowers to
// give back its guarantee (last, so the columns before keep their places).
var CSVHeader = []string{"job", "template", "attempt", "gpu_index", "gpu", "cap_bytes", "limit_bytes", "borrowed_at_peak_bytes",
	"capped", "whole_gpu", "probe", "start", "end", "duration_s", "exit_code", "outcome", "peak_bytes", "violation_action",
	"containment_s", "borrow_wait_s", "detail", "next", "guarantee_wait_s"}

// Write writes res as ResultsFile (all of it) and AttemptsFile (one row per attempt) into dir.
func Write(res *Result, dir string) error {
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
			strconv.FormatUint(uint64(a.CapBytes), 10), strconv.FormatUint(uint64(a.LimitBytes), 10),
			strconv.FormatUint(uint64(a.BorrowedBytes), 10), strconv.FormatBool(a.Capped), strconv.FormatBool(a.WholeGPU),
			strconv.FormatBool(a.Probe), a.Start.UTC().Format(time.RFC3339Nano), a.End.UTC().Format(time.RFC3339Nano),
			strconv.FormatFloat(a.Duration().Seconds(), 'f', 3, 64), strconv.Itoa(a.ExitCode), string(a.Outcome),
			strconv.FormatUint(uint64(a.PeakBytes), 10), action, contain,
			strconv.FormatFloat(a.BorrowWait.Seconds(), 'f', 3, 64), a.Detail, a.Next,
			strconv.FormatFloat(a.GuaranteeWait.Seconds(), 'f', 3, 64)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("writing attempts: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing attempts: %w", err)
	}
	return nil
}
