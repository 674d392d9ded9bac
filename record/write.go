package record

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Output file names inside a run's results directory (runner.Options.OutDir).
const (
	ResultsFile  = "results.json"
	AttemptsFile = "attempts.csv"
	ReportFile   = "report.html"
)

// Within is p relative to dir, and whether p is dir or lies under it (both absolute, or both
// relative): whether a path named in a queue file lands in a run's results directory.
func Within(dir, p string) (string, bool) {
	rel, err := filepath.Rel(dir, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	return rel, true
}

// CSVHeader is the first row of attempts.csv.
// cap_bytes is the guarantee; limit_bytes and borrowed_at_peak_bytes are 0 for an attempt that
// could not borrow, borrow_wait_s how long it waited for memory to borrow; next is what the run
// did after a failed attempt (Attempt.Next); guarantee_wait_s how long it waited for borrowers to
// give back its guarantee (last, so the columns before keep their places).
var CSVHeader = []string{"job", "template", "attempt", "gpu_index", "gpu", "cap_bytes", "limit_bytes", "borrowed_at_peak_bytes",
	"capped", "whole_gpu", "probe", "start", "end", "duration_s", "exit_code", "outcome", "peak_bytes", "violation_action",
	"containment_s", "borrow_wait_s", "detail", "next", "guarantee_wait_s"}

// Write writes res as ResultsFile (all of it) and AttemptsFile (one row per attempt) into dir.
// Both are written whole before either replaces what was there (writeTemp): a full disk, or a
// run killed while it writes, leaves the files that were there before (an earlier run's in the
// same directory) or none, never a truncated one that reads as a damaged result, nor one run's
// results beside another's attempts.
func Write(res *Result, dir string) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	results, err := writeTemp(filepath.Join(dir, ResultsFile), func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	})
	if err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	attempts, err := writeTemp(filepath.Join(dir, AttemptsFile), func(f io.Writer) error {
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
		return w.Error()
	})
	if err != nil {
		_ = os.Remove(results)
		return fmt.Errorf("writing attempts: %w", err)
	}
	for _, tmp := range []string{attempts, results} {
		if err := os.Rename(tmp, strings.TrimSuffix(tmp, TempSuffix)); err != nil {
			_ = os.Remove(results)
			_ = os.Remove(attempts)
			return fmt.Errorf("writing results: %w", err)
		}
	}
	return nil
}

// TempSuffix names the file an output is written to before it replaces the output. It is
// exported because those files are the run's outputs too: a queue may not name one as a result.
const TempSuffix = ".tmp"

// writeTemp writes what path will hold to a temp file beside it and syncs it (a file system out
// of room may say so only then); the caller renames it over path, which within a directory is
// atomic. A temp file that could not be completed is removed. It returns the temp file's path.
func writeTemp(path string, write func(io.Writer) error) (string, error) {
	tmp := path + TempSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return "", err
	}
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}
