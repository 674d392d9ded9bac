package varserver

import (
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// Stopping an allocation takes alloc-lifecycle in its namespace (submit-job is not enough), marks
// it to stop and says so on the event stream's index.
func TestAllocStopNeedsAllocLifecycle(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	j := s.PutJob(testJob(1))
	s.PutAlloc(&api.Allocation{ID: "a1", JobID: "web", TaskGroup: "g", Job: j, ClientStatus: "running"})
	s.SetToken("submitter", Rule{Namespace: "default", Jobs: []string{CapSubmitJob}})
	s.SetToken("lifecycle", Rule{Namespace: "default", Jobs: []string{CapReadJob, CapAllocLifecycle}})
	s.SetToken("elsewhere", Rule{Namespace: "other", Jobs: []string{CapAllocLifecycle}})
	alloc := &api.Allocation{ID: "a1"}
	for _, tok := range []string{"submitter", "elsewhere"} {
		if _, err := s.Client(t, tok).Allocations().Stop(alloc, nil); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("%s stopping the allocation: %v, want a 403", tok, err)
		}
	}
	if a, _ := s.Alloc("a1"); a.DesiredStatus == api.AllocDesiredStatusStop || s.Stops() != 0 {
		t.Fatalf("a refused stop changed the allocation: %q, %d stops", a.DesiredStatus, s.Stops())
	}
	before := s.Index()
	resp, err := s.Client(t, "lifecycle").Allocations().Stop(alloc, nil)
	if err != nil || resp.EvalID == "" {
		t.Fatalf("stop: %+v, %v", resp, err)
	}
	if a, _ := s.Alloc("a1"); a.DesiredStatus != api.AllocDesiredStatusStop || s.Stops() != 1 || s.Index() <= before {
		t.Errorf("after the stop: desired %q, %d stops, index %d (was %d)", a.DesiredStatus, s.Stops(), s.Index(), before)
	}
	if _, err := s.Client(t, "lifecycle").Allocations().Stop(&api.Allocation{ID: "nope"}, nil); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("stopping a missing allocation: %v, want a 404", err)
	}
}
