package report

import (
	"bytes"
	_ "embed"
	"fmt"
	"html"
	"html/template"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/gpufrac/gpufrac/record"
)

// File is the report's name inside a run's results directory, beside record.ResultsFile.
const File = "report.html"

// Colours of outcomes in the report's lanes and table. Jobs in the memory chart take their
// colours from templatePalette instead, so a job's colour never reads as an outcome.
var outcomeColour = map[record.Outcome]string{
	record.OutcomeOK:           "#2e7d32",
	record.OutcomeCapViolation: "#c62828",
	record.OutcomeFailed:       "#ef6c00",
	record.OutcomeProbe:        "#6a1b9a",
	record.OutcomeCanceled:     "#757575",
	record.OutcomeCollateral:   "#f9a825",
	record.OutcomeExhausted:    "#b71c1c",
	record.OutcomeUnstaged:     "#9e9e9e",
}

// templatePalette colours templates in the memory chart: blues, teals and browns, none of
// them near an outcome's green, red, orange, purple, grey or yellow.
var templatePalette = []string{"#1f77b4", "#17becf", "#393b79", "#8c564b", "#6baed6", "#5254a3", "#c49c94", "#08519c", "#9edae5", "#843c39"}

// reportTableRows bounds the attempts table: past it, the table keeps every attempt that did
// not end ok and the first ok ones, and points at attempts.csv for the rest, so a 10,000-job
// queue makes a page of a few hundred kilobytes.
const reportTableRows = 300

// pageHTML is the page; the charts are SVG drawn in Go (svg.go) and inserted as template.HTML,
// everything else is escaped by html/template.
//
//go:embed report.html.tmpl
var pageHTML string

var page = template.Must(template.New("report").Parse(pageHTML))

// laneColour is an attempt's colour in the lanes: an outcome's, except that a probe that
// ended well is drawn in the probe colour, as the legend says.
func laneColour(a record.Attempt) string {
	if a.Probe && (a.Outcome == record.OutcomeOK || a.Outcome == record.OutcomeProbe) {
		return outcomeColour[record.OutcomeProbe]
	}
	return outcomeColour[a.Outcome]
}

// templateColours gives each template of the run a colour, in the order they first start.
func templateColours(res *record.Result) (map[string]string, []string) {
	cols := map[string]string{}
	var order []string
	for _, a := range res.Attempts {
		if _, ok := cols[a.Template]; !ok {
			cols[a.Template] = templatePalette[len(order)%len(templatePalette)]
			order = append(order, a.Template)
		}
	}
	return cols, order
}

// The page's data: what the template shows, already formatted. Colours are template.CSS (they
// come from the palettes above, never from a run), links template.URL (fileLink built them).
type (
	pageData struct {
		Title     string
		Simulated bool
		Setup     string
		KPIs      []kpi
		Events    []string
		GPUs      []gpuSection
		Outcomes  []legendItem
		// Probes: a probe ran under a protective cap; Borrowing: some attempt could borrow
		// past its guarantee. Each note describes a rule the run used, no other.
		Probes    bool
		Borrowing bool
		Ladders   []ladderRow
		Rows      []attemptRow
		Hidden    int
	}
	ladderRow struct {
		Job, Template, Attempts, Ladder, Reason string
		Outcome                                 string
		Colour                                  template.CSS
	}
	kpi        struct{ Value, Label string }
	legendItem struct {
		Colour template.CSS
		Name   string
	}
	gpuSection struct {
		Heading   string
		Chart     template.HTML
		Templates []legendItem
		Reserved  template.CSS
		Lanes     template.HTML
	}
	attemptRow struct {
		Job, Template                      string
		Number, GPUIndex, ExitCode         int
		Cap, Borrowed, Limit, Peak, Waited string
		Start, End, Time                   string
		Colour                             template.CSS
		Outcome, Detail, Next              string
		Log, Result                        template.URL
	}
)

// Render draws a self-contained HTML page: a header with the arm, the metric and totals,
// and per GPU a chart of each job's reserved and used memory on a GiB scale and the attempts'
// lanes, grouped by template when there are many; then the attempts with links to their logs
// and results. The page has no script.
func Render(res *record.Result) ([]byte, error) {
	d := pageData{
		Title:     fmt.Sprintf("gpufrac run: %s arm", res.Arm),
		Simulated: res.Backend != "nvml",
		Setup: fmt.Sprintf("mode %s, %s profiles, %s backend (driver %s), cap = %s, headroom %s, at most %d jobs per GPU; queue %s; %s",
			res.Mode, res.Profiles, res.Backend, res.Driver, res.Policy.CapFormula("peak"),
			res.Policy.HeadroomBytes, res.Policy.MaxTasksPerGPU, res.Queue, res.Start.UTC().Format(time.RFC1123)),
		KPIs: kpis(res),
	}
	for _, e := range res.GPUEvents {
		end := "until the end"
		if !e.End.IsZero() {
			end = fmt.Sprintf("%.1fs", e.End.Sub(e.Start).Seconds())
		}
		d.Events = append(d.Events, fmt.Sprintf("GPU%d at %.1fs for %s: %s", e.GPUIndex, e.Start.Sub(res.Start).Seconds(), end, e.Reason))
	}
	for _, o := range []record.Outcome{record.OutcomeOK, record.OutcomeCapViolation, record.OutcomeFailed, record.OutcomeCollateral, record.OutcomeProbe, record.OutcomeCanceled, record.OutcomeUnstaged} {
		name := string(o)
		if o == record.OutcomeProbe {
			name = "probe (ended well)"
		}
		d.Outcomes = append(d.Outcomes, legendItem{template.CSS(outcomeColour[o]), name})
	}
	end := res.Makespan().Seconds()
	if end <= 0 {
		end = 1
	}
	t0 := firstStart(res)
	cols, order := templateColours(res)
	for _, a := range res.Attempts {
		borrows := a.LimitBytes > a.CapBytes
		d.Probes = d.Probes || (a.Probe && !borrows && !a.WholeGPU)
		d.Borrowing = d.Borrowing || borrows
	}
	d.Ladders = ladders(res)
	for _, g := range res.GPUs {
		var atts []record.Attempt
		for _, a := range res.Attempts {
			if a.GPU == g.UUID {
				atts = append(atts, a)
			}
		}
		sec := gpuSection{
			Heading: fmt.Sprintf("GPU%d %s: %s, budget %s, %s mode, busy %.0f%%, %d jobs completed (%.0f jobs per GPU-hour)",
				g.Index, g.Model, g.TotalBytes, g.BudgetBytes, g.Mode, g.Busy*100, g.Completed, g.JobsPerGPUHour),
			Chart:    template.HTML(memoryChart(atts, g, t0, end, res.Start, cols)),
			Reserved: template.CSS(templatePalette[0]),
			Lanes:    template.HTML(lanes(atts, t0, end, res.Start)),
		}
		// The legend names the templates that ran on this GPU.
		for _, t := range order {
			if slices.ContainsFunc(atts, func(a record.Attempt) bool { return a.Template == t }) {
				sec.Templates = append(sec.Templates, legendItem{template.CSS(cols[t]), t})
			}
		}
		d.GPUs = append(d.GPUs, sec)
	}
	d.Rows, d.Hidden = attemptRows(res, t0)
	var b bytes.Buffer
	if err := page.Execute(&b, d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Write renders res into dir/File.
func Write(res *record.Result, dir string) error {
	page, err := Render(res)
	if err != nil {
		return fmt.Errorf("rendering the report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, File), page, 0o644); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}

func kpis(res *record.Result) []kpi {
	ms := res.Makespan()
	k := []kpi{
		{fmt.Sprintf("%d / %d", res.Completed, len(res.Jobs)), "jobs completed"},
		{fmt.Sprintf("%.0f", res.JobsPerGPUHour), gpuHourLabel(len(res.GPUs))},
		{fmt.Sprintf("%.1fs", ms.Seconds()), "first start to last exit"},
	}
	if res.ExclusiveEstimate > 0 && ms > 0 && res.Arm != record.ArmExclusive {
		k = append(k, kpi{fmt.Sprintf("%.2fx", res.ExclusiveEstimate.Seconds()/ms.Seconds()), fmt.Sprintf("vs one at a time (~%.0fs est.)", res.ExclusiveEstimate.Seconds())})
	}
	k = append(k, kpi{fmt.Sprintf("%d", len(res.Attempts)), "attempts"}, kpi{fmt.Sprintf("%d", res.Violations), "cap violations"})
	exhausted := 0
	for _, j := range res.Jobs {
		if j.Outcome == record.OutcomeExhausted {
			exhausted++
		}
	}
	if exhausted > 0 {
		k = append(k, kpi{fmt.Sprintf("%d", exhausted), "jobs stopped by the ladder (exhausted)"})
	}
	if res.Collateral > 0 || len(res.GPUEvents) > 0 {
		k = append(k, kpi{fmt.Sprintf("%d", res.Collateral), "collateral failures (re-run)"})
	}
	return append(k,
		kpi{fmt.Sprintf("%.0f%%", res.BusyFraction*100), "GPU busy"},
		kpi{fmt.Sprintf("%.1f", res.Use.MeanRunning), "jobs running on average"},
		kpi{fmt.Sprintf("%.1fs", res.Use.Whole.Seconds()), "some job held a GPU alone"})
}

// attemptRows are the attempts table's rows with their end times and links to their logs and
// results, and how many ok attempts were left out. Only a job's last attempt links its result:
// the file an earlier one wrote is overwritten.
func attemptRows(res *record.Result, t0 time.Time) ([]attemptRow, int) {
	okLeft := len(res.Attempts)
	if len(res.Attempts) > reportTableRows {
		okLeft = reportTableRows - countNotOK(res.Attempts)
	}
	final := map[string]int{}
	for i, a := range res.Attempts {
		final[a.Job] = i
	}
	var rows []attemptRow
	hidden := 0
	for i, a := range res.Attempts {
		if a.Outcome == record.OutcomeOK {
			if okLeft <= 0 {
				hidden++
				continue
			}
			okLeft--
		}
		row := attemptRow{Job: a.Job, Template: a.Template, Number: a.Number, GPUIndex: a.GPUIndex, ExitCode: a.ExitCode,
			Cap: a.CapLabel(), Borrowed: "-", Limit: a.LimitLabel(), Peak: a.PeakBytes.String(), Waited: "-",
			Start: fmt.Sprintf("%.1fs", a.Start.Sub(t0).Seconds()),
			End:   fmt.Sprintf("%.1fs", a.End.Sub(t0).Seconds()), Time: fmt.Sprintf("%.1fs", a.Duration().Seconds()),
			Colour: template.CSS(laneColour(a)), Outcome: outcomeName(a), Detail: a.Detail, Next: a.Next}
		if a.LimitBytes > a.CapBytes {
			row.Borrowed = a.BorrowedBytes.String()
		}
		if a.BorrowWait > 0 {
			row.Waited = fmt.Sprintf("%.1fs from %.1fs", a.BorrowWait.Seconds(), a.BorrowWaitAt-t0.Sub(res.Start).Seconds())
		}
		if a.Log != "" {
			row.Log = template.URL(fileLink(res.OutDir, a.Log))
		}
		if a.Result != "" && final[a.Job] == i {
			row.Result = template.URL(fileLink(res.OutDir, a.Result))
		}
		rows = append(rows, row)
	}
	return rows, hidden
}

func countNotOK(atts []record.Attempt) int {
	n := 0
	for _, a := range atts {
		if a.Outcome != record.OutcomeOK {
			n++
		}
	}
	return n
}

// outcomeName says "ok (probe)" for a probe that ended well, matching its lane's colour.
func outcomeName(a record.Attempt) string {
	if a.Probe && a.Outcome == record.OutcomeOK {
		return "ok (probe)"
	}
	return string(a.Outcome)
}

// fileLink is a link to a file of the run: relative to the results directory when it lies
// under it (the report sits there, and the directory can be moved or served as a whole), else
// a file: URL.
//
// The path is escaped as a URL path: a result path comes from the queue file, and unescaped a
// first segment such as "javascript:..." would be a scheme the link runs, and a '#' or '?' in
// a name would cut the link short.
func fileLink(outDir, p string) string {
	if filepath.IsAbs(p) && outDir != "" {
		if rel, ok := record.Within(outDir, p); ok {
			p = rel
		}
	}
	if filepath.IsAbs(p) {
		return (&url.URL{Scheme: "file", Path: filepath.ToSlash(p)}).String()
	}
	// url.URL writes "./" before a first segment with a colon, so it cannot read as a scheme.
	return (&url.URL{Path: filepath.ToSlash(p)}).String()
}

// gpuHourLabel names the run's rate and, with several GPUs, what it is divided by.
func gpuHourLabel(gpus int) string {
	if gpus > 1 {
		return fmt.Sprintf("jobs per GPU-hour (completed / makespan x %d GPUs)", gpus)
	}
	return "jobs per GPU-hour"
}

// esc escapes text for the SVG that svg.go writes by hand; the page's own text is escaped by
// html/template.
func esc(s string) string { return html.EscapeString(s) }

func firstStart(res *record.Result) time.Time {
	var t time.Time
	for _, a := range res.Attempts {
		if t.IsZero() || a.Start.Before(t) {
			t = a.Start
		}
	}
	if t.IsZero() {
		return res.Start
	}
	return t
}

// ladders are the jobs that ran more than once or did not end ok, each with its rooms attempt by
// attempt: how a job climbed the ladder, at a glance.
func ladders(res *record.Result) []ladderRow {
	var out []ladderRow
	for _, j := range res.Jobs {
		if j.Attempts <= 1 && j.Outcome == record.OutcomeOK {
			continue
		}
		tries := fmt.Sprint(j.Attempts)
		if j.MaxAttempts > 0 {
			tries = fmt.Sprintf("%d of %d", j.Attempts, j.MaxAttempts)
		}
		col := outcomeColour[j.Outcome]
		if col == "" {
			col = outcomeColour[record.OutcomeCapViolation]
		}
		out = append(out, ladderRow{Job: j.Name, Template: j.Template, Attempts: tries, Ladder: record.Ladder(res.Attempts, j.Name),
			Outcome: string(j.Outcome), Reason: j.Reason, Colour: template.CSS(col)})
		if len(out) == reportTableRows {
			break
		}
	}
	return out
}
