package bench

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

func sampleSummary(seed uint64, packedRatio float64) Summary {
	return Summary{Seed: seed, Started: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), Command: "gpufrac-bench run --seed 1",
		Machine: "h200", GPU: "1 x NVIDIA H200", Driver: "580.159.04", Backend: "nvml", Queue: Draw(seed),
		Scores: []Score{
			{Label: "exclusive", Arm: "exclusive", Seed: seed, Jobs: 12, Completed: 12, Makespan: 200 * time.Second, JobsPerGPUHour: 216, Ratio: 1, BusyFraction: 0.31,
				Loss: &Loss{Lost: []string{}, ReRun: []string{}}},
			{Label: "packed-mps", Arm: "packed", Mode: "mps", Profiles: "cold", Seed: seed, Jobs: 12, Completed: 11, Makespan: 90 * time.Second,
				JobsPerGPUHour: 440, Ratio: packedRatio, FailedOthers: 1, LeakerCap: 3 * size.GiB, LeakerAction: "oom-in-process",
				LeakerContained: 300 * time.Millisecond, BusyFraction: 0.77,
				Loss: &Loss{Innocent: 12500 * time.Millisecond, Lost: []string{"j07-eval-1.7b"}, InnocentLost: 1, ReRun: []string{"j03-lora-0.6b"}},
				PerJob: []JobScore{{Job: "j07-eval-1.7b", Template: Eval17B, Why: "values are not identical"},
					{Job: "j03-lora-0.6b", Template: LoRA06B, Attempts: 2, Completed: true, FailedTime: 12500 * time.Millisecond}}},
		}}
}

func TestRenderRun(t *testing.T) {
	out := RenderRun(sampleSummary(1, 2.037))
	for _, want := range []string{
		"#### Seed 1, 2026-11-29 10:00 UTC",
		"`gpufrac-bench run --seed 1`",
		"driver 580.159.04",
		"| exclusive | - | - | 200.0 s | 12 of 12 | 216.0 | 1.000x | 0 | 0.0 s | 0 (0) | 0 | - | - | 31% |",
		"| packed-mps | mps | cold | 90.0 s | 11 of 12 | 440.0 | 2.037x | 1 | 12.5 s | 1 (1) | 1 | 3GiB | 0.3 s (oom-in-process) | 77% |",
		"packed-mps: j07-eval-1.7b not completed: values are not identical",
		"packed-mps: re-run after a failed attempt: j03-lora-0.6b (lora-0.6b, 2 attempts, 12.5 s failed)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered table lacks %q:\n%s", want, out)
		}
	}
}

// wantSeeds1And2 checks a combined table of seeds 1 and 2 line by line: its head, then rows.
func wantSeeds1And2(t *testing.T, out string, rows ...string) {
	t.Helper()
	want := append([]string{
		"| arm | seed 1 | seed 2 | mean | jobs completed | innocent work lost | jobs lost (innocent) | jobs re-run |",
		"|---|---|---|---|---|---|---|---|",
	}, rows...)
	if got := strings.Split(strings.TrimSpace(out), "\n"); !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Each seed's runs are scored against that seed's exclusive baseline, whatever ratio the
// invocation stored; seeds are sorted and the mean is over seeds.
func TestRenderCombined(t *testing.T) {
	two := sampleSummary(2, 9.9)
	two.Scores[1].JobsPerGPUHour = 324
	out := RenderCombined([]Summary{two, sampleSummary(1, 9.9)})
	wantSeeds1And2(t, out,
		"| exclusive | 1.000x (12/12) | 1.000x (12/12) | 1.000x | 24 of 24 | 0.0 s | 0 (0) | 0 |",
		"| packed-mps | 2.037x (11/12) | 1.500x (11/12) | 1.769x | 22 of 24 | 25.0 s | 2 (2) | 2 |",
		"| exclusive runs apart | - | - | | | | | |",
	)
}

// A seed's exclusive runs from two invocations pool into one baseline; a run that did not finish
// is shown with a mark and counts neither in the baseline nor in the mean.
func TestRenderCombinedPoolsASeedsRuns(t *testing.T) {
	main := sampleSummary(1, 9.9)
	main.Scores = append(main.Scores, Score{Label: "exclusive-2", Arm: "exclusive", Jobs: 12, Completed: 5,
		JobsPerGPUHour: 230, PerJob: []JobScore{{Job: "j12-lora-0.6b", Why: "never ran"}}})
	rerun := Summary{Seed: 1, Started: main.Started.Add(time.Hour),
		Scores: []Score{{Label: "exclusive", Arm: "exclusive", Jobs: 12, Completed: 12, JobsPerGPUHour: 240}}}
	other := sampleSummary(2, 9.9)
	other.Scores = append(other.Scores, Score{Label: "packed-isolated", Arm: "packed", Mode: "isolated", Jobs: 12,
		Completed: 11, JobsPerGPUHour: 500, Error: "context canceled"})
	in := []Summary{rerun, other, main}
	out := RenderCombined(in)
	if in[0].Started != rerun.Started || in[1].Seed != 2 || in[2].Seed != 1 {
		t.Fatal("RenderCombined reordered the caller's slice (the caller pairs it with its directories)")
	}
	wantSeeds1And2(t, out,
		// Baseline of seed 1: (216 + 240) / 2 = 228 jobs per GPU-hour. Two of its four exclusive
		// runs have no Loss (written before it existed): the sum says so.
		"| exclusive | 0.947x (12/12), 1.009x† (5/12), 1.053x (12/12) | 1.000x (12/12) | 1.000x | 41 of 48 | 0.0 s (2 of 4 runs) | 0 (0) | 0 |",
		"| packed-mps | 1.930x (11/12) | 2.037x (11/12) | 1.983x | 22 of 24 | 25.0 s | 2 (2) | 2 |",
		"| packed-isolated | - | 2.315x† (11/12) | - | 11 of 12 | - | - | - |",
		"| exclusive runs apart | 11.1% | - | | | | | |",
	)
}

// The baseline row comes first even when an invocation ran another arm first.
func TestRenderCombinedExclusiveFirst(t *testing.T) {
	sum := sampleSummary(1, 9.9)
	sum.Scores[0], sum.Scores[1] = sum.Scores[1], sum.Scores[0]
	rows := strings.Split(RenderCombined([]Summary{sum}), "\n")
	if !strings.HasPrefix(rows[2], "| exclusive |") {
		t.Fatalf("first row %q, want the exclusive one", rows[2])
	}
}

func TestInsertIntoSection(t *testing.T) {
	other := "# Benchmarks\n\n## Enforcer\n\nfigures of someone else\n"
	cases := []struct{ name, doc, want string }{
		{"empty file", "", "## Packing benchmark\n\nTABLE\n"},
		{"no section", other, other + "\n## Packing benchmark\n\nTABLE\n"},
		{"section last", other + "\n## Packing benchmark\n\nold\n", other + "\n## Packing benchmark\n\nold\n\nTABLE\n"},
		{"section in the middle",
			"# B\n\n## Packing benchmark\n\nold\n\n## Enforcer\n\nkeep\n",
			"# B\n\n## Packing benchmark\n\nold\n\nTABLE\n\n## Enforcer\n\nkeep\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := InsertIntoSection(c.doc, "TABLE"); got != c.want {
				t.Fatalf("got\n%q\nwant\n%q", got, c.want)
			}
		})
	}
}

func TestWriteRawAndLoad(t *testing.T) {
	dir := t.TempDir()
	sum := sampleSummary(1, 2)
	runs := []ArmRun{exclusiveRun(Draw(1))}
	if err := WriteRaw(dir, sum, runs); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"summary.json", "summary.md", "runs.json", "attempts.csv", "jobs.csv"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
	back, err := LoadSummary(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, sum) {
		t.Fatalf("summary did not survive a round trip:\n%+v\n%+v", back, sum)
	}
	csv, _ := os.ReadFile(filepath.Join(dir, "attempts.csv"))
	if n := strings.Count(string(csv), "\n"); n != 13 {
		t.Fatalf("attempts.csv has %d lines, want a header and 12 attempts", n)
	}
	if _, err := LoadSummary(filepath.Join(dir, "nope.json")); err == nil {
		t.Fatal("loading a missing summary should fail")
	}
}
