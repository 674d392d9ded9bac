package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/runstatus"
)

// A run publishes its progress in its state directory while it runs, with what its waiting jobs
// wait for, and removes it when it ends.
func TestRunPublishesItsProgress(t *testing.T) {
	t.Parallel()
	sim := newSim(t, "H100=80GiB")
	q := queue.Queue{Jobs: []queue.Job{
		simJob(t, "first", "t", "--peak", "1GiB", "--ramp", "50ms", "--hold", "1500ms"),
		simJob(t, "second", "t", "--peak", "1GiB", "--ramp", "50ms", "--hold", "200ms"),
	}}
	o := testOptions(t, sim, record.ArmPacked)
	o.StateDir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, q, o)
		done <- err
	}()
	// The second job waits for the first, its template's probe: the published progress says so.
	var seen runstatus.Status
	found := false
	for !found {
		select {
		case err := <-done:
			t.Fatalf("the run ended (%v) before its progress showed a job waiting for the probe; last seen %+v", err, seen)
		case <-time.After(20 * time.Millisecond):
		}
		st, ok, err := runstatus.Read(o.StateDir)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			continue
		}
		seen = st
		for _, w := range st.Waits {
			if strings.Contains(w.Reason, `probe of its template "t"`) && w.Count == 1 && w.Jobs[0] == "second" {
				found = true
			}
		}
	}
	if seen.Jobs != 2 || seen.Running != 1 || seen.Waiting != 1 || len(seen.GPUs) != 1 || seen.GPUs[0].Running != 1 {
		t.Errorf("progress %+v: want 2 jobs, 1 running on GPU0, 1 waiting", seen)
	}
	// The running attempt with its room: a guarantee, the limit it may borrow up to, its bound.
	if a := seen.Attempts; len(a) != 1 || a[0].Job != "first" || a[0].Attempt != 1 || a[0].MaxAttempts != 3 || a[0].GuaranteeBytes == 0 ||
		a[0].LimitBytes < a[0].GuaranteeBytes || a[0].Room == "" {
		t.Errorf("running attempts %+v: want first, attempt 1 of 3, with its guarantee and limit", a)
	} else if got := a[0].String(); !strings.HasPrefix(got, "first on GPU0, attempt 1 of 3: guarantee ") {
		t.Errorf("attempt in words %q", got)
	}
	if got := seen.GPUs[0].String(); !strings.Contains(got, "guarantees ") || !strings.Contains(got, "borrowed ") {
		t.Errorf("GPU in words %q: want its guarantees and what is borrowed", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, ok, err := runstatus.Read(o.StateDir); ok || err != nil {
		t.Errorf("after the run: progress still there (%v, %v)", ok, err)
	}
}
