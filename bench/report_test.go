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
			{Label: "exclusive", Arm: "exclusive", Seed: seed, Jobs: 12, Completed: 12, Makespan: 200 * time.Second, JobsPerGPUHour: 216, Ratio: 1, BusyFraction: 0.31},
			{Label: "packed-mps", Arm: "packed", Mode: "mps", Profiles: "cold", Seed: seed, Jobs: 12, Completed: 11, Makespan: 90 * time.Second,
				JobsPerGPUHour: 440, Ratio: packedRatio, FailedOthers: 1, LeakerCap: 3 * size.GiB, LeakerAction: "oom-in-process",
				LeakerContained: 300 * time.Millisecond, BusyFraction: 0.77,
				PerJob: []JobScore{{Job: "j07-eval-1.7b", Template: Eval17B, Why: "values are not identical"}}},
		}}
}

func TestRenderRun(t *testing.T) {
	out := RenderRun(sampleSummary(1, 2.037))
	for _, want := range []string{
		"#### Seed 1, 2026-11-29 10:00 UTC",
		"`gpufrac-bench run --seed 1`",
		"driver 580.159.04",
		"| exclusive | - | - | 200.0 s | 12 of 12 | 216.0 | 1.000x | 0 | - | - | 31% |",
		"| packed-mps | mps | cold | 90.0 s | 11 of 12 | 440.0 | 2.037x | 1 | 3GiB | 0.3 s (oom-in-process) | 77% |",
		"packed-mps: j07-eval-1.7b not completed: values are not identical",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered table lacks %q:\n%s", want, out)
		}
	}
}

func TestRenderCombined(t *testing.T) {
	out := RenderCombined([]Summary{sampleSummary(2, 1.5), sampleSummary(1, 2.0)})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("want header, rule and 2 rows, got:\n%s", out)
	}
	if lines[0] != "| arm | seed 1 | seed 2 | mean | jobs completed |" {
		t.Fatalf("header %q (seeds must be sorted)", lines[0])
	}
	if want := "| packed-mps | 2.000x (11/12) | 1.500x (11/12) | 1.750x | 22 of 24 |"; lines[3] != want {
		t.Fatalf("row\n got %q\nwant %q", lines[3], want)
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

// A seed's main invocation and a follow-up that re-ran its exclusive arm are two runs: one column
// each, labelled with its start time, each showing only what it ran; the mean counts the seed once.
func TestRenderCombinedSameSeedTwice(t *testing.T) {
	main := sampleSummary(1, 2.0)
	rerun := Summary{Seed: 1, Started: time.Date(2026, 11, 29, 11, 30, 0, 0, time.UTC),
		Scores: []Score{{Label: "exclusive", Arm: "exclusive", Seed: 1, Jobs: 12, Completed: 10, Ratio: 0.95}}}
	other := sampleSummary(2, 1.5)
	in := []Summary{rerun, other, main}
	out := RenderCombined(in)
	if in[0].Started != rerun.Started || in[1].Seed != 2 || in[2].Seed != 1 {
		t.Fatal("RenderCombined reordered the caller's slice (the caller pairs it with its directories)")
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("want header, rule and 2 rows, got:\n%s", out)
	}
	want := []string{
		"| arm | seed 1 (10:00 UTC) | seed 1 (11:30 UTC) | seed 2 | mean | jobs completed |",
		"|---|---|---|---|---|---|",
		"| exclusive | 1.000x (12/12) | 0.950x (10/12) | 1.000x (12/12) | 0.988x | 34 of 36 |",
		"| packed-mps | 2.000x (11/12) | - | 1.500x (11/12) | 1.750x | 22 of 24 |",
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d\n got %q\nwant %q", i, lines[i], want[i])
		}
	}
	// Two invocations in the same minute are told apart to the second.
	rerun.Started = main.Started.Add(20 * time.Second)
	head := strings.SplitN(RenderCombined([]Summary{main, rerun}), "\n", 2)[0]
	if head != "| arm | seed 1 (2026-11-29 10:00:00 UTC) | seed 1 (2026-11-29 10:00:20 UTC) | mean | jobs completed |" {
		t.Fatalf("header %q", head)
	}
}
