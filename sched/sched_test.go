package sched

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/size"
	"github.com/hashicorp/go-hclog"
)

// memLedger is an in-memory ledger with one GPU of total bytes.
func memLedger(tb testing.TB, total size.Bytes) (*ledger.Ledger, string) {
	tb.Helper()
	return memLedgerOpts(tb, total, ledger.Options{})
}

// memLedgerOpts is memLedger with opts (a clock, a borrower hold); it is always in memory.
func memLedgerOpts(tb testing.TB, total size.Bytes, opts ledger.Options) (*ledger.Ledger, string) {
	tb.Helper()
	opts.NoPersist = true
	led, err := ledger.Open("", opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { led.Close() })
	const uuid = "GPU-test-0"
	if err := led.SetPolicy(policy.Default()); err != nil {
		tb.Fatal(err)
	}
	if err := led.SyncGPUs([]ledger.GPUInfo{{UUID: uuid, Model: "H200", TotalBytes: total, Healthy: true}}); err != nil {
		tb.Fatal(err)
	}
	return led, uuid
}

// schedOn is a scheduler of jobs under the default policy on one in-memory GPU of total bytes,
// at most maxTotal at once (0: no bound), with that GPU's ledger and UUID.
func schedOn(tb testing.TB, total size.Bytes, maxTotal int, jobs []*Job) (*Sched, *ledger.Ledger, string) {
	tb.Helper()
	led, uuid := memLedger(tb, total)
	return newSched(policy.Default(), led, []string{uuid}, jobs, maxTotal, hclog.NewNullLogger()), led, uuid
}

func names(ls []Launch) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Job.Name)
	}
	return out
}

func TestSchedDrainsForAWholeGPUJob(t *testing.T) {
	jobs := []*Job{
		{Job: queue.Job{Name: "a", Template: "t"}},
		{Job: queue.Job{Name: "b", Template: "t"}},
		{Job: queue.Job{Name: "big", Template: "big"}},
		{Job: queue.Job{Name: "c", Template: "t"}},
	}
	s, led, uuid := schedOn(t, 80*size.GiB, 0, jobs)
	s.peaks["t"] = 10 * size.GiB // cap 13GiB of the 78GiB budget
	first := s.Next()
	// "big" has no footprint: it must be probed alone, so it drains the GPU; "c" is not
	// admitted next to a/b because the GPU is draining for "big".
	if got := fmt.Sprint(names(first)); got != "[a b]" {
		t.Fatalf("first round admitted %s, want [a b] (big drains the GPU, c waits behind it)", got)
	}
	if s.drainFor[uuid] != jobs[2] {
		t.Fatalf("GPU not drained for the probe")
	}
	for i := range first {
		s.Finished(&first[i])
		first[i].Job.Done = true
		if err := led.Release(first[i].Res.Token, "test"); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if got := s.Next(); len(got) != 0 {
				t.Fatalf("admitted %v while the GPU drains", names(got))
			}
		}
	}
	second := s.Next()
	if len(second) != 1 || second[0].Job.Name != "big" || !second[0].Probe || !second[0].Whole {
		t.Fatalf("second round %v, want the probe of big alone", names(second))
	}
	if second[0].Res.CapBytes != 78*size.GiB {
		t.Errorf("probe cap %s, want the whole 78GiB budget", second[0].Res.CapBytes)
	}
	if got := s.Next(); len(got) != 0 {
		t.Fatalf("admitted %v next to a whole-GPU probe", names(got))
	}
}

// A job that asked for a whole GPU and drained one, whose template's footprint then comes down
// to a cap that fits, is admitted under that cap, and the drain ends.
func TestSchedUndrainsAJobThatNoLongerNeedsAWholeGPU(t *testing.T) {
	jobs := []*Job{
		{Job: queue.Job{Name: "a", Template: "t"}},
		{Job: queue.Job{Name: "big", Template: "big"}},
		{Job: queue.Job{Name: "c", Template: "t"}},
	}
	s, _, uuid := schedOn(t, 80*size.GiB, 0, jobs)
	s.peaks["t"] = 10 * size.GiB
	s.peaks["big"] = 70 * size.GiB // cap 82GiB: more than the 78GiB budget
	if got := fmt.Sprint(names(s.Next())); got != "[a]" || s.drainFor[uuid] != jobs[1] {
		t.Fatalf("first round admitted %s, drain for %v: want [a] and the GPU drained for big", got, s.drainFor[uuid])
	}
	s.Learned("big", 2*size.GiB)
	got := s.Next()
	if fmt.Sprint(names(got)) != "[big c]" || got[0].Whole || s.drainFor[uuid] != nil {
		t.Fatalf("after big's footprint came down: admitted %v (whole %v), drain for %v; want [big c] capped, no drain",
			names(got), len(got) > 0 && got[0].Whole, s.drainFor[uuid])
	}
}

func TestSchedBackfillsSmallerJobs(t *testing.T) {
	s, _, _ := schedOn(t, 40*size.GiB, 0, []*Job{ // budget 38GiB
		{Job: queue.Job{Name: "m1", Template: "m"}},
		{Job: queue.Job{Name: "m2", Template: "m"}},
		{Job: queue.Job{Name: "s1", Template: "s"}},
	})
	s.peaks["m"] = 20 * size.GiB // cap 24.4GiB -> 25 units: one fits, the second does not
	s.peaks["s"] = 2 * size.GiB  // cap 4GiB
	got := names(s.Next())
	if fmt.Sprint(got) != "[m1 s1]" {
		t.Fatalf("admitted %v, want [m1 s1]: m2 does not fit, s1 is backfilled", got)
	}
}

func TestSchedRespectsMaxConcurrent(t *testing.T) {
	var jobs []*Job
	for i := range 5 {
		jobs = append(jobs, &Job{Job: queue.Job{Name: fmt.Sprint("j", i), Template: "t"}})
	}
	s, _, _ := schedOn(t, 140*size.GiB, 2, jobs)
	s.peaks["t"] = size.GiB
	if got := s.Next(); len(got) != 2 {
		t.Fatalf("admitted %d with MaxConcurrent 2", len(got))
	}
}

// BenchmarkAdmitQueue measures one scheduling decision over a 12-job queue of 8 templates on an
// in-memory ledger (reservations included, no processes), then releases everything.
func BenchmarkAdmitQueue(b *testing.B) {
	peaks := []size.Bytes{14 * size.GiB, 20 * size.GiB, 18 * size.GiB, 8 * size.GiB, 6 * size.GiB, 24 * size.GiB, 5 * size.GiB, 2 * size.GiB}
	var jobs []*Job
	for i := range 12 {
		jobs = append(jobs, &Job{Job: queue.Job{Name: fmt.Sprint("job", i), Template: fmt.Sprint("t", i%8)}})
	}
	s, led, _ := schedOn(b, 140*size.GiB, 0, jobs)
	for i, p := range peaks {
		s.peaks[fmt.Sprint("t", i)] = p
	}
	b.ReportAllocs()
	admitted := 0
	for b.Loop() {
		ls := s.Next()
		admitted += len(ls)
		for i := range ls {
			s.Finished(&ls[i])
			if err := led.Release(ls[i].Res.Token, "bench"); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(admitted)/float64(b.N), "jobs/decision")
}

// newSched is a scheduler with the packed rule over a ledger of its own: no fence, no borrowing.
func newSched(pol policy.Policy, led *ledger.Ledger, gpus []string, jobs []*Job, maxTotal int, log hclog.Logger) *Sched {
	return New(Config{Policy: pol, Ledger: led, GPUs: gpus, MaxTotal: maxTotal, Logger: log}, jobs)
}

// While the enforcer holds a GPU unhealthy after a GPU-wide event, nothing is admitted there (the
// ledger refuses it: ReasonUnhealthy); other GPUs go on, and the GPU takes jobs again once healthy.
func TestSchedAdmitsNothingOnAnUnhealthyGPU(t *testing.T) {
	led, err := ledger.Open("", ledger.Options{NoPersist: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	if err := led.SetPolicy(policy.Default()); err != nil {
		t.Fatal(err)
	}
	g0, g1 := "GPU-test-0", "GPU-test-1"
	if err := led.SyncGPUs([]ledger.GPUInfo{{UUID: g0, Model: "H200", TotalBytes: 80 * size.GiB, Healthy: true},
		{UUID: g1, Index: 1, Model: "H200", TotalBytes: 80 * size.GiB, Healthy: true}}); err != nil {
		t.Fatal(err)
	}
	if err := led.SetHealth(g0, false, "a task was stopped under MPS"); err != nil {
		t.Fatal(err)
	}
	var de *ledger.DeniedError
	if _, err := led.ReserveBytes(g0, size.GiB, ledger.Task{JobName: "x"}); !errors.As(err, &de) || de.Reason != ledger.ReasonUnhealthy {
		t.Fatalf("ReserveBytes on an unhealthy GPU: %v, want a %s denial", err, ledger.ReasonUnhealthy)
	}
	jobs := []*Job{
		{Job: queue.Job{Name: "a", Template: "t"}},
		{Job: queue.Job{Name: "b", Template: "t"}},
		{Job: queue.Job{Name: "probe", Template: "new"}},
	}
	s := newSched(policy.Default(), led, []string{g0, g1}, jobs, 0, hclog.NewNullLogger())
	s.peaks["t"] = 10 * size.GiB
	got := s.Next()
	for _, l := range got {
		if l.GPU != g0 {
			continue
		}
		t.Fatalf("%s admitted on the unhealthy GPU", l.Job.Name)
	}
	if fmt.Sprint(names(got)) != "[a b]" || s.drainFor[g1] != jobs[2] {
		t.Fatalf("admitted %v, drains %v: want a and b on GPU 1, which drains for the probe (GPU 0 is unhealthy)", names(got), s.drainFor)
	}
	for i := range got {
		s.Finished(&got[i])
		got[i].Job.Done = true
		if err := led.Release(got[i].Res.Token, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Next(); len(got) != 1 || got[0].GPU != g1 {
		t.Fatalf("the probe should start alone on GPU 1, got %v", names(got))
	}

	// One GPU only: nothing starts until it is healthy again.
	led2, uuid := memLedger(t, 80*size.GiB)
	if err := led2.SetHealth(uuid, false, "forced stop under MPS may have faulted other clients"); err != nil {
		t.Fatal(err)
	}
	jobs2 := []*Job{{Job: queue.Job{Name: "c", Template: "t"}}, {Job: queue.Job{Name: "p", Template: "new"}}}
	s2 := newSched(policy.Default(), led2, []string{uuid}, jobs2, 0, hclog.NewNullLogger())
	s2.peaks["t"] = 10 * size.GiB
	for range 3 {
		if got := s2.Next(); len(got) != 0 {
			t.Fatalf("admitted %v on the unhealthy GPU", names(got))
		}
	}
	if err := led2.SetHealth(uuid, true, ""); err != nil {
		t.Fatal(err)
	}
	if got := s2.Next(); fmt.Sprint(names(got)) != "[c]" {
		t.Fatalf("healthy again: admitted %v, want [c] (p drains the GPU for its probe)", names(got))
	}
}
