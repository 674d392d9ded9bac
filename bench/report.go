package bench

import (
	"bytes"
	"compress/gzip"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
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
	Command string  `json:"command"`
	Machine string  `json:"machine"`
	GPU     string  `json:"gpu"`
	Driver  string  `json:"driver"`
	Backend string  `json:"backend"`
	Queue   []Entry `json:"queue"`
	// Workload is the jobs' size profile ("" in summaries written before profiles: startup).
	Workload WorkloadProfile `json:"workload,omitempty"`
	// WorkloadsDigest says what the jobs were (Digester): a later run checked against this
	// one's exclusive arm must have the same ("" before 2026-12-04, and for simulated jobs).
	WorkloadsDigest string   `json:"workloads_digest,omitempty"`
	Scores          []Score  `json:"scores"`
	Notes           []string `json:"notes,omitempty"`
	// Skipped lists the arms that did not start (deadline passed, run interrupted).
	Skipped []string `json:"skipped,omitempty"`
	// Ref is the earlier invocation's exclusive run the arms were checked and scored against
	// (--ref), when they were: a busy seed's arms run a call after its exclusive arm.
	Ref *Score `json:"ref,omitempty"`
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
	fmt.Fprintf(&b, "- workload profile: %s; queue: %s\n", sum.Workload.orStartup(), queueLine(sum.Queue))
	fmt.Fprintf(&b, "- tolerances (fixed in bench/compare.go): exact results identical; losses within %g relative on the mean of the last %d steps\n", LossRelTol, LossTailSteps)
	b.WriteString("- failed attempts (not leaker): attempts of other jobs that broke their cap, failed, or failed as collateral of a GPU-wide event (a neighbour stopped under MPS; re-run, so the job may still complete); the collateral ones in brackets\n")
	b.WriteString("- innocent work lost: the time of those failed attempts; jobs lost: jobs that ran but did not complete (the innocent ones, not the leaker, in brackets); re-run: jobs started again after a failed attempt (a retry, a re-run after a broken cap)\n\n")
	b.WriteString("| arm | mode | profiles | time | jobs completed | jobs / GPU-h | vs exclusive | failed attempts (not leaker) | innocent work lost | jobs lost | jobs re-run | leaker cap | leaker contained in | GPU busy |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
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
		lostWork, lost, rerun := fmtLoss(s.Loss)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d of %d | %.1f | %s | %s | %s | %s | %s | %s | %s | %.0f%% |\n",
			s.Label, orDash(s.Mode), orDash(string(s.Profiles)), fmtDur(s.Makespan), s.Completed, s.Jobs,
			s.JobsPerGPUHour, fmtRatio(s), failed, lostWork, lost, rerun, lcap, stopped, 100*s.BusyFraction)
	}
	b.WriteString("\nWhere the time went (from the attempts; a job alone with the GPU: every exclusive job, a probe alone, a re-run after a broken cap):\n\n")
	b.WriteString(renderUse(sum.Scores))
	b.WriteString("\nThe SMs (NVML GPM, sampled through the gpu backend; SM bound: the most any arm can gain over the exclusive run, 1 / its SM-active fraction; of the bound: the arm's ratio over it):\n\n")
	b.WriteString(renderSM(sum.Scores))
	if js := renderJobSM(sum.Scores); js != "" {
		b.WriteString("\nEach job alone (exclusive arms; the GPU's figures are the job's):\n\n")
		b.WriteString(js)
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
		if s.Loss != nil && len(s.Loss.ReRun) > 0 {
			notes = append(notes, fmt.Sprintf("%s: re-run after a failed attempt: %s", s.Label, rerunLine(s)))
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

// fmtLoss renders a score's innocent work lost, jobs lost and jobs re-run ("-" for a summary
// written before they were recorded).
func fmtLoss(l *Loss) (work, lost, rerun string) {
	if l == nil {
		return "-", "-", "-"
	}
	work = strconv.FormatFloat(l.Innocent.Seconds(), 'f', 1, 64) + " s"
	lost = fmt.Sprintf("%d (%d)", len(l.Lost), l.InnocentLost)
	return work, lost, strconv.Itoa(len(l.ReRun))
}

// rerunLine names the re-run jobs with their templates and attempts: "j3 (lora-0.6b, 4 attempts)".
func rerunLine(s Score) string {
	byName := map[string]JobScore{}
	for _, j := range s.PerJob {
		byName[j.Job] = j
	}
	parts := make([]string, len(s.Loss.ReRun))
	for i, n := range s.Loss.ReRun {
		j := byName[n]
		parts[i] = fmt.Sprintf("%s (%s, %d attempts, %s failed)", n, j.Template, j.Attempts, fmtDur(j.FailedTime))
	}
	return strings.Join(parts, ", ")
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

// RenderCombined is the published form: one row per arm, one column per seed. Every run of a
// seed, whichever invocation it came from, is scored against one baseline: the mean jobs per
// GPU-hour of that seed's complete exclusive runs. A seed's two exclusive runs usually come from
// two device calls and differ by several percent (CPU-bound start-up on a shared machine), so a
// ratio to either run alone would move with that noise. A cell lists every run of the arm for
// the seed as "ratio (completed/jobs)"; a run that did not finish (deadline, interruption) is
// marked † and left out of the mean, as a cut-short exclusive run is left out of the baseline.
// The mean is over seeds of each seed's mean ratio. The last row says how far apart each seed's
// complete exclusive runs are (fastest over slowest, minus one).
func RenderCombined(sums []Summary) string {
	var scores []Score
	for _, sum := range sortedBySeed(sums) {
		for _, s := range sum.Scores {
			s.Seed = sum.Seed
			if s.Workload == "" {
				s.Workload = sum.Workload
			}
			scores = append(scores, s)
		}
	}
	scores = withBaselines(scores, refsOf(sums, scores))
	var seeds []uint64
	var rows []string
	cells := map[string]map[uint64][]Score{}
	for _, s := range scores {
		if !slices.Contains(seeds, s.Seed) {
			seeds = append(seeds, s.Seed)
		}
		row := armRow(s)
		if cells[row] == nil {
			cells[row] = map[uint64][]Score{}
			rows = append(rows, row)
		}
		cells[row][s.Seed] = append(cells[row][s.Seed], s)
	}
	// The baselines' own rows first, whatever order the arms ran in.
	isBase := func(r string) bool { return r == "exclusive" || strings.HasPrefix(r, "exclusive (") }
	sort.SliceStable(rows, func(i, j int) bool { return isBase(rows[i]) && !isBase(rows[j]) })

	var b strings.Builder
	b.WriteString("| arm |")
	for _, seed := range seeds {
		fmt.Fprintf(&b, " seed %d |", seed)
	}
	b.WriteString(" mean | jobs completed | innocent work lost | jobs lost (innocent) | jobs re-run |\n|---|")
	for range seeds {
		b.WriteString("---|")
	}
	b.WriteString("---|---|---|---|---|\n")
	for _, row := range rows {
		fmt.Fprintf(&b, "| %s |", row)
		var done, jobs, nSeeds int
		var total float64
		var loss Loss
		known := 0
		for _, seed := range seeds {
			runs := cells[row][seed]
			if len(runs) == 0 {
				b.WriteString(" - |")
				continue
			}
			parts := make([]string, len(runs))
			var sum float64
			var n int
			for i, s := range runs {
				mark := ""
				if s.unfinished() {
					mark = "†"
				} else if s.Ratio > 0 {
					sum += s.Ratio
					n++
				}
				parts[i] = fmt.Sprintf("%s%s (%d/%d)", fmtRatio(s), mark, s.Completed, s.Jobs)
				done += s.Completed
				jobs += s.Jobs
				if s.Loss != nil {
					known++
					loss.Innocent += s.Loss.Innocent
					loss.Lost = append(loss.Lost, s.Loss.Lost...)
					loss.InnocentLost += s.Loss.InnocentLost
					loss.ReRun = append(loss.ReRun, s.Loss.ReRun...)
				}
			}
			if n > 0 {
				total += sum / float64(n)
				nSeeds++
			}
			fmt.Fprintf(&b, " %s |", strings.Join(parts, ", "))
		}
		mean := "-"
		if nSeeds > 0 {
			mean = fmt.Sprintf("%.3fx", total/float64(nSeeds))
		}
		work, lost, rerun := "-", "-", "-"
		if known > 0 {
			work, lost, rerun = fmtLoss(&loss)
		}
		if n := runsIn(cells[row]); known > 0 && known < n {
			// Summaries written before Loss existed, with no runs.json to recompute it from.
			work += fmt.Sprintf(" (%d of %d runs)", known, n)
		}
		fmt.Fprintf(&b, " %s | %d of %d | %s | %s | %s |\n", mean, done, jobs, work, lost, rerun)
	}
	for _, row := range rows {
		if !isBase(row) {
			continue
		}
		fmt.Fprintf(&b, "| %s runs apart |", row)
		for _, seed := range seeds {
			b.WriteString(" " + exclusiveSpread(cells[row][seed]) + " |")
		}
		b.WriteString(" | | | | |\n")
	}
	b.WriteString(renderVerdicts(rows, seeds, cells, AANoise(scores)))
	b.WriteString(renderSMCombined(rows, seeds, cells))
	return b.String()
}

// refsOf are the reference runs of sums (--ref) that are not among scores already: a run
// scored against an exclusive run of an earlier call keeps its baseline when the report is given
// only its own directory, and the baseline counts once when both are given.
func refsOf(sums []Summary, scores []Score) []Score {
	same := func(a, b Score) bool {
		return a.Seed == b.Seed && a.Workload.orStartup() == b.Workload.orStartup() && a.Label == b.Label &&
			a.Makespan == b.Makespan && a.Completed == b.Completed
	}
	var refs []Score
	for _, sum := range sums {
		if sum.Ref == nil {
			continue
		}
		r := *sum.Ref
		if !slices.ContainsFunc(scores, func(s Score) bool { return same(s, r) }) &&
			!slices.ContainsFunc(refs, func(s Score) bool { return same(s, r) }) {
			refs = append(refs, r)
		}
	}
	return refs
}

// withBaselines sets the ratios and SM bounds of scores, with refs (exclusive runs of earlier
// invocations) in the baselines but not in the result.
func withBaselines(scores, refs []Score) []Score {
	pool := append(scores[:len(scores):len(scores)], refs...)
	SetRatios(pool)
	return pool[:len(scores)]
}

func runsIn(bySeed map[uint64][]Score) int {
	n := 0
	for _, runs := range bySeed {
		n += len(runs)
	}
	return n
}

// sortedBySeed orders invocations by seed, then start time, leaving the caller's slice alone
// (the caller pairs it with its directories).
func sortedBySeed(sums []Summary) []Summary {
	sums = slices.Clone(sums)
	sort.SliceStable(sums, func(i, j int) bool {
		if sums[i].Seed != sums[j].Seed {
			return sums[i].Seed < sums[j].Seed
		}
		return sums[i].Started.Before(sums[j].Started)
	})
	return sums
}

// repeatSuffix is what ParseArms appends to an arm that runs twice in one invocation.
var repeatSuffix = regexp.MustCompile(`-[0-9]+$`)

// armRow is the row an arm's run belongs to: its label without the repeat suffix, so the
// second exclusive run of an invocation ("exclusive-2") shares the exclusive row, and the busy
// profile's runs their own rows ("exclusive (busy)"), scored against their own baseline.
func armRow(s Score) string {
	row := repeatSuffix.ReplaceAllString(s.Label, "")
	var tags []string
	if p := s.Workload.orStartup(); p != ProfileStartup {
		tags = append(tags, string(p))
	}
	if s.Jobs > 0 && s.Jobs != QueueLen {
		tags = append(tags, fmt.Sprintf("%d jobs", s.Jobs))
	}
	if len(tags) > 0 {
		row += " (" + strings.Join(tags, ", ") + ")"
	}
	return row
}

// unfinished is true for a run that stopped before its queue was done: its rate is not the
// queue's.
func (s Score) unfinished() bool {
	return s.Error != "" || s.cutShort()
}

// exclusiveSpread is how much faster the fastest complete exclusive run was than the slowest.
func exclusiveSpread(runs []Score) string {
	var lo, hi float64
	n := 0
	for _, s := range runs {
		if s.unfinished() || s.JobsPerGPUHour <= 0 {
			continue
		}
		if n == 0 || s.JobsPerGPUHour < lo {
			lo = s.JobsPerGPUHour
		}
		if s.JobsPerGPUHour > hi {
			hi = s.JobsPerGPUHour
		}
		n++
	}
	if n < 2 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", (hi/lo-1)*100)
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
			att = append(att, []string{r.Label, a.Job, a.Template, a.GPU, strconv.FormatUint(uint64(capOf(a)), 10),
				a.Start.UTC().Format(time.RFC3339Nano), a.End.UTC().Format(time.RFC3339Nano),
				strconv.FormatFloat(a.End.Sub(a.Start).Seconds(), 'f', 3, 64), strconv.Itoa(a.ExitCode), string(a.Outcome),
				strconv.FormatUint(uint64(a.PeakBytes), 10), strconv.FormatBool(a.WholeGPU)})
		}
	}
	if err := writeCSV(filepath.Join(dir, "attempts.csv"), att); err != nil {
		return err
	}
	jobs := [][]string{{"arm", "job", "template", "attempts", "final_outcome", "final_exit", "completed", "why", "failed_attempts_seconds"}}
	for _, s := range sum.Scores {
		for _, j := range s.PerJob {
			jobs = append(jobs, []string{s.Label, j.Job, j.Template, strconv.Itoa(j.Attempts), string(j.Final),
				strconv.Itoa(j.FinalExit), strconv.FormatBool(j.Completed), j.Why,
				strconv.FormatFloat(j.FailedTime.Seconds(), 'f', 3, 64)})
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
func LoadSummary(path string) (Summary, error) { return readJSON[Summary](path, "summary") }

// readJSON reads one of the files WriteRaw writes; what names it in errors.
func readJSON[T any](path, what string) (T, error) {
	var v T
	data, err := readMaybeGzipped(path)
	if err != nil {
		return v, fmt.Errorf("%s: %w", what, err)
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("%s %s: %w", what, path, err)
	}
	return v, nil
}

// readMaybeGzipped reads path, or path.gz where only that exists: bench-collect.sh gzips the
// committed runs' runs.json (114 KB a run), since a device call copies the whole tracked tree
// with what it carries, at most 64 MiB. Where neither exists the error is path's own.
func readMaybeGzipped(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if !errors.Is(err, os.ErrNotExist) {
		return data, err
	}
	f, gzErr := os.Open(path + ".gz")
	if errors.Is(gzErr, os.ErrNotExist) {
		return nil, err
	}
	if gzErr != nil {
		return nil, gzErr
	}
	defer f.Close()
	zr, gzErr := gzip.NewReader(f)
	if gzErr != nil {
		return nil, fmt.Errorf("%s.gz: %w", path, gzErr)
	}
	defer zr.Close()
	data, gzErr = io.ReadAll(zr)
	if gzErr != nil {
		return nil, fmt.Errorf("%s.gz: %w", path, gzErr)
	}
	return data, nil
}

// SectionHeading is the heading of the section of docs/bench/results.md (the results journal)
// that this package appends to.
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
