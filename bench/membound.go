package bench

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// MemBound is the most an arm's guarantees let any schedule gain over the exclusive run.
//
// Two jobs whose guarantees each exceed half a GPU's budget never hold them on that GPU at once,
// and a job shares a GPU no faster than it runs alone, so the jobs of an arm whose guarantees
// are that large run no faster than their exclusive times added up, spread over the arm's
// GPUs: the floor. No schedule with these guarantees beats the exclusive run by more than its
// makespan over the floor. The SM bound says what the SMs allow; this says what memory does.
// On the H200's busy queue (seed 1, 2026-12-03) eight of twelve guarantees were 73-110 GiB of a
// 138.4 GiB budget: the memory bound was 1.47x where the SM bound was 1.84x, and the queue ran
// one job at a time once its first wave ended. It counts guarantees, not what borrowers took
// past them, so a borrower's growth can make the arm slower than the bound says.
type MemBound struct {
	// Big are the jobs whose guarantee exceeded half their GPU's budget.
	Big []string `json:"big_jobs"`
	// Floor is their exclusive times added up, over the arm's GPUs.
	Floor time.Duration `json:"floor_ns"`
	// Bound is the exclusive runs' mean makespan over Floor.
	Bound float64 `json:"memory_bound"`
	// OfBound is the arm's Ratio over Bound.
	OfBound float64 `json:"of_memory_bound,omitempty"`
}

// budgetOf is each GPU's budget, as the runner recorded it, or, for runs recorded before it
// was kept, the most any attempt on the GPU could hold when borrowing (its budget): 0 for a GPU
// where nothing borrowed.
func budgetOf(run ArmRun) map[string]size.Bytes {
	if len(run.Budgets) > 0 {
		return run.Budgets
	}
	b := map[string]size.Bytes{}
	for _, a := range run.Attempts {
		b[a.GPU] = max(b[a.GPU], a.LimitBytes)
	}
	return b
}

// shareOf is an attempt's guarantee over its GPU's budget: 0 uncapped, with the whole GPU, or
// where no budget is known.
func shareOf(a record.Attempt, budgets map[string]size.Bytes) float64 {
	if a.WholeGPU || capOf(a) == 0 || budgets[a.GPU] == 0 {
		return 0
	}
	return float64(capOf(a)) / float64(budgets[a.GPU])
}

// bigJobs fills each job's guarantee share from its final attempt, for a score written before
// ScoreRun kept it.
func bigJobs(run ArmRun, jobs []JobScore) {
	budgets := budgetOf(run)
	final := finalAttempts(run)
	for i := range jobs {
		if a, ok := final[jobs[i].Job]; ok {
			jobs[i].Share = shareOf(a, budgets)
		}
	}
}

// SetMemBounds fills the memory bound of every arm that is not exclusive and placed a guarantee
// above half a GPU's budget, from the complete exclusive runs of its seed and profile that timed
// each of those jobs. Run it after SetRatios.
func SetMemBounds(scores []Score) {
	walls := map[baselineKey]map[string][]time.Duration{}
	spans := map[baselineKey][]time.Duration{}
	for _, s := range scores {
		if s.Arm != record.ArmExclusive || s.unfinished() || s.Makespan <= 0 {
			continue
		}
		k := keyOf(s)
		if walls[k] == nil {
			walls[k] = map[string][]time.Duration{}
		}
		for _, j := range s.PerJob {
			if j.Wall > 0 {
				walls[k][j.Job] = append(walls[k][j.Job], j.Wall)
			}
		}
		spans[k] = append(spans[k], s.Makespan)
	}
	for i := range scores {
		s := &scores[i]
		s.Mem = nil
		k := keyOf(*s)
		if s.Arm == record.ArmExclusive || len(spans[k]) == 0 {
			continue
		}
		var mb MemBound
		for _, j := range s.PerJob {
			if j.Share <= 0.5 {
				continue
			}
			w := walls[k][j.Job]
			if len(w) == 0 {
				mb.Big = nil // a big job the exclusive runs did not time: no floor
				break
			}
			mb.Big = append(mb.Big, j.Job)
			mb.Floor += mean(w)
		}
		if len(mb.Big) == 0 {
			continue
		}
		mb.Floor /= time.Duration(max(s.GPUs, 1))
		mb.Bound = mean(spans[k]).Seconds() / mb.Floor.Seconds()
		if s.Ratio > 0 {
			mb.OfBound = s.Ratio / mb.Bound
		}
		s.Mem = &mb
	}
}

func mean(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t / time.Duration(len(ds))
}

// memLines are the report's lines on the memory bounds of scores.
func memLines(scores []Score) []string {
	var lines []string
	for _, s := range scores {
		m := s.Mem
		if m == nil {
			continue
		}
		of := ""
		if m.OfBound > 0 {
			of = fmt.Sprintf("; it reached %s (%s of it)", fmtRatio(s), fmtPct(m.OfBound))
		}
		lines = append(lines, fmt.Sprintf("memory bound of %s: %d job(s) held guarantees above half the GPU's budget (%s), whose exclusive runs add up to %.1f s per GPU: with these guarantees no schedule beats the exclusive run by more than %.2fx%s",
			s.Label, len(m.Big), strings.Join(m.Big, ", "), m.Floor.Seconds(), m.Bound, of))
	}
	return lines
}

// gpusOf is how many GPUs the run's attempts used.
func gpusOf(run ArmRun) int {
	seen := map[string]bool{}
	for _, a := range run.Attempts {
		seen[a.GPU] = true
	}
	return len(seen)
}

// finalAttempts is each job's last attempt.
func finalAttempts(run ArmRun) map[string]record.Attempt {
	final := map[string]record.Attempt{}
	for _, a := range run.Attempts {
		if f, ok := final[a.Job]; !ok || a.Start.After(f.Start) {
			final[a.Job] = a
		}
	}
	return final
}
