package runner

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
)

// pinnedSM is the SM-active share the simulated GPUs' performance monitors report in these
// tests: pinned, so a share learned over any stretch of a run is exactly it.
const pinnedSM = 37.5

// smOptions is a run on a simulated GPU of model whose performance monitor (when it has one)
// reports share, with its ledger in a directory of the test's and its progress in out.
func smOptions(t *testing.T, model string, share float64, mode policy.Mode, out *bytes.Buffer) Options {
	t.Helper()
	sim := newSim(t, model)
	devs, err := sim.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if gpu.SimHasGPM(devs[0].Model) {
		if err := sim.SetGPM(devs[0].UUID, &gpu.SimLoad{SMUtil: share, SMOccupancy: 20}); err != nil {
			t.Fatal(err)
		}
	}
	o := testOptions(t, sim, record.ArmPacked)
	o.StateDir, o.GPMInterval, o.Progress = t.TempDir(), 50*time.Millisecond, out
	o.Policy.Mode = mode
	return o
}

// sharesOf are the SM-active shares the run's ledger stored, by template.
func sharesOf(t *testing.T, stateDir string) map[string]float64 {
	t.Helper()
	snap, err := ledger.ReadSnapshot(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, p := range snap.Profiles {
		if p.SMActivePercent != nil {
			out[p.Template] = *p.SMActivePercent
		}
	}
	return out
}

// A probe attempt that has its GPU to itself from start to end learns its template's SM-active
// share and stores it with the footprint; one that shared the GPU with another job at any moment
// learns nothing (GPM is the GPU's figure, not the job's), nor does one on a GPU without a
// performance monitor: the share stays unknown there, never 0.
func TestRunLearnsSMShare(t *testing.T) {
	t.Parallel()
	probeAlone := func(t *testing.T) queue.Queue {
		return queue.Queue{Jobs: []queue.Job{simJob(t, "p1", "new", "--peak", "2GiB", "--ramp", "50ms", "--hold", "600ms")}}
	}
	joinedQueue := func(t *testing.T) queue.Queue {
		q := probeQueue(t)
		q.Jobs, q.Templates = q.Jobs[1:], nil
		return q
	}
	tests := []struct {
		name   string
		model  string
		mode   policy.Mode
		window time.Duration
		q      func(t *testing.T) queue.Queue
		want   bool // template "new" learns pinnedSM
		// off: the caller reads the monitors itself (GPMInterval < 0), as the benchmark does
		off bool
	}{
		{"in place, alone all along", "H100=80GiB", policy.ModeIsolated, 0, probeAlone, true, false},
		{"alone under MPS, stopped by its window", "H100=80GiB", policy.ModeMPS, 300 * time.Millisecond, probeAlone, true, false},
		{"in place beside a running job", "H100=80GiB", policy.ModeIsolated, 300 * time.Millisecond, probeQueue, false, false},
		// p2 starts beside p1 when p1's window ends and ends first: p1 ends alone, but shared
		// its GPU for a while.
		{"alone, then joined for a while", "H100=80GiB", policy.ModeIsolated, 300 * time.Millisecond, joinedQueue, false, false},
		{"a GPU without GPM", "A100=80GiB", policy.ModeIsolated, 0, probeAlone, false, false},
		{"metering off: the caller reads the monitor", "H100=80GiB", policy.ModeIsolated, 0, probeAlone, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			o := smOptions(t, tc.model, pinnedSM, tc.mode, &out)
			o.ProbeWindow = tc.window
			if tc.off {
				o.GPMInterval = -1
			}
			res := runAll(t, tc.q(t), o)
			defer func() {
				if t.Failed() {
					t.Logf("progress:\n%s", out.String())
				}
			}()
			if p := attemptsOf(res, "p1"); len(p) == 0 || !p[0].Probe {
				t.Fatalf("p1: want a probe attempt first, got %+v", p)
			}
			shares := sharesOf(t, o.StateDir)
			got, ok := shares["new"]
			switch {
			case tc.want && (!ok || math.Abs(got-pinnedSM) > 0.5):
				t.Fatalf("stored shares %v: want template new at %g%% (the GPU's monitor) within 0.5", shares, pinnedSM)
			case !tc.want && len(shares) > 0:
				t.Fatalf("stored shares %v: want none", shares)
			}
			learned := strings.Contains(out.String(), "learned ")
			if learned != tc.want {
				t.Errorf("a progress line says a share was learned: %v, want %v", learned, tc.want)
			}
		})
	}
}

// The share a probe learns is what the compute budget counts its template's jobs for from then
// on. Three jobs of a template nobody measured, under a budget of 100%: while its share is
// unknown (a GPU without GPM) nothing limits them and they overlap; once the probe learned 80%
// on a GPU with GPM, two of them would exceed the budget, so they run one after the other.
func TestLearnedShareDrivesTheComputeBudget(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		model       string
		warm        bool // a second run, from the first one's ledger
		wantOverlap bool
	}{
		{"learned by the probe", "H100=80GiB", false, false},
		{"unknown without GPM", "A100=80GiB", false, true},
		// The GPU's monitor reads 0 in the second run: had it measured again, or forgotten the
		// share, the jobs would overlap.
		{"stored for a warm run", "H100=80GiB", true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			// Under MPS the probe runs alone and its window stops it: the other jobs wait for it.
			o := smOptions(t, tc.model, 80, policy.ModeMPS, &out)
			o.ProbeWindow, o.Policy.SMBudgetPercent = 200*time.Millisecond, 100
			var q queue.Queue
			for _, n := range []string{"b1", "b2", "b3"} {
				q.Jobs = append(q.Jobs, simJob(t, n, "b", "--peak", "1GiB", "--ramp", "50ms", "--hold", "800ms"))
			}
			res := runAll(t, q, o)
			if tc.warm {
				sim := o.Backend.(*gpu.Simulated)
				devs, err := sim.Devices(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if err := sim.SetGPM(devs[0].UUID, &gpu.SimLoad{}); err != nil {
					t.Fatal(err)
				}
				o.OutDir = t.TempDir()
				if res = runAll(t, q, o); slices.ContainsFunc(res.Attempts, func(a record.Attempt) bool { return a.Probe }) {
					t.Fatalf("the warm run probed again: %+v", res.Attempts)
				}
			}
			defer func() {
				if t.Failed() {
					t.Logf("progress:\n%s", out.String())
				}
			}()
			var runs []record.Attempt
			for _, a := range res.Attempts {
				if !a.Probe {
					runs = append(runs, a)
				}
			}
			if len(runs) != 3 {
				t.Fatalf("want three attempts after the probe, got %d: %+v", len(runs), res.Attempts)
			}
			slices.SortFunc(runs, func(a, b record.Attempt) int { return a.Start.Compare(b.Start) })
			overlap := false
			for i := 1; i < len(runs); i++ {
				overlap = overlap || runs[i].Start.Before(runs[i-1].End)
			}
			if overlap != tc.wantOverlap {
				t.Fatalf("jobs of template b overlapped: %v, want %v (attempts %v)", overlap, tc.wantOverlap, spans(runs))
			}
		})
	}
}

func spans(as []record.Attempt) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Job+" "+a.Start.Format("15:04:05.000")+"-"+a.End.Format("15:04:05.000")+" "+a.CapBytes.String())
	}
	return out
}
