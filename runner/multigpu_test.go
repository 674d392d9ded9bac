package runner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/report"
	"github.com/gpufrac/gpufrac/size"
)

// Eight equal jobs on two GPUs whose budgets take nine caps each: the runner puts each job on
// the GPU with the most free budget, so each GPU runs four at once (first fit would put all eight
// on GPU0), and the outputs count jobs per GPU and per GPU-hour with the makespan times two GPUs.
func TestPackingAcrossTwoGPUs(t *testing.T) {
	t.Parallel()
	// Budget 40GiB - 2GiB headroom = 38GiB per GPU; a 2GiB peak gets a 4GiB cap: 9 fit on one.
	sim := newSim(t, "A100=40GiB", "A100=40GiB")
	var jobs []queue.Job
	for i := range 8 {
		jobs = append(jobs, simJob(t, fmt.Sprintf("j%d", i), "t", "--peak", "2GiB", "--ramp", "50ms", "--hold", "700ms"))
	}
	q := queue.Queue{Jobs: jobs, Templates: map[string]queue.TemplateSpec{"t": {Name: "t", PeakBytes: 2 * size.GiB}}}
	o := testOptions(t, sim, record.ArmPacked)
	var progress bytes.Buffer
	o.Progress = &progress
	res := runQueue(t, q, o)
	if res.Completed != 8 || len(res.GPUs) != 2 {
		t.Fatalf("completed %d of 8 on %d GPUs", res.Completed, len(res.GPUs))
	}

	onGPU := map[string][]record.Attempt{}
	for _, a := range res.Attempts {
		onGPU[a.GPU] = append(onGPU[a.GPU], a)
	}
	for i, g := range res.GPUs {
		if n := len(onGPU[g.UUID]); n != 4 {
			t.Errorf("GPU%d got %d of the eight jobs, want 4 (most free budget first)", i, n)
		}
		if n := record.UseOf(onGPU[g.UUID]).MostRunning; n != 4 {
			t.Errorf("GPU%d ran %d jobs at once, want 4", i, n)
		}
	}
	if n := record.UseOf(res.Attempts).MostRunning; n != 8 {
		t.Errorf("%d jobs ran at once on both GPUs, want 8", n)
	}

	ms := res.Makespan().Hours()
	sum := 0
	for i, g := range res.GPUs {
		if g.Completed != len(onGPU[g.UUID]) {
			t.Errorf("GPU%d: completed %d, want %d (its attempts, all ok)", i, g.Completed, len(onGPU[g.UUID]))
		}
		if want := float64(g.Completed) / ms; math.Abs(g.JobsPerGPUHour-want) > 1e-6*want {
			t.Errorf("GPU%d: %.3f jobs per GPU-hour, want %.3f", i, g.JobsPerGPUHour, want)
		}
		sum += g.Completed
	}
	if sum != res.Completed {
		t.Errorf("per-GPU completed sum to %d, want %d", sum, res.Completed)
	}
	if want := 8 / (ms * 2); math.Abs(res.JobsPerGPUHour-want) > 1e-6*want {
		t.Errorf("%.3f jobs per GPU-hour, want 8 / (makespan x 2 GPUs) = %.3f", res.JobsPerGPUHour, want)
	}
	if mean := (res.GPUs[0].JobsPerGPUHour + res.GPUs[1].JobsPerGPUHour) / 2; math.Abs(res.JobsPerGPUHour-mean) > 1e-6*mean {
		t.Errorf("run rate %.3f is not the mean of the GPUs' %.3f", res.JobsPerGPUHour, mean)
	}

	data, err := os.ReadFile(filepath.Join(o.OutDir, record.ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	var back record.Result
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	for i, g := range back.GPUs {
		if g.Completed != res.GPUs[i].Completed || g.JobsPerGPUHour != res.GPUs[i].JobsPerGPUHour || g.Busy != res.GPUs[i].Busy {
			t.Errorf("results.json GPU%d: %+v, want %+v", i, g, res.GPUs[i])
		}
	}
	if !bytes.Contains(data, []byte(`"completed": `+fmt.Sprint(res.GPUs[1].Completed))) {
		t.Error(`results.json has no per-GPU "completed"`)
	}

	html, err := os.ReadFile(filepath.Join(o.OutDir, report.File))
	if err != nil {
		t.Fatal(err)
	}
	out := progress.String()
	rate := fmt.Sprintf("%.0f jobs per GPU-hour", res.JobsPerGPUHour)
	wants := []struct {
		where, text string
		in          string
	}{
		{"summary", "8 of 8 jobs completed", out},
		{"summary", "on 2 GPU(s): " + rate, out},
		{"report", "jobs per GPU-hour (completed / makespan x 2 GPUs)", string(html)},
		{"report", fmt.Sprintf(`<b>%.0f</b>`, res.JobsPerGPUHour), string(html)},
		{"summary", "mean of 2 GPUs", out},
	}
	for i, g := range res.GPUs {
		per := fmt.Sprintf("%d jobs completed, %.0f jobs per GPU-hour, busy %.0f%%", g.Completed, g.JobsPerGPUHour, g.Busy*100)
		wants = append(wants,
			struct{ where, text, in string }{"summary", fmt.Sprintf("GPU%d A100: %s", i, per), out},
			struct{ where, text, in string }{"report", fmt.Sprintf("busy %.0f%%, %d jobs completed (%.0f jobs per GPU-hour)", g.Busy*100, g.Completed, g.JobsPerGPUHour), string(html)})
	}
	for _, w := range wants {
		if !strings.Contains(w.in, w.text) {
			t.Errorf("%s lacks %q", w.where, w.text)
		}
	}
	if t.Failed() {
		t.Logf("progress:\n%s", out)
	}
}

// A job whose ladder reaches the GPU alone gets the largest GPU of the run, the most room there
// is: on an 80GiB H100 beside a 141GiB H200, a job that needs 100GiB finishes alone on the H200.
// The GPUs are listed smallest first, so a drain of the first idle GPU ran it alone on the H100's
// 78GiB and stopped it "exhausted: it failed alone with the whole GPU (78GiB), the most room
// there is".
func TestAloneTakesTheLargestGPU(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		gpus []string
	}{
		{"smaller GPU first", []string{"H100=80GiB", "H200=141GiB"}},
		{"larger GPU first", []string{"H200=141GiB", "H100=80GiB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sim := newSim(t, tc.gpus...)
			q := queue.Queue{
				Jobs: []queue.Job{simJob(t, "big", "big", "--peak", "4GiB", "--ramp", "50ms", "--hold", "200ms",
					"--leak-to", "100GiB", "--leak-rate", "200GiB")},
				Templates: map[string]queue.TemplateSpec{"big": {Name: "big", PeakBytes: 4 * size.GiB}},
			}
			res := runQueue(t, q, withoutBorrowing(testOptions(t, sim, record.ArmPacked)))
			checkLadder(t, res, "big", 3, record.OutcomeOK)
			atts := attemptsOf(res, "big")
			last := atts[len(atts)-1]
			for _, g := range res.GPUs {
				if g.UUID == last.GPU && g.BudgetBytes < 100*size.GiB {
					t.Errorf("big's last attempt (whole GPU %v) ran on GPU%d, budget %s: want the 139GiB one", last.WholeGPU, g.Index, g.BudgetBytes)
				}
			}
		})
	}
}
