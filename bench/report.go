package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Summary is one invocation: one seed, its arms in the order they ran.
type Summary struct {
	Seed    uint64    `json:"seed"`
	Started time.Time `json:"started"`
	// Command is the exact command line that produced the figures.
	Command string   `json:"command"`
	Machine string   `json:"machine"`
	GPU     string   `json:"gpu"`
	Driver  string   `json:"driver"`
	Backend string   `json:"backend"`
	Queue   []Entry  `json:"queue"`
	Scores  []Score  `json:"scores"`
	Notes   []string `json:"notes,omitempty"`
	// Skipped lists the arms that did not start (deadline passed, run interrupted).
	Skipped []string `json:"skipped,omitempty"`
}

func fmtDur(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
}

func fmtRatio(s Score) string {
	if s.Ratio == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3fx", s.Ratio)
}

// RenderRun is the markdown table of one invocation, with its command, machine and notes.
func RenderRun(sum Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#### Seed %d, %s\n\n", sum.Seed, sum.Started.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- command: `%s`\n", sum.Command)
	fmt.Fprintf(&b, "- machine: %s; GPU: %s; driver %s; backend %s\n", orDash(sum.Machine), orDash(sum.GPU), orDash(sum.Driver), orDash(sum.Backend))
	fmt.Fprintf(&b, "- queue: %s\n", queueLine(sum.Queue))
	fmt.Fprintf(&b, "- tolerances (fixed in bench/compare.go): exact results identical; losses within %g relative on the mean of the last %d steps\n", LossRelTol, LossTailSteps)
	b.WriteString("- failed attempts (not leaker): attempts of other jobs that broke their cap, failed, or failed as collateral of a GPU-wide event (a neighbour stopped under MPS; re-run, so the job may still complete); the collateral ones in brackets\n\n")
	b.WriteString("| arm | mode | profiles | time | jobs completed | jobs / GPU-h | vs exclusive | failed attempts (not leaker) | leaker cap | leaker contained in | GPU busy |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range sum.Scores {
		lcap := "-"
		if s.LeakerCap > 0 {
			lcap = s.LeakerCap.String()
		}
		stopped := fmtDur(s.LeakerContained)
		if s.LeakerAction != "" {
			stopped += " (" + s.LeakerAction + ")"
		}
		failed := strconv.Itoa(s.FailedOthers)
		if s.Collateral > 0 {
			failed += fmt.Sprintf(" (%d collateral)", s.Collateral)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d of %d | %.1f | %s | %s | %s | %s | %.0f%% |\n",
			s.Label, orDash(s.Mode), orDash(s.Profiles), fmtDur(s.Makespan), s.Completed, s.Jobs,
			s.JobsPerGPUHour, fmtRatio(s), failed, lcap, stopped, 100*s.BusyFraction)
	}
	var notes []string
	notes = append(notes, sum.Notes...)
	for _, s := range sum.Scores {
		if s.Error != "" {
			notes = append(notes, fmt.Sprintf("%s did not finish: %s", s.Label, s.Error))
		}
		for _, j := range s.PerJob {
			if !j.Completed {
				notes = append(notes, fmt.Sprintf("%s: %s not completed: %s", s.Label, j.Job, j.Why))
			}
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n")
		for _, n := range notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func queueLine(q []Entry) string {
	ts := make([]string, len(q))
	for i, e := range q {
		ts[i] = e.Template
	}
	return strings.Join(ts, ", ")
}

// RenderCombined is the published form: one row per arm, one column per invocation (ratio to
// its seed's exclusive baseline and jobs completed), and the mean ratio over the seeds that ran
// the arm. Invocations are ordered by seed, then start time. A seed run by several invocations
// (a main call and a follow-up that re-ran one arm) gets one column per invocation, labelled
// with its start time, each showing only the arms that invocation ran; in the mean such a seed
// counts once, with the mean of its runs. "jobs completed" adds up every run shown.
func RenderCombined(sums []Summary) string {
	sums = slices.Clone(sums)
	sort.SliceStable(sums, func(i, j int) bool {
		if sums[i].Seed != sums[j].Seed {
			return sums[i].Seed < sums[j].Seed
		}
		return sums[i].Started.Before(sums[j].Started)
	})
	var labels []string
	seen := map[string]bool{}
	for _, sum := range sums {
		for _, s := range sum.Scores {
			if !seen[s.Label] {
				seen[s.Label] = true
				labels = append(labels, s.Label)
			}
		}
	}
	var b strings.Builder
	b.WriteString("| arm |")
	for _, h := range columnHeads(sums) {
		fmt.Fprintf(&b, " %s |", h)
	}
	b.WriteString(" mean | jobs completed |\n|---|")
	for range sums {
		b.WriteString("---|")
	}
	b.WriteString("---|---|\n")
	for _, l := range labels {
		fmt.Fprintf(&b, "| %s |", l)
		var done, jobs int
		var seeds []uint64
		ratios := map[uint64][]float64{}
		for _, sum := range sums {
			s, ok := scoreOf(sum, l)
			if !ok {
				b.WriteString(" - |")
				continue
			}
			fmt.Fprintf(&b, " %s (%d/%d) |", fmtRatio(s), s.Completed, s.Jobs)
			done += s.Completed
			jobs += s.Jobs
			if s.Ratio > 0 {
				if len(ratios[sum.Seed]) == 0 {
					seeds = append(seeds, sum.Seed)
				}
				ratios[sum.Seed] = append(ratios[sum.Seed], s.Ratio)
			}
		}
		mean := "-"
		if len(seeds) > 0 {
			var total float64
			for _, seed := range seeds {
				var t float64
				for _, r := range ratios[seed] {
					t += r
				}
				total += t / float64(len(ratios[seed]))
			}
			mean = fmt.Sprintf("%.3fx", total/float64(len(seeds)))
		}
		fmt.Fprintf(&b, " %s | %d of %d |\n", mean, done, jobs)
	}
	return b.String()
}

// scoreOf is the score of the arm labelled l in one invocation.
func scoreOf(sum Summary, l string) (Score, bool) {
	for _, s := range sum.Scores {
		if s.Label == l {
			return s, true
		}
	}
	return Score{}, false
}

// columnHeads names each invocation's column: "seed N", with its start time when the seed has
// several invocations (to the second, and with the date, where the minute does not tell them apart).
func columnHeads(sums []Summary) []string {
	bySeed := map[uint64][]int{}
	for i, sum := range sums {
		bySeed[sum.Seed] = append(bySeed[sum.Seed], i)
	}
	heads := make([]string, len(sums))
	for seed, idx := range bySeed {
		for _, layout := range []string{"", "15:04 MST", "2006-01-02 15:04:05 MST", "2006-01-02 15:04:05.000000000 MST"} {
			used := map[string]bool{}
			unique := true
			for _, i := range idx {
				h := fmt.Sprintf("seed %d", seed)
				if layout != "" {
					h += " (" + sums[i].Started.UTC().Format(layout) + ")"
				}
				heads[i] = h
				unique = unique && !used[h]
				used[h] = true
			}
			if unique {
				break
			}
		}
	}
	return heads
}

// WriteRaw writes the raw records of one invocation into dir: summary.json, summary.md,
// runs.json (every attempt of every arm), attempts.csv and jobs.csv.
func WriteRaw(dir string, sum Summary, runs []ArmRun) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("results directory: %w", err)
	}
	if err := writeJSON(filepath.Join(dir, "summary.json"), sum); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "runs.json"), runs); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.md"), []byte(RenderRun(sum)), 0o644); err != nil {
		return fmt.Errorf("summary.md: %w", err)
	}
	att := [][]string{{"arm", "job", "template", "gpu", "cap_bytes", "start", "end", "seconds", "exit_code", "outcome", "peak_bytes", "whole_gpu"}}
	for _, r := range runs {
		for _, a := range r.Attempts {
			att = append(att, []string{r.Label, a.Job, a.Template, a.GPU, strconv.FormatUint(uint64(a.Cap), 10),
				a.Start.UTC().Format(time.RFC3339Nano), a.End.UTC().Format(time.RFC3339Nano),
				strconv.FormatFloat(a.End.Sub(a.Start).Seconds(), 'f', 3, 64), strconv.Itoa(a.ExitCode), a.Outcome,
				strconv.FormatUint(uint64(a.Peak), 10), strconv.FormatBool(a.WholeGPU)})
		}
	}
	if err := writeCSV(filepath.Join(dir, "attempts.csv"), att); err != nil {
		return err
	}
	jobs := [][]string{{"arm", "job", "template", "attempts", "final_outcome", "final_exit", "completed", "why"}}
	for _, s := range sum.Scores {
		for _, j := range s.PerJob {
			jobs = append(jobs, []string{s.Label, j.Job, j.Template, strconv.Itoa(j.Attempts), j.Final,
				strconv.Itoa(j.FinalExit), strconv.FormatBool(j.Completed), j.Why})
		}
	}
	return writeCSV(filepath.Join(dir, "jobs.csv"), jobs)
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return writeAtomic(path, append(data, '\n'))
}

func writeCSV(path string, rows [][]string) error {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	if err := w.WriteAll(rows); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return writeAtomic(path, buf.Bytes())
}

// writeAtomic replaces path in one step, so a run killed mid-write keeps the previous file.
func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	return nil
}

// LoadSummary reads a summary.json written by WriteRaw.
func LoadSummary(path string) (Summary, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Summary{}, fmt.Errorf("summary: %w", err)
	}
	var s Summary
	if err := json.Unmarshal(data, &s); err != nil {
		return Summary{}, fmt.Errorf("summary %s: %w", path, err)
	}
	return s, nil
}

// SectionHeading is the heading of the section of docs/benchmarks.md this package owns.
const SectionHeading = "## Packing benchmark"

// InsertIntoSection adds text at the end of the "## Packing benchmark" section of a markdown
// document (before the next "## " heading), creating the section at the end when it is absent.
// Other sections are left byte for byte as they were.
func InsertIntoSection(doc, text string) string {
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	lines := strings.SplitAfter(doc, "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimRight(l, "\r\n") == SectionHeading {
			start = i
			break
		}
	}
	if start < 0 {
		if doc != "" && !strings.HasSuffix(doc, "\n") {
			doc += "\n"
		}
		if doc != "" {
			doc += "\n"
		}
		return doc + SectionHeading + "\n\n" + text
	}
	end := len(lines)
	for i := start + 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], "## ") {
			end = i
			break
		}
	}
	before := strings.Join(lines[:end], "")
	after := strings.Join(lines[end:], "")
	if !strings.HasSuffix(before, "\n") {
		before += "\n"
	}
	if !strings.HasSuffix(before, "\n\n") {
		before += "\n"
	}
	if after != "" {
		text += "\n"
	}
	return before + text + after
}
