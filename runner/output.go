package runner

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

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
		jr := record.JobResult{Name: j.Name, Template: j.Template, Outcome: j.Final, Attempts: j.Attempts, ExitCode: -1,
			MaxAttempts: j.Limit(), Reason: j.Reason, Ladder: record.Ladder(res.Attempts, j.Name)}
		for _, a := range res.Attempts {
			if a.Job == j.Name {
				// The last attempt's result: it names the file only if that attempt wrote it.
				jr.ExitCode, jr.Result = a.ExitCode, a.Result
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

// finishOutputs writes the run's outputs and prints its summary. Where the outputs could not be
// written (a full disk), the summary is the only record of what the jobs did, so it is printed
// still, without the paths of files that are not there.
func (r *run) finishOutputs(res *record.Result) error {
	err := writeOutputs(res, r.o.OutDir)
	if err != nil {
		shown := *res
		shown.OutDir = ""
		r.prog.Summary(&shown)
		return err
	}
	r.prog.Summary(res)
	return nil
}

// foreignOutputs refuses a results directory holding a results.json, attempts.csv or
// report.html that no gpufrac run wrote: the run replaces those files, and `--out .` in a
// project with a results.json of its own lost it, called "an earlier run's outputs (0 of 0
// jobs completed)". An earlier run's are replaced as before (earlierOutputs says so).
func foreignOutputs(dir string) error {
	foreign := func(name, why string) error {
		return fmt.Errorf("%w: results directory %s: %s is not a gpufrac run's (%s), and this run would replace it; choose another --out, or move it aside",
			ErrOptions, dir, filepath.Join(dir, name), why)
	}
	if data, err := os.ReadFile(filepath.Join(dir, record.ResultsFile)); err == nil {
		var prev record.Result
		if err := json.Unmarshal(data, &prev); err != nil {
			return foreign(record.ResultsFile, err.Error())
		}
		if prev.Arm == "" || prev.Start.IsZero() {
			return foreign(record.ResultsFile, "no arm or start of a run in it")
		}
	}
	if data, err := readHead(filepath.Join(dir, record.AttemptsFile)); err == nil {
		// The first columns are as old as the file; later ones were added at its end.
		if want := strings.Join(record.CSVHeader[:3], ",") + ","; !strings.HasPrefix(string(data), want) {
			return foreign(record.AttemptsFile, fmt.Sprintf("its first line does not start %q", want))
		}
	}
	if data, err := readHead(filepath.Join(dir, record.ReportFile)); err == nil && !strings.Contains(string(data), "<title>gpufrac run") {
		return foreign(record.ReportFile, "no gpufrac run title in it")
	}
	return nil
}

// readHead is the first KiB of the file at p: enough to tell whose it is.
func readHead(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, 1024)
	n, err := io.ReadFull(f, b)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		err = nil
	}
	return b[:n], err
}

// earlierOutputs says what an earlier run left in the results directory dir, which this run
// replaces, file by file: a run does not resume one that was stopped or killed, it runs its queue
// from the first job again, and a user who gave the same --out should not find that out from
// overwritten logs. Empty when dir holds nothing of a run.
func earlierOutputs(dir string) string {
	// Logs are named by job and attempt: an earlier run's that this one does not write again
	// (an attempt it no longer needs) stay, and saying "replaces them" left them to be read as
	// this run's.
	const again = "this run does not resume it: it runs the queue from its first job and replaces its results, attempts and report; " +
		"earlier logs this run does not write again stay in logs/ (the report links only this run's)"
	if data, err := os.ReadFile(filepath.Join(dir, record.ResultsFile)); err == nil {
		var prev record.Result
		if err := json.Unmarshal(data, &prev); err != nil {
			return fmt.Sprintf("%s holds an earlier run's outputs, its %s unreadable (%v); %s", dir, record.ResultsFile, err, again)
		}
		return fmt.Sprintf("%s holds an earlier run's outputs (%d of %d jobs completed, ended %s); %s", dir, prev.Completed,
			len(prev.Jobs), prev.End.Local().Format(time.DateTime), again)
	}
	// Logs without results: a run killed outright, which writes its results only at its end.
	if logs, _ := os.ReadDir(filepath.Join(dir, "logs")); len(logs) > 0 {
		return fmt.Sprintf("%s holds the logs of an earlier run that wrote no results (it was killed outright); %s", dir, again)
	}
	return ""
}
