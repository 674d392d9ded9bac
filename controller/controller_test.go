package controller

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
	"github.com/gpufrac/gpufrac/policy/violations"
	"github.com/gpufrac/gpufrac/size"
)

const (
	gpuA = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
	gpuB = "GPU-bbbbbbbb-0000-0000-0000-000000000002"
)

// rig is a fake Nomad (varserver) with one job whose task asks gpufrac for units, one
// allocation of it, and a controller recording its events.
type rig struct {
	t   *testing.T
	vs  *varserver.Server
	api *api.Client
	mu  sync.Mutex
	evs []Event
}

func newRig(t *testing.T) *rig {
	t.Helper()
	vs := varserver.New(varserver.Options{MaxWait: 2 * time.Second})
	t.Cleanup(vs.Close)
	return &rig{t: t, vs: vs, api: vs.Client(t, "")}
}

func (r *rig) controller(mut func(*Config)) *Controller {
	r.t.Helper()
	cfg := Config{Client: r.api, Retry: 50 * time.Millisecond, Wait: time.Second, OnEvent: func(e Event) {
		r.mu.Lock()
		r.evs = append(r.evs, e)
		r.mu.Unlock()
	}}
	if mut != nil {
		mut(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

func (r *rig) events(kind string) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, e := range r.evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// device is one device request of the task: its name, count and the GPU it was placed on.
type device struct {
	name  string
	count uint64
	gpu   string
}

func ptr[T any](v T) *T { return &v }

// putJob registers job "train" (task "main" in group "g") and an allocation of its current
// version, running, with each device's units on its GPU.
func (r *rig) putJob(allocID string, devs ...device) *api.Job {
	r.t.Helper()
	return r.putJobIn("default", allocID, devs...)
}

// putJobIn is putJob in namespace ns.
func (r *rig) putJobIn(ns, allocID string, devs ...device) *api.Job {
	r.t.Helper()
	var reqs []*api.RequestedDevice
	var placed []*api.AllocatedDeviceResource
	for _, d := range devs {
		reqs = append(reqs, &api.RequestedDevice{Name: d.name, Count: ptr(d.count)})
		ids := make([]string, d.count)
		for k := range ids {
			ids[k] = ledger.InstanceID(d.gpu, k)
		}
		placed = append(placed, &api.AllocatedDeviceResource{Vendor: "nvidia", Type: "gpumem", Name: "h100-0", DeviceIDs: ids})
	}
	job := r.vs.PutJob(&api.Job{ID: ptr("train"), Name: ptr("train"), Namespace: ptr(ns), Type: ptr("batch"), TaskGroups: []*api.TaskGroup{{
		Name: ptr("g"), Tasks: []*api.Task{{Name: "main", Driver: "exec", Resources: &api.Resources{Devices: reqs}}},
	}}})
	r.putAlloc(allocID, job, api.AllocClientStatusRunning, placed)
	return job
}

func (r *rig) putAlloc(id string, job *api.Job, status string, placed []*api.AllocatedDeviceResource) {
	r.vs.PutAlloc(&api.Allocation{ID: id, Namespace: *job.Namespace, JobID: *job.ID, TaskGroup: "g", Job: job, ClientStatus: status,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"main": {Devices: placed}}}})
}

// violate publishes a violation of task "main" of allocID on gpu, as a plugin that does not
// record the allocation's namespace did.
func (r *rig) violate(allocID, gpu string, at time.Time) string {
	r.t.Helper()
	return r.violateIn("", allocID, gpu, at)
}

// violateIn publishes a violation that names the allocation's namespace ns, as the plugin does.
func (r *rig) violateIn(ns, allocID, gpu string, at time.Time) string {
	r.t.Helper()
	rec := violations.Record{AllocID: allocID, Namespace: ns, Job: "train", Task: "main", Template: "lora", GPU: gpu, GPUUnits: 78,
		UnitBytes: size.GiB, CapBytes: 3 * size.GiB, PeakBytes: 5 * size.GiB, Action: "sigkill", Mode: "isolated",
		CrossedAt: at, ContainedAt: at.Add(time.Second)}
	path, err := violations.Publish(r.api.Variables(), "default", rec)
	if err != nil {
		r.t.Fatal(err)
	}
	return path
}

func (r *rig) pass(c *Controller) error {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Pass(ctx, 0)
	return err
}

func (r *rig) count(devIndex int) uint64 {
	r.t.Helper()
	return r.countIn("default", devIndex)
}

// countIn is the count of job "train" in namespace ns.
func (r *rig) countIn(ns string, devIndex int) uint64 {
	r.t.Helper()
	j, ok := r.vs.Job(ns, "train")
	if !ok {
		r.t.Fatal("job train is gone")
	}
	return *j.TaskGroups[0].Tasks[0].Resources.Devices[devIndex].Count
}

func (r *rig) handled(path string) string {
	v, ok := r.vs.Get("default", path)
	if !ok {
		r.t.Fatalf("violation %s vanished", path)
	}
	return v.Items[violations.KeyHandled]
}

const alloc1 = "11111111-1111-4111-8111-111111111111"

// firstStep is the units the ladder gives a task that reached 5GiB with 3 units (violate's
// figures): the cap formula over 5GiB, in whole units.
var firstStep = uint64(policy.Default().Units(policy.Default().Cap(5 * size.GiB)))

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// The controller climbs the ladder (policy.Policy.Next) one allocation at a time: the cap
// formula over what the task reached, then a whole GPU for its last attempt, then exhausted.
func TestClimbsTheLadderOnceAnAllocation(t *testing.T) {
	r := newRig(t)
	r.putJob(alloc1, device{"nvidia/gpumem", 3, gpuA})
	path := r.violate(alloc1, gpuA, t0)
	reg := prometheus.NewRegistry()
	c := r.controller(func(cfg *Config) { cfg.Registerer = reg })
	if err := r.pass(c); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, reg, "gpufrac_controller_events_total", "reregistered"); got != 1 {
		t.Errorf("reregistered events counted %v, want 1", got)
	}
	if got := metric(t, reg, "gpufrac_controller_violation_containment_seconds", ""); got != 1 {
		t.Errorf("containment observations %v, want 1", got)
	}
	// It reached 5GiB under a 3GiB cap: the cap formula over 5GiB, in whole units.
	want := firstStep
	if got := r.count(0); got != want {
		t.Fatalf("count after the violation %d, want %d units (the cap formula over its 5GiB)", got, want)
	}
	j, _ := r.vs.Job("default", "train")
	if *j.Version != 1 || j.Meta[MetaEscalated+"g.main"] != alloc1 || j.Meta[MetaAttempt+"g.main"] != "2" {
		t.Errorf("job version %d meta %v; want version 1 recording the allocation and attempt 2", *j.Version, j.Meta)
	}
	if h := r.handled(path); !strings.HasPrefix(h, "reregistered") || !strings.Contains(h, "attempt 2 of 3") {
		t.Errorf("violation marked %q, want reregistered for attempt 2 of 3", h)
	}
	evs := r.events(EventReregistered)
	if len(evs) != 1 || evs[0].FromUnits != 3 || evs[0].ToUnits != want || evs[0].Group != "g" || evs[0].Device != "nvidia/gpumem" {
		t.Errorf("reregistered events %+v", evs)
	}
	// Nomad would restart the task in place under the 3 units it broke: its allocation is stopped.
	if a, _ := r.vs.Alloc(alloc1); a.DesiredStatus != api.AllocDesiredStatusStop || r.vs.Stops() != 1 || len(r.events(EventStopped)) != 1 {
		t.Errorf("allocation desired status %q after %d stops, events %+v: want it stopped once", a.DesiredStatus, r.vs.Stops(), r.events(EventStopped))
	}

	// A duplicate violation of the same allocation (it broke its cap again before Nomad
	// replaced it), the same pass again, and a restarted controller: still one registration.
	dup := r.violate(alloc1, gpuA, t0.Add(time.Minute))
	for _, ctl := range []*Controller{c, r.controller(nil)} {
		if err := r.pass(ctl); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.vs.Registrations(); n != 1 {
		t.Errorf("%d registrations, want 1", n)
	}
	if h := r.handled(dup); !strings.Contains(h, "already re-registered") {
		t.Errorf("duplicate violation marked %q", h)
	}

	// The replacement breaks its larger guarantee: its last attempt gets the whole GPU.
	const alloc2 = "22222222-2222-4222-8222-222222222222"
	r.replace(alloc2, gpuA)
	r.violate(alloc2, gpuA, t0.Add(time.Hour))
	if err := r.pass(c); err != nil {
		t.Fatal(err)
	}
	if got := r.count(0); got != 78 || r.vs.Registrations() != 2 {
		t.Fatalf("count %d after %d registrations, want the whole GPU's 78 after 2", got, r.vs.Registrations())
	}

	// That breaks a whole GPU too: reported, never re-registered again.
	const alloc3 = "33333333-3333-4333-8333-333333333333"
	r.replace(alloc3, gpuA)
	again := r.violate(alloc3, gpuA, t0.Add(2*time.Hour))
	if err := r.pass(c); err != nil {
		t.Fatal(err)
	}
	if n := r.vs.Registrations(); n != 2 {
		t.Errorf("%d registrations after the whole-GPU violation, want still 2", n)
	}
	if h := r.handled(again); !strings.HasPrefix(h, "exhausted") || len(r.events(EventExhausted)) != 1 {
		t.Errorf("whole-GPU violation marked %q, events %+v", h, r.events(EventExhausted))
	}
}

// The bound and the ceiling are the job's, as in a queue file: a task whose meta says
// gpufrac_max_attempts = 1 or gpufrac_cap_fixed = true is not re-registered.
func TestMetaBoundsTheLadder(t *testing.T) {
	for _, tc := range []struct{ key, val, why string }{
		{MetaMaxAttempts, "1", "1 of 1 attempts used"},
		{MetaCapFixed, "true", "cap_fixed"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			r := newRig(t)
			j := r.putJob(alloc1, device{"nvidia/gpumem", 3, gpuA})
			j.TaskGroups[0].Tasks[0].Meta = map[string]string{tc.key: tc.val}
			j = r.vs.PutJob(j)
			r.putAlloc(alloc1, j, api.AllocClientStatusRunning, []*api.AllocatedDeviceResource{{DeviceIDs: []string{
				ledger.InstanceID(gpuA, 0), ledger.InstanceID(gpuA, 1), ledger.InstanceID(gpuA, 2)}}})
			path := r.violate(alloc1, gpuA, t0)
			if err := r.pass(r.controller(nil)); err != nil {
				t.Fatal(err)
			}
			if h := r.handled(path); r.vs.Registrations() != 0 || !strings.HasPrefix(h, "exhausted") || !strings.Contains(h, tc.why) {
				t.Errorf("violation marked %q after %d registrations, want none and exhausted: ...%s", h, r.vs.Registrations(), tc.why)
			}
		})
	}
}

// replace puts a running allocation of the job's current version, holding the units its task
// asks for on gpu, as Nomad does after a re-registration.
func (r *rig) replace(allocID, gpu string) {
	r.t.Helper()
	j, _ := r.vs.Job("default", "train")
	ids := make([]string, *j.TaskGroups[0].Tasks[0].Resources.Devices[0].Count)
	for k := range ids {
		ids[k] = ledger.InstanceID(gpu, k)
	}
	r.putAlloc(allocID, j, api.AllocClientStatusRunning, []*api.AllocatedDeviceResource{{DeviceIDs: ids}})
}

func TestRestartBetweenRegisterAndMark(t *testing.T) {
	r := newRig(t)
	r.putJob(alloc1, device{"nvidia/gpumem", 3, gpuA})
	path := r.violate(alloc1, gpuA, t0)
	before, _ := r.vs.Get("default", path)
	if err := r.pass(r.controller(nil)); err != nil {
		t.Fatal(err)
	}
	// As if the controller died after registering but before marking the violation.
	r.vs.Put("default", path, before.Items)
	if err := r.pass(r.controller(nil)); err != nil {
		t.Fatal(err)
	}
	if n := r.vs.Registrations(); n != 1 {
		t.Errorf("%d registrations, want 1: the job's meta records the allocation", n)
	}
}

func TestLeavesAloneWhatItMustNotTouch(t *testing.T) {
	tests := []struct {
		name  string
		setup func(r *rig)
		want  string
	}{
		{"job deleted meanwhile", func(r *rig) { r.vs.DeleteJob("default", "train") }, "was deleted"},
		{"job stopped meanwhile", func(r *rig) {
			j, _ := r.vs.Job("default", "train")
			j.Stop = ptr(true)
			r.vs.PutJob(j)
		}, "is stopped"},
		{"no gpufrac device", func(r *rig) { r.putJob(alloc1, device{"nvidia/gpu", 1, gpuA}) }, "no gpufrac device"},
		{"allocation gone", func(r *rig) {}, "no longer exists"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			if tt.name != "allocation gone" {
				r.putJob(alloc1, device{"nvidia/gpumem", 3, gpuA})
			}
			tt.setup(r)
			path := r.violate(alloc1, gpuA, t0)
			if err := r.pass(r.controller(nil)); err != nil {
				t.Fatal(err)
			}
			if n := r.vs.Registrations(); n != 0 {
				t.Errorf("%d registrations, want none", n)
			}
			if h := r.handled(path); !strings.HasPrefix(h, "skipped") || !strings.Contains(h, tt.want) {
				t.Errorf("violation marked %q, want skipped: ...%s", h, tt.want)
			}
		})
	}
}

func TestTwoGPUFracDevicesRaisesTheOneThatBroke(t *testing.T) {
	r := newRig(t)
	r.putJob(alloc1, device{"nvidia/gpumem", 2, gpuA}, device{"nvidia/gpumem", 4, gpuB})
	r.violate(alloc1, gpuB, t0)
	if err := r.pass(r.controller(nil)); err != nil {
		t.Fatal(err)
	}
	if a, b := r.count(0), r.count(1); a != 2 || b != firstStep {
		t.Errorf("counts %d and %d, want the GPU A device unchanged (2) and the GPU B one raised (%d)", a, b, firstStep)
	}
}

// A group of two allocations that both break their caps: the first raises the count and is
// stopped; the second finds the job already asking for more, and is stopped too, or Nomad would
// restart its task in place under the units it broke until the update reached it.
func TestSecondAllocationOfTheGroupIsStoppedToo(t *testing.T) {
	r := newRig(t)
	job := r.putJob(alloc1, device{"nvidia/gpumem", 3, gpuA})
	const sibling = "22222222-2222-4222-8222-222222222222"
	r.putAlloc(sibling, job, api.AllocClientStatusRunning, []*api.AllocatedDeviceResource{{DeviceIDs: []string{
		ledger.InstanceID(gpuB, 0), ledger.InstanceID(gpuB, 1), ledger.InstanceID(gpuB, 2)}}})
	c := r.controller(nil)
	r.violate(alloc1, gpuA, t0)
	if err := r.pass(c); err != nil {
		t.Fatal(err)
	}
	path := r.violate(sibling, gpuB, t0.Add(time.Second))
	if err := r.pass(c); err != nil {
		t.Fatal(err)
	}
	if n := r.vs.Registrations(); n != 1 {
		t.Errorf("%d registrations, want 1", n)
	}
	if h := r.handled(path); !strings.Contains(h, "already asks for") {
		t.Errorf("sibling's violation marked %q", h)
	}
	if a, _ := r.vs.Alloc(sibling); a.DesiredStatus != api.AllocDesiredStatusStop || r.vs.Stops() != 2 {
		t.Errorf("sibling allocation desired status %q after %d stops: want it stopped", a.DesiredStatus, r.vs.Stops())
	}
}

// Every node's plugin token may write violations: a record whose figures no plugin writes is
// skipped with the reason, never a crash (a controller that panics on it would crash again on
// every restart) and never a smaller count.
func TestDamagedFiguresAreSkipped(t *testing.T) {
	for _, tc := range []struct{ name, unit, want string }{
		{"no unit", "", "unit size"},
		{"unit of 0", "0", "unit size"},
		{"unit that overflows", "4611686018427387904", "give 1 units for a task that had 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.putJob(alloc1, device{"nvidia/gpumem", 3, gpuA})
			path := r.violate(alloc1, gpuA, t0)
			v, _ := r.vs.Get("default", path)
			delete(v.Items, violations.KeyUnitBytes)
			if tc.unit != "" {
				v.Items[violations.KeyUnitBytes] = tc.unit
			}
			r.vs.Put("default", path, v.Items)
			if err := r.pass(r.controller(nil)); err != nil {
				t.Fatal(err)
			}
			if h := r.handled(path); r.vs.Registrations() != 0 || !strings.HasPrefix(h, "skipped") || !strings.Contains(h, tc.want) {
				t.Errorf("violation marked %q after %d registrations, want skipped: ...%s and none", h, r.vs.Registrations(), tc.want)
			}
		})
	}
}

// A violation that does not decode is marked skipped once: a controller started later finds it
// handled and neither reports it nor writes it again.
func TestUndecodableViolationIsMarkedOnce(t *testing.T) {
	r := newRig(t)
	const path = violations.PathPrefix + alloc1 + "/main-1"
	r.vs.Put("default", path, map[string]string{violations.KeyAlloc: alloc1, violations.KeyUnitBytes: "1GiB"})
	if err := r.pass(r.controller(nil)); err != nil {
		t.Fatal(err)
	}
	if h := r.handled(path); !strings.Contains(h, "not a whole number") || len(r.events(EventSkipped)) != 1 {
		t.Fatalf("violation marked %q with %d skipped events, want one and the reason", h, len(r.events(EventSkipped)))
	}
	idx := r.vs.Index()
	if err := r.pass(r.controller(nil)); err != nil { // a restarted controller
		t.Fatal(err)
	}
	if n := len(r.events(EventSkipped)); n != 1 || r.vs.Index() != idx {
		t.Errorf("after a restart: %d skipped events (want 1), index %d -> %d (want no write)", n, idx, r.vs.Index())
	}
}

// What the controller remembers of violations it handled lasts as long as they are listed: one
// running for months would otherwise keep every violation it ever saw.
func TestHandledViolationsAreForgottenOnceGone(t *testing.T) {
	r := newRig(t)
	c := r.controller(nil)
	kept := violations.PathPrefix + alloc1 + "/main-1"
	gone := violations.PathPrefix + alloc1 + "/main-2"
	for _, path := range []string{kept, gone} {
		r.vs.Put("default", path, map[string]string{violations.KeyAlloc: alloc1, violations.KeyUnitBytes: "1GiB"})
	}
	if err := r.pass(c); err != nil {
		t.Fatal(err)
	}
	remembered := func() []string {
		c.mu.Lock()
		defer c.mu.Unlock()
		return slices.Sorted(maps.Keys(c.done))
	}
	if got := remembered(); !slices.Equal(got, []string{kept, gone}) {
		t.Fatalf("remembered %q after handling both, want both", got)
	}
	r.vs.Delete("default", gone)
	if err := r.pass(c); err != nil {
		t.Fatal(err)
	}
	if got := remembered(); !slices.Equal(got, []string{kept}) {
		t.Fatalf("remembered %q after %s was deleted, want only %s", got, gone, kept)
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		// violate publishes the violation; kind is the event the dry run reports for it.
		violate func(r *rig) string
		kind    string
		units   uint64
	}{
		{"a violation to act on", func(r *rig) string { return r.violate(alloc1, gpuA, t0) }, EventWouldReregister, firstStep},
		{"a violation that does not decode", func(r *rig) string {
			const path = violations.PathPrefix + alloc1 + "/main-1"
			r.vs.Put("default", path, map[string]string{violations.KeyAlloc: alloc1, violations.KeyUnitBytes: "1GiB"})
			return path
		}, EventSkipped, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.putJob(alloc1, device{"nvidia/gpumem", 3, gpuA})
			path := tc.violate(r)
			idx := r.vs.Index()
			if err := r.pass(r.controller(func(c *Config) { c.DryRun = true })); err != nil {
				t.Fatal(err)
			}
			if r.vs.Registrations() != 0 || r.handled(path) != "" || r.vs.Index() != idx {
				t.Errorf("dry run wrote: %d registrations, violation marked %q, index %d -> %d", r.vs.Registrations(), r.handled(path), idx, r.vs.Index())
			}
			if evs := r.events(tc.kind); len(evs) != 1 || evs[0].ToUnits != tc.units {
				t.Errorf("%s events %+v, want one to %d units", tc.kind, evs, tc.units)
			}
		})
	}
}

func TestACLDenialAndAPIDownAreRetried(t *testing.T) {
	r := newRig(t)
	r.putJob(alloc1, device{"nvidia/gpumem", 3, gpuA})
	path := r.violate(alloc1, gpuA, t0)
	// The controller's token may handle violations but not read or submit jobs.
	r.vs.SetToken("ctl", varserver.Rule{Path: violations.PathPrefix + "*", Capabilities: []string{varserver.CapRead, varserver.CapWrite}})
	r.api = r.vs.Client(t, "ctl")
	c := r.controller(nil)
	if err := r.pass(c); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("pass with a token that cannot read the allocation: %v, want a 403", err)
	}
	if r.handled(path) != "" {
		t.Fatal("a denied violation was marked handled: it would never be retried")
	}
	r.vs.SetDown(true)
	if err := r.pass(c); err == nil {
		t.Fatal("pass with the Nomad API down succeeded")
	}
	r.vs.SetDown(false)
	r.vs.SetToken("ctl",
		varserver.Rule{Path: violations.PathPrefix + "*", Capabilities: []string{varserver.CapRead, varserver.CapWrite}},
		varserver.Rule{Path: "gpufrac/templates/*", Capabilities: []string{varserver.CapRead, varserver.CapWrite}, Jobs: []string{varserver.CapSubmitJob}})
	if err := r.pass(c); err != nil {
		t.Fatalf("pass once the token may submit jobs: %v", err)
	}
	if r.count(0) != firstStep {
		t.Errorf("count %d after the retry, want %d", r.count(0), firstStep)
	}
	// That token may not stop allocations: the re-registration stands, the stop is reported.
	if a, _ := r.vs.Alloc(alloc1); a.DesiredStatus == api.AllocDesiredStatusStop || len(r.events(EventError)) != 1 ||
		!strings.Contains(r.events(EventError)[0].Message, "not stopped") || !strings.HasPrefix(r.handled(path), "reregistered") {
		t.Errorf("alloc desired %q, errors %+v, violation %q: want the allocation left, one error, reregistered", a.DesiredStatus, r.events(EventError), r.handled(path))
	}
}

// metric is a counter's value (with label kind when given) or a histogram's sample count.
func metric(t *testing.T, reg *prometheus.Registry, name, kind string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// The re-registration changes the broken task's gpufrac count and records the allocation in the
// job's meta, and nothing else: the job's own restart, reschedule and update settings, its other
// tasks, resources and constraints reach Nomad as they were, so Nomad replaces the allocation the
// way the job asks.
func TestReregisteringKeepsTheJobsOwnSettings(t *testing.T) {
	r := newRig(t)
	ids := make([]string, 3)
	for k := range ids {
		ids[k] = ledger.InstanceID(gpuA, k)
	}
	job := r.vs.PutJob(&api.Job{ID: ptr("train"), Name: ptr("train"), Type: ptr("batch"), Priority: ptr(70),
		Datacenters: []string{"dc1", "dc2"}, Meta: map[string]string{"team": "vision"},
		Constraints: []*api.Constraint{{LTarget: "${attr.kernel.name}", RTarget: "linux", Operand: "="}},
		Update:      &api.UpdateStrategy{MaxParallel: ptr(2), HealthCheck: ptr("task_states"), AutoRevert: ptr(true)},
		TaskGroups: []*api.TaskGroup{{
			Name: ptr("g"), Count: ptr(1),
			RestartPolicy:    &api.RestartPolicy{Attempts: ptr(1), Interval: ptr(10 * time.Minute), Delay: ptr(15 * time.Second), Mode: ptr("fail")},
			ReschedulePolicy: &api.ReschedulePolicy{Attempts: ptr(2), Interval: ptr(time.Hour), Unlimited: ptr(false), DelayFunction: ptr("constant")},
			Tasks: []*api.Task{
				{Name: "main", Driver: "exec", Config: map[string]any{"command": "python3", "args": []any{"train.py"}},
					Env: map[string]string{"EPOCHS": "3"}, Meta: map[string]string{"gpufrac_template": "lora"},
					Resources: &api.Resources{CPU: ptr(4000), MemoryMB: ptr(16384), Devices: []*api.RequestedDevice{
						{Name: "nvidia/gpumem", Count: ptr(uint64(3)), Constraints: []*api.Constraint{{LTarget: "${device.model}", RTarget: "H100", Operand: "="}}}}}},
				{Name: "sidecar", Driver: "exec", Config: map[string]any{"command": "logger"}, Resources: &api.Resources{CPU: ptr(100)}},
			},
		}}})
	r.putAlloc(alloc1, job, api.AllocClientStatusRunning, []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpumem", Name: "h100-0", DeviceIDs: ids}})
	r.violate(alloc1, gpuA, t0)
	if err := r.pass(r.controller(nil)); err != nil {
		t.Fatal(err)
	}
	after, _ := r.vs.Job("default", "train")
	if *after.Version != 1 || r.count(0) != firstStep {
		t.Fatalf("version %d, count %d: want the job re-registered with %d units", *after.Version, r.count(0), firstStep)
	}
	// What the controller may change, put back; what the server sets on every registration,
	// left out. The rest must be the job as it was.
	want := *job
	got := *after
	got.TaskGroups[0].Tasks[0].Resources.Devices[0].Count = ptr(uint64(3))
	delete(got.Meta, MetaEscalated+"g.main")
	delete(got.Meta, MetaAttempt+"g.main")
	for _, j := range []*api.Job{&want, &got} {
		j.Version, j.ModifyIndex, j.JobModifyIndex, j.CreateIndex, j.Status = nil, nil, nil, nil, nil
	}
	wb, err := json.MarshalIndent(want, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	gb, err := json.MarshalIndent(got, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if string(wb) != string(gb) {
		t.Errorf("the re-registered job differs from the job beyond the count and the meta:\nbefore:\n%s\nafter:\n%s", wb, gb)
	}
}

// The next guarantee is sized by the cap formula of the policy the task's template names, as the
// plugins size its units.
func TestTheTemplatesPolicySizesTheNextGuarantee(t *testing.T) {
	r := newRig(t)
	store, err := nomadvars.New(nomadvars.Config{Address: r.vs.URL()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	wide := policy.Default()
	wide.Name, wide.CapMarginPercent = "wide", 60
	if _, err := store.PutPolicyUnchecked(ctx, wide); err != nil {
		t.Fatal(err)
	}
	if _, err := store.PutTemplateUnchecked(ctx, policy.Template{Name: "lora", Policy: "wide", PeakBytes: 2 * size.GiB}); err != nil {
		t.Fatal(err)
	}
	r.putJob(alloc1, device{"nvidia/gpumem", 3, gpuA})
	r.violate(alloc1, gpuA, t0)
	if err := r.pass(r.controller(func(c *Config) { c.Templates = store })); err != nil {
		t.Fatal(err)
	}
	want := uint64(wide.Units(wide.Cap(5 * size.GiB)))
	if got := r.count(0); got != want || want == firstStep {
		t.Errorf("count %d, want %d (policy wide's formula over 5GiB; the default's gives %d)", got, want, firstStep)
	}
}

// Every kind of event is a series from the start, at 0: rate() and increase() then count a
// kind's first event, which they miss on a series that appears with it.
func TestEveryEventKindStartsAtZero(t *testing.T) {
	r := newRig(t)
	reg := prometheus.NewRegistry()
	r.controller(func(cfg *Config) { cfg.Registerer = reg })
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "gpufrac_controller_events_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" {
					seen[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	for _, k := range EventKinds {
		if v, ok := seen[k]; !ok || v != 0 {
			t.Errorf("kind %q: present %v, value %v; want a series at 0 before any event", k, ok, v)
		}
	}
}
