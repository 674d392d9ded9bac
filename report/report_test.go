package report

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// bigResult is a queue of n jobs of six templates run six at a time on one GPU, each with a
// dozen memory samples, and one failure in every thousand.
func bigResult(n int) *record.Result {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g := record.GPUResult{UUID: "GPU-0", Model: "H100", TotalBytes: 80 * size.GiB, BudgetBytes: 78 * size.GiB, Mode: "isolated"}
	res := &record.Result{Arm: record.ArmPacked, Backend: "simulated", Policy: policy.Default(), Start: t0, GPUs: []record.GPUResult{g}, OutDir: "/out"}
	for i := 0; i < n; i++ {
		start := t0.Add(time.Duration(i/6) * 10 * time.Second)
		a := record.Attempt{Job: fmt.Sprintf("job-%05d", i), Template: fmt.Sprintf("tmpl-%d", i%6), Number: 1, GPU: g.UUID,
			CapBytes: 12 * size.GiB, Capped: true, Start: start, End: start.Add(9 * time.Second), Outcome: record.OutcomeOK,
			PeakBytes: 10 * size.GiB, Log: fmt.Sprintf("logs/job-%05d.1.log", i)}
		if i%1000 == 999 {
			a.Outcome, a.ExitCode = record.OutcomeFailed, 1
		}
		for k := 0; k < 12; k++ {
			a.Samples = append(a.Samples, record.MemSample{T: start.Sub(t0).Seconds() + float64(k)*0.75, Bytes: size.Bytes(k) * size.GiB})
		}
		res.Attempts = append(res.Attempts, a)
		res.Jobs = append(res.Jobs, record.JobResult{Name: a.Job, Template: a.Template, Outcome: a.Outcome, Attempts: 1})
	}
	return res
}

// A 10,000-job queue makes a page a browser opens at once: lanes grouped by template, a
// bounded table, every failure still listed.
func TestReportOfABigQueueStaysSmall(t *testing.T) {
	res := bigResult(10_000)
	page, err := Render(res)
	if err != nil {
		t.Fatal(err)
	}
	s := string(page)
	if len(page) > 1<<20 {
		t.Errorf("report of 10,000 jobs is %d bytes, want at most 1 MiB", len(page))
	}
	if !strings.Contains(s, `data-grouped="true"`) {
		t.Error("lanes of 10,000 attempts are not grouped")
	}
	// Six templates, six at a time: one row per attempt running at once in each template.
	if rows := strings.Count(s, "attempts)</text>"); rows != 6 {
		t.Errorf("%d template groups in the lanes, want 6", rows)
	}
	_, table, _ := strings.Cut(s, `<table id="attempts">`)
	table, _, _ = strings.Cut(table, "</table>")
	if rows := strings.Count(table, "<tr>") - 1; rows > reportTableRows {
		t.Errorf("attempts table has %d rows, want at most %d", rows, reportTableRows)
	}
	for i := 999; i < 10_000; i += 1000 {
		if name := fmt.Sprintf("<td>job-%05d</td>", i); !strings.Contains(s, name) {
			t.Errorf("failed attempt %s is not in the table", name)
		}
	}
	if !strings.Contains(s, "more attempts, all ok") {
		t.Error("the table does not say that attempts were left out")
	}
	t.Logf("10,000 jobs: %d bytes", len(page))
}

func TestLaneRowsShareRowsWithoutOverlap(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(job string, from, to int) record.Attempt {
		return record.Attempt{Job: job, Template: "t", Start: t0.Add(time.Duration(from) * time.Second), End: t0.Add(time.Duration(to) * time.Second)}
	}
	var atts []record.Attempt
	for i := 0; i < laneAttempts; i++ { // pairs that overlap, one pair after another
		atts = append(atts, at(fmt.Sprint("a", i), i/2*10, i/2*10+8))
	}
	atts = append(atts, at("late", 10_000, 10_001))
	rows := laneRows(atts)
	if len(rows) != 2 {
		t.Fatalf("%d rows for attempts at most two at a time, want 2", len(rows))
	}
	for _, r := range rows {
		for i := 1; i < len(r.atts); i++ {
			if r.atts[i].Start.Before(r.atts[i-1].End) {
				t.Errorf("row holds overlapping attempts %s and %s", r.atts[i-1].Job, r.atts[i].Job)
			}
		}
	}
	if small := laneRows(atts[:3]); len(small) != 3 || small[1].label != "a1 #0" {
		t.Errorf("a small run: %d rows, second labelled %q; want one row per attempt", len(small), small[1].label)
	}
}

func TestFileLink(t *testing.T) {
	tests := []struct{ dir, p, want string }{
		{"/out/run", "logs/a.1.log", "logs/a.1.log"},
		{"/out/run", "/out/run/results/a.json", "results/a.json"},
		{"/out/run", "/elsewhere/a b.json", "file:///elsewhere/a%20b.json"},
		{"", "/out/run/a.json", "file:///out/run/a.json"},
		// A result path is whatever the queue file says: a first segment with a colon must not
		// read as a URL scheme (a click would run it), and '#', '?', '%' and spaces must reach
		// the file instead of ending or changing the link.
		{"/out/run", "/out/run/javascript:alert(1)", "./javascript:alert%281%29"},
		{"/out/run", "javascript:alert(1)", "./javascript:alert%281%29"},
		{"/out/run", "/out/run/r/x#y ?%41.json", "r/x%23y%20%3F%2541.json"},
		{"/out/run", "/out/run/..x.json", "..x.json"},
	}
	for _, tt := range tests {
		if got := fileLink(tt.dir, tt.p); got != tt.want {
			t.Errorf("fileLink(%q, %q) = %q, want %q", tt.dir, tt.p, got, tt.want)
		}
	}
}

// A borrower's memory past its guarantee is drawn apart from what it was guaranteed, its wait
// is named, its ladder is in the jobs table, and the notes describe only the rules the run used.
func TestReportShowsBorrowingAndLadders(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g := record.GPUResult{UUID: "GPU-0", Model: "H100", TotalBytes: 80 * size.GiB, BudgetBytes: 78 * size.GiB, Mode: "isolated"}
	samples := func(from float64, b size.Bytes) []record.MemSample {
		var out []record.MemSample
		for k := 0; k < 20; k++ {
			out = append(out, record.MemSample{T: from + float64(k)*0.5, Bytes: b})
		}
		return out
	}
	res := &record.Result{Arm: record.ArmPacked, Backend: "simulated", Policy: policy.Default(), Start: t0, GPUs: []record.GPUResult{g}, OutDir: "/out",
		Attempts: []record.Attempt{
			{Job: "big", Template: "b", Number: 1, GPU: g.UUID, Capped: true, CapBytes: 3 * size.GiB, LimitBytes: 78 * size.GiB,
				PeakBytes: 20 * size.GiB, BorrowedBytes: 17 * size.GiB, BorrowWait: 1500 * time.Millisecond, BorrowWaitAt: 2,
				Start: t0, End: t0.Add(10 * time.Second), Outcome: record.OutcomeOK, Samples: samples(0, 20*size.GiB)},
			{Job: "lk", Template: "l", Number: 1, GPU: g.UUID, Capped: true, CapBytes: 3 * size.GiB, PeakBytes: 4 * size.GiB,
				Start: t0, End: t0.Add(time.Second), Outcome: record.OutcomeCapViolation, Next: "attempt 2 of 2 alone with the GPU (x)", NextKind: "alone"},
			{Job: "lk", Template: "l", Number: 2, GPU: g.UUID, Capped: true, WholeGPU: true, CapBytes: 78 * size.GiB, PeakBytes: 4 * size.GiB,
				Start: t0.Add(10 * time.Second), End: t0.Add(12 * time.Second), Outcome: record.OutcomeCapViolation, Next: "exhausted: it failed alone", NextKind: "exhausted"},
		},
		Jobs: []record.JobResult{{Name: "big", Template: "b", Outcome: record.OutcomeOK, Attempts: 1, MaxAttempts: 3},
			{Name: "lk", Template: "l", Outcome: record.OutcomeExhausted, Attempts: 2, MaxAttempts: 2, Reason: "it failed alone", Ladder: "3GiB -> whole GPU"}},
	}
	page, err := Render(res)
	if err != nil {
		t.Fatal(err)
	}
	s := string(page)
	for _, want := range []string{`data-borrowed="big"`, "jobs stopped by the ladder (exhausted)", "borrowed past its 3GiB guarantee: 17GiB at its peak", `id="borrowing"`,
		"1.5s from 2.0s", `<td>3GiB -&gt; whole GPU</td>`, "<td>2 of 2</td>", "<td>it failed alone</td>", "attempt 2 of 2 alone with the GPU"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(s, `id="protective"`) || strings.Contains(s, "<td>big</td><td>b</td><td>1 of 3</td>") {
		t.Error("the report describes a protective cap no probe ran under, or lists a job that ran once and ended ok among the ladders")
	}
}
