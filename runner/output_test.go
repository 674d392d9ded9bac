package runner

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// A results directory that fills before the run writes its outputs: the run fails saying which
// file and why, and still prints its summary, the only record left of what its jobs did, without
// the paths of outputs that are not there.
func TestRunOnAFullResultsDirStillSummarises(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full to stand in for a full disk")
	}
	sim := newSim(t, "H100=80GiB")
	o := testOptions(t, sim, record.ArmPacked)
	var progress bytes.Buffer
	o.Progress = &progress
	if err := os.Symlink("/dev/full", filepath.Join(o.OutDir, record.ResultsFile+".tmp")); err != nil {
		t.Fatal(err)
	}
	q := queue.Queue{Jobs: []queue.Job{simJob(t, "a", "t", "--peak", "1GiB", "--hold", "50ms")}}
	res, err := Run(context.Background(), q, o)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), record.ResultsFile) {
		t.Fatalf("Run: %v; want ENOSPC naming %s", err, record.ResultsFile)
	}
	if res == nil || res.Completed != 1 {
		t.Fatalf("result %+v: want the job's completion still returned", res)
	}
	out := progress.String()
	if !strings.Contains(out, "1 of 1 jobs completed") || !strings.Contains(out, "JOB ") {
		t.Errorf("no summary after the outputs failed:\n%s", out)
	}
	if strings.Contains(out, "results: ") || strings.Contains(out, "report: ") {
		t.Errorf("the summary points at outputs that were not written:\n%s", out)
	}
}

// A run into a results directory that an earlier run used says so before it starts, and that it
// runs the queue from its first job: it does not resume what the earlier run left, it replaces
// it. A fresh directory says nothing.
func TestRunSaysItReplacesAnEarlierRunsOutputs(t *testing.T) {
	sim := newSim(t, "H100=80GiB")
	q := queue.Queue{Jobs: []queue.Job{simJob(t, "a", "t", "--peak", "1GiB", "--hold", "50ms")}}
	o := testOptions(t, sim, record.ArmPacked)
	killed := testOptions(t, sim, record.ArmPacked).OutDir // a killed run leaves logs, no results
	if err := os.MkdirAll(filepath.Join(killed, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(killed, "logs", "a.1.log"), []byte("half a run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name, out, want string
	}{
		{"fresh", o.OutDir, ""},
		{"again", o.OutDir, "holds an earlier run's outputs (1 of 1 jobs completed, ended "},
		{"after a killed run", killed, "holds the logs of an earlier run that wrote no results"},
	} {
		var progress bytes.Buffer
		o.Progress, o.OutDir = &progress, step.out
		runAll(t, q, o)
		said := strings.Contains(progress.String(), "this run does not resume it") &&
			strings.Contains(progress.String(), "earlier logs this run does not write again stay in logs/")
		if said != (step.want != "") || !strings.Contains(progress.String(), step.want) {
			t.Errorf("%s: want %q said (%v):\n%s", step.name, step.want, step.want != "", progress.String())
		}
	}
}

// A job's result is named in results.json and linked from the report only when this run wrote
// it: a re-run into the directory of an earlier run, where a job now fails or writes nothing,
// once named and linked the earlier run's file as this run's result.
func TestResultNamesOnlyAFileThisRunWrote(t *testing.T) {
	sim := newSim(t, "H100=80GiB")
	o := testOptions(t, sim, record.ArmPacked)
	q := queue.Queue{
		Jobs: []queue.Job{
			simJob(t, "writes", "t", "--peak", "1GiB", "--hold", "50ms", "--result", "$GPUFRAC_RESULT"),
			{Name: "fails", Template: "t", Command: []string{"sh", "-c", "exit 3"}},
			{Name: "silent", Template: "t", Command: []string{"true"}},
		},
		Templates: map[string]queue.TemplateSpec{"t": {Name: "t", PeakBytes: size.GiB}},
	}
	for i := range q.Jobs {
		q.Jobs[i].Result = filepath.Join("results", q.Jobs[i].Name+".json")
		// What an earlier run into the same directory left.
		p := filepath.Join(o.OutDir, q.Jobs[i].Result)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(`{"earlier": true}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res := runQueue(t, q, o)
	page, err := os.ReadFile(filepath.Join(o.OutDir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range res.Jobs {
		named := j.Name == "writes"
		atts := attemptsOf(res, j.Name)
		last := atts[len(atts)-1]
		if (j.Result != "") != named || (last.Result != "") != named {
			t.Errorf("%s (%s): result %q, its last attempt's %q; want a result named: %v", j.Name, j.Outcome, j.Result, last.Result, named)
		}
		link := `href="results/` + j.Name + `.json"`
		if strings.Contains(string(page), link) != named {
			t.Errorf("%s (%s): report links %s: %v, want %v", j.Name, j.Outcome, link, !named, named)
		}
	}
}
