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
