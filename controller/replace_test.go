package controller

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
	"github.com/gpufrac/gpufrac/size"
)

func TestRaisesTheTemplateAndReportsTheReplacement(t *testing.T) {
	r := newRig(t)
	store, err := nomadvars.New(nomadvars.Config{Address: r.vs.URL()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := store.PutTemplateUnchecked(ctx, policy.Template{Name: "lora", Policy: "default", PeakBytes: 2 * size.GiB}); err != nil {
		t.Fatal(err)
	}
	r.putJob(alloc1, device{"nvidia/gpumem", 3, gpuA})
	c := r.controller(func(c *Config) { c.Templates = store })
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	r.violate(alloc1, gpuA, t0)
	testutil.Eventually(t, 15*time.Second, "the job to be re-registered", func() bool { return r.count(0) == firstStep })
	tpl, _, err := store.GetTemplate(ctx, "lora")
	if err != nil || tpl.PeakBytes != 5*size.GiB {
		t.Errorf("template after the violation: %v, %v; want its peak raised to the violation's 5GiB", tpl.PeakBytes, err)
	}
	// Nomad places the new version; its allocation starts running.
	j, _ := r.vs.Job("default", "train")
	const alloc2 = "33333333-3333-4333-8333-333333333333"
	r.putAlloc(alloc2, j, api.AllocClientStatusRunning, nil)
	testutil.Eventually(t, 15*time.Second, "the replacement to be reported", func() bool { return len(r.events(EventReplaced)) == 1 })
	if ev := r.events(EventReplaced)[0]; ev.Alloc != alloc2 || ev.ToUnits != firstStep {
		t.Errorf("replaced event %+v", ev)
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
}

// Each re-registration waits for its own replacement: one of a job's groups re-registered after
// another must not take the place of the first one's in what the controller waits for.
func TestEveryGroupsReplacementIsReported(t *testing.T) {
	r := newRig(t)
	groups := []string{"g1", "g2"}
	allocs := map[string]string{"g1": alloc1, "g2": "22222222-2222-4222-8222-222222222222"}
	job := &api.Job{ID: ptr("train"), Name: ptr("train"), Type: ptr("batch")}
	for _, g := range groups {
		job.TaskGroups = append(job.TaskGroups, &api.TaskGroup{Name: ptr(g), Tasks: []*api.Task{{Name: "main", Driver: "exec",
			Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpumem", Count: ptr(uint64(3))}}}}}})
	}
	job = r.vs.PutJob(job)
	place := func(id, group string, j *api.Job) {
		r.vs.PutAlloc(&api.Allocation{ID: id, Namespace: "default", JobID: "train", TaskGroup: group, Job: j,
			ClientStatus: api.AllocClientStatusRunning})
	}
	for _, g := range groups {
		place(allocs[g], g, job)
		r.violate(allocs[g], gpuA, t0)
	}
	c := r.controller(nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testutil.Eventually(t, 15*time.Second, "both groups to be re-registered", func() bool { return len(r.events(EventReregistered)) == 2 })
	j, _ := r.vs.Job("default", "train")
	place("33333333-3333-4333-8333-333333333333", "g1", j)
	place("44444444-4444-4444-8444-444444444444", "g2", j)
	testutil.Eventually(t, 15*time.Second, "a replacement of each group to be reported", func() bool {
		seen := map[string]bool{}
		for _, ev := range r.events(EventReplaced) {
			seen[ev.Group] = true
		}
		return seen["g1"] && seen["g2"]
	})
}

// racingStore is a template store in which another writer (gpufrac probe, terraform apply)
// changes the template between the controller's read and its first write.
type racingStore struct {
	policy.Store
	once  sync.Once
	other func()
}

func (s *racingStore) PutTemplate(ctx context.Context, t policy.Template, cas uint64) (policy.Meta, error) {
	s.once.Do(s.other)
	return s.Store.PutTemplate(ctx, t, cas)
}

// A template changed by another writer while the controller raises it is read again: the raise
// is not lost, and neither is the other writer's change.
func TestTemplateRaiseSurvivesAConcurrentWrite(t *testing.T) {
	r := newRig(t)
	store, err := nomadvars.New(nomadvars.Config{Address: r.vs.URL()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := store.PutTemplateUnchecked(ctx, policy.Template{Name: "lora", Policy: "default", PeakBytes: 2 * size.GiB}); err != nil {
		t.Fatal(err)
	}
	racing := &racingStore{Store: store, other: func() {
		if _, err := store.PutTemplateUnchecked(ctx, policy.Template{Name: "lora", Policy: "default", PeakBytes: 3 * size.GiB,
			Description: "measured again"}); err != nil {
			t.Error(err)
		}
	}}
	r.putJob(alloc1, device{"nvidia/gpumem", 3, gpuA})
	r.violate(alloc1, gpuA, t0)
	if err := r.pass(r.controller(func(c *Config) { c.Templates = racing })); err != nil {
		t.Fatal(err)
	}
	tpl, _, err := store.GetTemplate(ctx, "lora")
	if err != nil || tpl.PeakBytes != 5*size.GiB || tpl.Description != "measured again" {
		t.Errorf("template %+v, %v: want the violation's 5GiB peak over the other writer's version", tpl, err)
	}
	if evs := r.events(EventTemplateRaised); len(evs) != 1 || len(r.events(EventError)) != 0 {
		t.Errorf("%d template-raised events (want 1), errors %+v", len(evs), r.events(EventError))
	}
}

// alwaysRacing is a template store in which another writer changes the template before every
// write of the controller's, so that none of them lands.
type alwaysRacing struct {
	policy.Store
	t *testing.T
}

func (s alwaysRacing) PutTemplate(ctx context.Context, t policy.Template, cas uint64) (policy.Meta, error) {
	cur, _, err := s.Store.GetTemplate(ctx, t.Name)
	if err == nil {
		cur.Description += "!"
		_, err = s.Store.PutTemplateUnchecked(ctx, cur)
	}
	if err != nil {
		s.t.Error(err)
	}
	return s.Store.PutTemplate(ctx, t, cas)
}

// What becomes of the template a violation names, and what the controller says of it: raised
// to the violation's 5GiB peak only where it held less; an absent template, or one that could
// not be written, is an error event naming it, and the re-registration goes on regardless.
func TestTemplateRaiseOutcomes(t *testing.T) {
	tests := []struct {
		name    string
		stored  size.Bytes // the template's peak before; 0: no template
		dryRun  bool
		racing  bool
		kind    string // the one event about the template; "": none
		message string // what its message says
		after   size.Bytes
	}{
		{"raised", 2 * size.GiB, false, false, EventTemplateRaised, "template lora footprint 2GiB -> 5GiB (source: violation)", 5 * size.GiB},
		{"already enough", 8 * size.GiB, false, false, "", "", 8 * size.GiB},
		{"dry run", 2 * size.GiB, true, false, EventTemplateRaised, "would raise lora footprint 2GiB -> 5GiB (source: violation)", 2 * size.GiB},
		{"absent", 0, false, false, EventError, "template lora not raised: ", 0},
		{"changed by another writer at every attempt", 2 * size.GiB, false, true, EventError,
			"template lora not raised from 2GiB: storing template \"lora\": changed by another writer at each of 5 attempts", 2 * size.GiB},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			store, err := nomadvars.New(nomadvars.Config{Address: r.vs.URL()})
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			if tc.stored > 0 {
				if _, err := store.PutTemplateUnchecked(ctx, policy.Template{Name: "lora", Policy: "default", PeakBytes: tc.stored}); err != nil {
					t.Fatal(err)
				}
			}
			var templates policy.Store = store
			if tc.racing {
				templates = alwaysRacing{Store: store, t: t}
			}
			r.putJob(alloc1, device{"nvidia/gpumem", 3, gpuA})
			r.violate(alloc1, gpuA, t0)
			if err := r.pass(r.controller(func(c *Config) { c.Templates, c.DryRun = templates, tc.dryRun })); err != nil {
				t.Fatal(err)
			}
			var about []Event
			for _, kind := range []string{EventTemplateRaised, EventError} {
				about = append(about, r.events(kind)...)
			}
			switch {
			case tc.kind == "" && len(about) != 0:
				t.Errorf("events %+v, want none about the template", about)
			case tc.kind != "" && (len(about) != 1 || about[0].Kind != tc.kind || !strings.Contains(about[0].Message, tc.message)):
				t.Errorf("events %+v, want one %s saying %q", about, tc.kind, tc.message)
			}
			if tc.kind == EventError && tc.stored == 0 && len(about) == 1 && !strings.Contains(about[0].Message, "not found") {
				t.Errorf("error %q does not say the template is missing", about[0].Message)
			}
			tpl, _, err := store.GetTemplate(ctx, "lora")
			if tc.after == 0 && !errors.Is(err, policy.ErrNotFound) || tc.after != 0 && (err != nil || tpl.PeakBytes != tc.after) {
				t.Errorf("template after: %+v, %v; want a peak of %s", tpl, err, tc.after)
			}
			if want := map[bool]string{true: EventWouldReregister, false: EventReregistered}[tc.dryRun]; len(r.events(want)) != 1 {
				t.Errorf("%d %s events, want 1: the template's fate holds back no re-registration", len(r.events(want)), want)
			}
		})
	}
}

// roundTrip lets a test stand between the controller and the Nomad API.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Nomad may place and start the new version's allocation before the register call has returned
// to the controller: the replacement is still reported. The register answer is held back until
// the allocation's event has been delivered, which makes the order certain.
func TestReplacementRunningBeforeTheRegisterCallReturns(t *testing.T) {
	r := newRig(t)
	r.putJob(alloc1, device{"nvidia/gpumem", 3, gpuA})
	const alloc2 = "33333333-3333-4333-8333-333333333333"
	held := roundTrip(func(req *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil || req.Method != http.MethodPut || req.URL.Path != "/v1/jobs" {
			return resp, err
		}
		j, _ := r.vs.Job("default", "train") // the version just registered
		r.putAlloc(alloc2, j, api.AllocClientStatusRunning, nil)
		// Answer once the replacement is reported; a controller that misses it gets its answer
		// after the bound, and the wait below then fails.
		for deadline := time.Now().Add(5 * time.Second); len(r.events(EventReplaced)) == 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		return resp, nil
	})
	cfg := api.DefaultConfig()
	cfg.Address, cfg.HttpClient = r.vs.URL(), &http.Client{Transport: held}
	cl, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := r.controller(func(c *Config) { c.Client = cl })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	r.violate(alloc1, gpuA, t0)
	testutil.Eventually(t, 15*time.Second, "the replacement to be reported", func() bool { return len(r.events(EventReplaced)) == 1 })
	if ev := r.events(EventReplaced)[0]; ev.Alloc != alloc2 || ev.ToUnits != firstStep || ev.Version != 1 {
		t.Errorf("replaced event %+v, want allocation %s of version 1 with %d units", ev, alloc2, firstStep)
	}
	// The re-registration is reported once its call returns, which may be after the replacement.
	testutil.Eventually(t, 15*time.Second, "the re-registration to be reported", func() bool { return len(r.events(EventReregistered)) == 1 })
}
