package varserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func testJob(count uint64) *api.Job {
	return &api.Job{ID: ptr("web"), Name: ptr("web"), Type: ptr("service"), TaskGroups: []*api.TaskGroup{{Name: ptr("g"),
		Tasks: []*api.Task{{Name: "t", Driver: "exec", Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpumem", Count: &count}}}}}}}}
}

// TestJobEndpointsSpeakTheAPIClient drives the job side with the real nomad/api client:
// register, read, the modify-index check, allocations and their 404, ACL denials.
func TestJobEndpointsSpeakTheAPIClient(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	c := s.Client(t, "")
	if _, _, err := c.Jobs().Info("web", nil); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("reading a missing job: %v, want a 404", err)
	}
	if _, _, err := c.Jobs().Register(testJob(3), nil); err != nil {
		t.Fatal(err)
	}
	j, _, err := c.Jobs().Info("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if *j.Version != 0 || *j.TaskGroups[0].Tasks[0].Resources.Devices[0].Count != 3 || *j.Namespace != "default" {
		t.Fatalf("job read back: version %d, count %d, namespace %s", *j.Version, *j.TaskGroups[0].Tasks[0].Resources.Devices[0].Count, *j.Namespace)
	}
	stale := *j.JobModifyIndex
	if _, _, err := c.Jobs().EnforceRegister(testJob(5), stale, nil); err != nil {
		t.Fatalf("register at the current modify index: %v", err)
	}
	if _, _, err := c.Jobs().EnforceRegister(testJob(7), stale, nil); err == nil || !strings.Contains(err.Error(), "conflicting job modify index") {
		t.Errorf("register at a stale modify index: %v, want a conflict", err)
	}
	j, _, _ = c.Jobs().Info("web", nil)
	if *j.Version != 1 || *j.TaskGroups[0].Tasks[0].Resources.Devices[0].Count != 5 {
		t.Errorf("after the checked registers: version %d count %d, want 1 and 5", *j.Version, *j.TaskGroups[0].Tasks[0].Resources.Devices[0].Count)
	}
	s.PutAlloc(&api.Allocation{ID: "a1", JobID: "web", TaskGroup: "g", Job: j, ClientStatus: "running"})
	a, _, err := c.Allocations().Info("a1", nil)
	if err != nil || a.JobID != "web" || *a.Job.Version != 1 {
		t.Fatalf("allocation: %+v, %v", a, err)
	}
	stubs, _, err := c.Jobs().Allocations("web", false, nil)
	if err != nil || len(stubs) != 1 || stubs[0].JobVersion != 1 {
		t.Errorf("job allocations %+v, %v", stubs, err)
	}
	if _, _, err := c.Allocations().Info("nope", nil); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("missing allocation: %v, want a 404", err)
	}

	s.SetToken("reader", Rule{Namespace: "default", Jobs: []string{CapReadJob}})
	s.SetToken("vars-only", Rule{Path: "*", Capabilities: []string{CapRead}})
	reader, varsOnly := s.Client(t, "reader"), s.Client(t, "vars-only")
	if _, _, err := reader.Jobs().Info("web", nil); err != nil {
		t.Errorf("read-job token reading the job: %v", err)
	}
	if _, _, err := reader.Jobs().Register(testJob(9), nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("read-job token registering: %v, want a 403", err)
	}
	if _, _, err := varsOnly.Allocations().Info("a1", nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("token without job rights reading the allocation: %v, want a 403", err)
	}
}

// An allocation is read in its own namespace: read in another it is not found, which is what
// a namespace-scoped read answers and what the controller must not take for a deletion; "*"
// finds it anywhere; a namespace the token may not read jobs in is denied, whether it is the
// one asked for or the allocation's own.
func TestAllocationReadIsNamespaced(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	s.PutAlloc(&api.Allocation{ID: "m1", Namespace: "ml", JobID: "web", TaskGroup: "g", ClientStatus: "running"})
	s.SetToken("all", Management()...)
	s.SetToken("default-only", Rule{Namespace: "default", Jobs: []string{CapReadJob}})
	all, defaultOnly := s.Client(t, "all"), s.Client(t, "default-only")
	for _, tc := range []struct {
		name   string
		c      *api.Client
		ns     string
		status string // "" for a read that finds it
	}{
		{"its own namespace", all, "ml", ""},
		{"any namespace", all, "*", ""},
		{"no namespace: default", all, "", "404"},
		{"another namespace", all, "default", "404"},
		{"a namespace the token may not read", defaultOnly, "ml", "403"},
		{"any namespace, the allocation's not readable", defaultOnly, "*", "403"},
		{"the token's namespace, not the allocation's", defaultOnly, "default", "404"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _, err := tc.c.Allocations().Info("m1", &api.QueryOptions{Namespace: tc.ns})
			switch {
			case tc.status == "" && (err != nil || a.Namespace != "ml"):
				t.Errorf("read: %+v, %v; want the allocation", a, err)
			case tc.status != "" && (err == nil || !strings.Contains(err.Error(), tc.status)):
				t.Errorf("read: %v, want a %s", err, tc.status)
			}
		})
	}
}

func TestEventStreamDeliversFromIndex(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	c := s.Client(t, "")
	j := s.PutJob(testJob(1))
	s.PutAlloc(&api.Allocation{ID: "old", JobID: "web", TaskGroup: "g", Job: j, ClientStatus: "running"})
	from := s.Index() + 1
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := c.EventStream().Stream(ctx, map[api.Topic][]string{api.TopicAllocation: {"*"}}, from, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.PutJob(testJob(2)) // a Job event: not subscribed
	s.PutAlloc(&api.Allocation{ID: "new", JobID: "web", TaskGroup: "g", Job: j, ClientStatus: "pending"})
	for evs := range ch {
		if evs.Err != nil {
			t.Fatalf("stream: %v", evs.Err)
		}
		for _, e := range evs.Events {
			a, err := e.Allocation()
			if err != nil || e.Topic != api.TopicAllocation {
				t.Fatalf("event %+v: %v", e, err)
			}
			if a.ID == "old" {
				t.Fatal("the stream replayed an event from before the requested index")
			}
			if a.Job != nil {
				t.Fatalf("allocation event of %s carries its job: Nomad's never do", a.ID)
			}
			if a.ID == "new" && a.ClientStatus == "pending" {
				return
			}
		}
	}
	t.Fatal("the stream ended without the allocation event")
}
