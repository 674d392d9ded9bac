package runner

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// besideBig is a queue of n1, a job of known 60 GiB cap that holds its memory 3 s, then jobs;
// templates gets big's.
func besideBig(t *testing.T, templates map[string]queue.TemplateSpec, jobs ...queue.Job) queue.Queue {
	templates["big"] = queue.TemplateSpec{Name: "big", PeakBytes: 60 * size.GiB, CapBytes: 60 * size.GiB}
	n1 := simJob(t, "n1", "big", "--peak", "60GiB", "--ramp", "50ms", "--hold", "3s")
	return queue.Queue{Jobs: append([]queue.Job{n1}, jobs...), Templates: templates}
}

// stagingOptions is a packed run on a simulated 80 GiB GPU, borrowing (wait), staging stage jobs.
func stagingOptions(t *testing.T, stage int) Options {
	o := testOptions(t, newSim(t, "H100=80GiB"), record.ArmPacked)
	o.Borrow, o.Stage = node.BorrowWait, stage
	return o
}

// A job whose guarantee does not fit beside a running one starts staged (gpufrac run --stage):
// its process starts up at once on a unit, its first small block passes, its large allocation
// waits for its guarantee, which is granted when the other job ends; its record shows the
// grant, and nobody fails. Without staging it starts only after the other job ended.
func TestStagedJobStartsUpBeforeItsMemoryIsFree(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		stage int
	}{{"staged", 2}, {"not staged", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := besideBig(t, map[string]queue.TemplateSpec{"good": {Name: "good", PeakBytes: 30 * size.GiB, CapBytes: 30 * size.GiB}},
				simJob(t, "late", "good", "--first", "2MiB", "--settle", "1s", "--peak", "30GiB", "--ramp", "50ms", "--hold", "100ms"))
			o := stagingOptions(t, tc.stage)
			res := runAll(t, q, o)
			n1, late := attemptsOf(res, "n1"), attemptsOf(res, "late")
			if len(n1) != 1 || n1[0].Outcome != record.OutcomeOK {
				t.Fatalf("n1 was harmed: %+v", n1)
			}
			if len(late) != 1 || late[0].Outcome != record.OutcomeOK || late[0].Violation != nil || late[0].PeakBytes < 30*size.GiB {
				t.Fatalf("late: want one clean attempt that reached 30GiB, got %+v", late)
			}
			l := late[0]
			if tc.stage == 0 {
				if l.Start.Before(n1[0].End) || len(l.CapChanges) != 0 {
					t.Fatalf("without staging late started at %s, before n1 ended (%s), or changed cap: %+v", l.Start, n1[0].End, l)
				}
				return
			}
			if !l.Start.Before(n1[0].End) {
				t.Fatalf("staged, late started at %s, after n1 ended (%s)", l.Start, n1[0].End)
			}
			if len(l.CapChanges) != 1 || l.CapChanges[0].From != size.GiB || l.CapChanges[0].To != 30*size.GiB || l.CapBytes != 30*size.GiB {
				t.Fatalf("late's record: cap %s, changes %+v; want staged on 1GiB, granted 30GiB", l.CapBytes, l.CapChanges)
			}
			if l.CapChanges[0].At.Before(n1[0].End) {
				t.Fatalf("late granted at %s, before n1 ended at %s", l.CapChanges[0].At, n1[0].End)
			}
		})
	}
}

// A borrower whose wait only a staged job's unit stands in the way of is not left waiting: the
// staged job is stopped (its attempt "unstaged", not counted), the borrower grows to its end,
// and the job then runs as it would have. Nobody fails.
func TestStagedJobMakesWayForABlockedBorrower(t *testing.T) {
	t.Parallel()
	q := queue.Queue{
		Jobs: []queue.Job{
			simJob(t, "n1", "big", "--peak", "50GiB", "--ramp", "50ms", "--hold", "2s"),
			// 77.9 GiB fenced at its end (its 500 MiB context is not): beside a staged job,
			// whose 1 GiB unit gives the fence a 256 MiB guarantee with its context on top, it
			// cannot fit the 78 GiB budget; alone it does.
			simJob(t, "lk", "leak", "--peak", "1GiB", "--ramp", "50ms", "--hold", "200ms", "--leak-to", "80280MiB", "--leak-rate", "20GiB"),
			simJob(t, "late", "good", "--peak", "30GiB", "--ramp", "50ms", "--hold", "100ms"),
		},
		Templates: map[string]queue.TemplateSpec{
			"big":  {Name: "big", PeakBytes: 50 * size.GiB, CapBytes: 50 * size.GiB},
			"leak": {Name: "leak", PeakBytes: size.GiB},
			"good": {Name: "good", PeakBytes: 30 * size.GiB, CapBytes: 30 * size.GiB},
		},
	}
	o := stagingOptions(t, 1)
	res := runAll(t, q, o)
	if n1 := attemptsOf(res, "n1"); len(n1) != 1 || n1[0].Outcome != record.OutcomeOK {
		t.Fatalf("n1 was harmed: %+v", n1)
	}
	lk := attemptsOf(res, "lk")
	if len(lk) != 1 || lk[0].Outcome != record.OutcomeOK || lk[0].PeakBytes < 77*size.GiB {
		t.Fatalf("leaker: want one attempt that grew to 78GiB, got %+v", lk)
	}
	late := attemptsOf(res, "late")
	// Once stopped, it is not staged again beside the borrower it made way for.
	if got := outcomes(late); !slices.Equal(got, []record.Outcome{record.OutcomeUnstaged, record.OutcomeOK}) {
		t.Fatalf("late: attempts %v, want [unstaged ok]: %+v", got, late)
	}
	if late[0].End.After(lk[0].End) {
		t.Fatalf("late's staged start was stopped at %s, after the leaker ended at %s", late[0].End, lk[0].End)
	}
	for _, j := range res.Jobs {
		if j.Name == "late" && j.Outcome != record.OutcomeOK {
			t.Fatalf("late's result: %+v", j)
		}
	}
}

// Where the first staged job's grant is refused beside the other staged jobs' units alone, the
// newest staged job makes way (unstaged, queued again), in isolated mode and under MPS with
// borrowing. Under MPS it is the newest that waits in the fence, blocked in its allocation, and
// it ends by a refusal inside it (its promise withdrawn), not by a forced stop: no GPU-wide
// event, no neighbour touched.
func TestStagedJobMakesWayForTheFirstStagedJob(t *testing.T) {
	t.Parallel()
	for _, mode := range []policy.Mode{policy.ModeIsolated, policy.ModeMPS} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			// head's 77.5 GiB cap takes 78 of the budget's 78 units: beside late's staged unit
			// it is never granted; its 76 GiB and context fit an MPS client's pinned limit.
			q := besideBig(t, map[string]queue.TemplateSpec{
				"huge": {Name: "huge", PeakBytes: 76 * size.GiB, CapBytes: 77*size.GiB + 512*size.MiB},
				"good": {Name: "good", PeakBytes: 20 * size.GiB, CapBytes: 20 * size.GiB},
			},
				simJob(t, "head", "huge", "--peak", "76GiB", "--ramp", "50ms", "--hold", "100ms"),
				simJob(t, "late", "good", "--peak", "20GiB", "--ramp", "50ms", "--hold", "100ms"))
			o := stagingOptions(t, 2)
			o.Mode = mode
			var out strings.Builder
			o.Progress = &out
			res := runAll(t, q, o)
			if n1 := attemptsOf(res, "n1"); len(n1) != 1 || n1[0].Outcome != record.OutcomeOK {
				t.Errorf("n1 was harmed: %+v", n1)
			}
			head, late := attemptsOf(res, "head"), attemptsOf(res, "late")
			if len(head) != 1 || head[0].Outcome != record.OutcomeOK || len(head[0].CapChanges) != 1 {
				t.Errorf("head: want one attempt, staged then granted, got %+v", head)
			}
			if got := outcomes(late); !slices.Equal(got, []record.Outcome{record.OutcomeUnstaged, record.OutcomeOK}) {
				t.Errorf("late: attempts %v, want [unstaged ok]: %+v", got, late)
			} else if len(head) == 1 && late[1].Start.Before(head[0].End) {
				t.Errorf("late ran again at %s, before head ended at %s", late[1].Start, head[0].End)
			}
			if strings.Contains(out.String(), "unhealthy") || strings.Contains(out.String(), "SIGKILL") {
				t.Errorf("a forced stop, or a GPU-wide event")
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("progress:\n%s", out.String())
			}
		})
	}
}

// Under MPS with borrowing a stop of a borrower that holds memory outside the fence is a
// GPU-wide event: the GPU is drained until the clients it had then are gone, and a staged job is
// one of them. Its grant passes the drain's mark (it adds no task), so it runs once the memory
// is free, the drain ends with it, and it is neither left waiting on a drain that waits for it
// nor unstaged and started again: what an H100 did before (leakers.sh, 2026-12-06).
func TestStagedJobIsGrantedThroughADrainItHolds(t *testing.T) {
	t.Parallel()
	// The borrower goes past its cap only once the others hold their contexts: they are the
	// clients the drain waits for, however slowly a loaded machine starts them.
	marks := t.TempDir()
	n1Mark, lateMark := filepath.Join(marks, "n1"), filepath.Join(marks, "late")
	q := besideBig(t, map[string]queue.TemplateSpec{
		"leak": {Name: "leak", PeakBytes: size.GiB},
		"good": {Name: "good", PeakBytes: 20 * size.GiB, CapBytes: 30 * size.GiB},
	},
		simJob(t, "lk", "leak", "--after", n1Mark+","+lateMark, "--peak", "1GiB", "--ramp", "50ms", "--hold", "2s", "--outside-fence", "3GiB"),
		simJob(t, "late", "good", "--mark", lateMark, "--first", "2MiB", "--settle", "200ms", "--peak", "20GiB", "--ramp", "50ms", "--hold", "300ms"))
	q.Jobs[0].Command = append(q.Jobs[0].Command, "--mark", n1Mark) // besideBig puts n1 first
	o := stagingOptions(t, 2)
	o.Mode = policy.ModeMPS
	var out strings.Builder
	o.Progress = &out
	res := runAll(t, q, o)
	defer func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("progress:\n%s", out.String())
		}
	}()
	if len(res.GPUEvents) == 0 {
		t.Fatal("no GPU-wide event: the borrower outside the fence was not stopped under MPS")
	}
	if n1 := attemptsOf(res, "n1"); len(n1) != 1 || n1[0].Outcome != record.OutcomeOK {
		t.Errorf("n1 was harmed: %+v", n1)
	}
	late := attemptsOf(res, "late")
	if got := outcomes(late); !slices.Equal(got, []record.Outcome{record.OutcomeOK}) {
		t.Fatalf("late: attempts %v, want one, ok: %+v", got, late)
	}
	l, ev := late[0], res.GPUEvents[0]
	if len(l.CapChanges) != 1 || l.CapChanges[0].From != size.GiB || l.CapChanges[0].To != 30*size.GiB || l.Start.After(ev.Start) {
		t.Fatalf("late: started %s (event %s), cap changes %+v; want staged on 1GiB before the event, then granted 30GiB",
			l.Start, ev.Start, l.CapChanges)
	}
	if at := l.CapChanges[0].At; at.Before(ev.Start) || !ev.End.IsZero() && !at.Before(ev.End) {
		t.Errorf("late granted at %s, want during the drain (%s to %s)", at, ev.Start, ev.End)
	}
	if strings.Contains(out.String(), "unstaged") {
		t.Errorf("a staged job was unstaged")
	}
}

// A probe that borrows, whose small guarantee does not fit now, starts staged like any job, and
// its window opens at its grant, not while its allocations wait: the footprint its template
// keeps is what it used once it ran. A window opened at its first memory would have closed
// during the wait, on its stage's few MiB.
func TestStagedProbeMeasuresAfterItsGrant(t *testing.T) {
	t.Parallel()
	// Guarantees of 60 and 17 GiB leave 1 GiB of the 78 GiB budget: a stage, not the probe's
	// 2 GiB.
	q := besideBig(t, map[string]queue.TemplateSpec{"mid": {Name: "mid", PeakBytes: 16 * size.GiB, CapBytes: 17 * size.GiB}},
		simJob(t, "n2", "mid", "--peak", "16GiB", "--ramp", "50ms", "--hold", "1s"),
		simJob(t, "p", "cold", "--first", "2MiB", "--settle", "100ms", "--peak", "6GiB", "--ramp", "50ms", "--hold", "1s"))
	o := stagingOptions(t, 2)
	o.StateDir, o.ProbeWindow = t.TempDir(), 400*time.Millisecond
	res := runAll(t, q, o)
	n2, p := attemptsOf(res, "n2"), attemptsOf(res, "p")
	if len(n2) != 1 || n2[0].Outcome != record.OutcomeOK {
		t.Fatalf("n2 was harmed: %+v", n2)
	}
	if len(p) != 1 || p[0].Outcome != record.OutcomeOK || !p[0].Probe || p[0].PeakBytes < 6*size.GiB {
		t.Fatalf("p: want one probe that reached 6GiB and finished, got %+v", p)
	}
	if !p[0].Start.Before(n2[0].End) || len(p[0].CapChanges) == 0 || p[0].CapChanges[0].From != size.GiB {
		t.Fatalf("p started at %s (n2 ended %s), cap changes %+v: want staged on 1GiB before n2 ended",
			p[0].Start, n2[0].End, p[0].CapChanges)
	}
	if pr, all := storedProfile(t, o.StateDir, "cold"); pr.PeakBytes < 6*size.GiB {
		t.Fatalf("profiles %+v: want the 6GiB the probe used after its grant for template cold", all)
	}
}

// A --stage that cannot work says why in the run's first lines, and stages nothing.
func TestStagePlanSaysWhyNot(t *testing.T) {
	for _, tc := range []struct {
		name   string
		o      Options
		fenced bool
		rule   string
		want   int
		note   string
	}{
		{"not asked", Options{Arm: record.ArmPacked}, true, node.BorrowWait, 0, ""},
		{"on", Options{Arm: record.ArmPacked, Stage: 3}, true, node.BorrowWait, 3, "up to 3 job(s) a GPU"},
		{"a baseline", Options{Arm: record.ArmStatic, Stage: 3}, true, node.BorrowOff, 0, "the static arm"},
		{"no fence", Options{Arm: record.ArmPacked, Stage: 3}, false, node.BorrowOff, 0, "no allocation fence"},
		{"mps", Options{Arm: record.ArmPacked, Stage: 3, Policy: policy.Policy{Mode: policy.ModeMPS}}, true, node.BorrowOff, 0, "mps mode"},
		{"mps, borrowing", Options{Arm: record.ArmPacked, Stage: 3, Policy: policy.Policy{Mode: policy.ModeMPS}}, true, node.BorrowWait, 3, "up to 3 job(s) a GPU"},
		{"mps, borrowing now", Options{Arm: record.ArmPacked, Stage: 3, Policy: policy.Policy{Mode: policy.ModeMPS}}, true, node.BorrowNow, 3, "up to 3 job(s) a GPU"},
		{"the default, mps, borrowing", Options{Arm: record.ArmPacked, Stage: DefaultStage, StageByDefault: true, Policy: policy.Policy{Mode: policy.ModeMPS}}, true, node.BorrowWait, DefaultStage, "up to 6 job(s)"},
		{"lend", Options{Arm: record.ArmPacked, Stage: 3}, true, node.BorrowLend, 0, "--borrow lend"},
		{"the default", Options{Arm: record.ArmPacked, Stage: DefaultStage, StageByDefault: true}, true, node.BorrowWait, DefaultStage, "up to 6 job(s)"},
		{"the default, mps", Options{Arm: record.ArmPacked, Stage: DefaultStage, StageByDefault: true, Policy: policy.Policy{Mode: policy.ModeMPS}}, true, node.BorrowOff, 0, ""},
		{"the default, exclusive", Options{Arm: record.ArmExclusive, Stage: DefaultStage, StageByDefault: true}, true, node.BorrowOff, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.o.Policy.Mode == "" {
				tc.o.Policy.Mode = policy.ModeIsolated
			}
			n, note := stagePlan(tc.o, tc.fenced, tc.rule)
			if n != tc.want || !strings.Contains(note, tc.note) || (tc.note == "") != (note == "") {
				t.Fatalf("stagePlan: %d, %q; want %d and a note with %q", n, note, tc.want, tc.note)
			}
		})
	}
}

// --probe-guarantee known says in the run's first lines what it does, or that it does nothing
// where nobody borrows; unasked, no line.
func TestProbeKnownNote(t *testing.T) {
	if n := probeKnownNote(Options{}, true); n != "" {
		t.Errorf("unasked: note %q, want none", n)
	}
	if n := probeKnownNote(Options{ProbeKnown: true}, false); !strings.Contains(n, "does nothing here") {
		t.Errorf("nobody borrows: note %q, want one saying it does nothing", n)
	}
	if n := probeKnownNote(Options{ProbeKnown: true}, true); !strings.Contains(n, "the median of the caps known") {
		t.Errorf("on: note %q, want one saying what a probe is guaranteed", n)
	}
}

// --probe-cap holds only in-place probes that do not borrow; where none run so, the run's first
// lines say it does nothing, and why, rather than take it without a word.
func TestProbeCapNote(t *testing.T) {
	isolated, mps := policy.Default(), policy.Default()
	isolated.Mode, mps.Mode = policy.ModeIsolated, policy.ModeMPS
	capped := Options{Arm: record.ArmPacked, Policy: isolated, ProbeCap: 30 * size.GiB}
	for _, tc := range []struct {
		name    string
		o       Options
		borrows bool
		want    string // "" for no line
	}{
		{"not asked", Options{Arm: record.ArmPacked, Policy: isolated}, true, ""},
		{"probes under it", capped, false, ""},
		{"borrowing", capped, true, "--probe-cap does nothing here (a probe that borrows holds a small guarantee and no protective cap; --borrow off gives probes one)"},
		{"mps", Options{Arm: record.ArmPacked, Policy: mps, ProbeCap: size.GiB}, false, "--probe-cap does nothing here (in mps mode a probe runs alone, on the whole GPU)"},
		{"another arm", Options{Arm: record.ArmExclusive, Policy: isolated, ProbeCap: size.GiB}, false, "--probe-cap does nothing here (the exclusive arm probes nothing)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := probeCapNote(tc.o, tc.borrows)
			if (tc.want == "") != (n == "") || !strings.Contains(n, tc.want) {
				t.Fatalf("note %q, want %q", n, tc.want)
			}
		})
	}
}
