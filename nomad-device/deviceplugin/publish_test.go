package deviceplugin

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy/violations"
	"github.com/gpufrac/gpufrac/size"
)

// published lists the violation variables on vs.
func published(vs *varserver.Server) []varserver.Variable {
	var out []varserver.Variable
	for _, v := range vs.List() {
		if strings.HasPrefix(v.Path, violations.PathPrefix) {
			out = append(out, v)
		}
	}
	return out
}

// A violation reaches Nomad however long its API is down (the plugin retries), carries no
// reservation token, and is published once: a restarted plugin publishes the ledger's recent
// violations again (one it could not publish before it stopped still reaches the controller),
// and the create-only write leaves the one already there, with the controller's mark, as it was.
func TestViolationsArePublishedOnceThroughOutagesAndRestarts(t *testing.T) {
	vs := varserver.New(varserver.Options{})
	t.Cleanup(vs.Close)
	vs.SetToken("plugin", varserver.Rule{Path: violations.PathPrefix + "*", Capabilities: []string{varserver.CapWrite}})
	vs.SetDown(true)
	cfg := `violations {
		address = "` + vs.URL() + `"
		token   = "plugin"
	}`
	s, dir := newSim(t, "H100=80GiB", cfg)
	m, _ := firstFingerprint(t, s)
	res := mustReserve(t, s, ids(m.DeviceGroup[0], 3))
	token := res.GetEnvs()["GPUFRAC_RESERVATION"]
	task := testutil.StartTask(t, res.GetEnvs())
	// Past its 3GiB cap while Nomad's API is down: stopped and recorded, not yet published.
	if err := simOf(t, dir).SetUsage(uuidOf(m.DeviceGroup[0]), task.PID(), 5*size.GiB); err != nil {
		t.Fatal(err)
	}
	select {
	case <-task.Exited():
	case <-time.After(20 * time.Second):
		t.Fatal("the task over its cap was not stopped within 20s")
	}
	// The publisher tries while the API is down (the fake drops the connection) and retries.
	putViolation := func(from int) func() bool {
		return func() bool {
			for _, rq := range vs.RequestLog()[from:] {
				if rq.Method == http.MethodPut && strings.HasPrefix(rq.Path, "/v1/var/"+violations.PathPrefix) {
					return true
				}
			}
			return false
		}
	}
	testutil.Eventually(t, 20*time.Second, "a publish attempt while the API is down", putViolation(0))
	if n := len(published(vs)); n != 0 {
		t.Fatalf("%d violations published while the API was down", n)
	}

	vs.SetDown(false)
	testutil.Eventually(t, 30*time.Second, "the violation published once the API is back", func() bool { return len(published(vs)) == 1 })
	v := published(vs)[0]
	for k, val := range v.Items {
		if strings.Contains(val, token) {
			t.Errorf("item %s carries the reservation token", k)
		}
	}
	// The controller handles it.
	items := map[string]string{}
	for k, val := range v.Items {
		items[k] = val
	}
	items[violations.KeyHandled] = "reregistered: by the test"
	handled := vs.Put("", v.Path, items)

	// A restarted plugin publishes the ledger's recent violations again.
	s.Shutdown()
	before := len(vs.RequestLog())
	s2 := newSimIn(t, dir, Options{}, "H100=80GiB", cfg)
	firstFingerprint(t, s2)
	testutil.Eventually(t, 30*time.Second, "the restarted plugin to publish the violation again", putViolation(before))
	after := published(vs)
	if len(after) != 1 || after[0].Path != v.Path || after[0].ModifyIndex != handled.ModifyIndex || after[0].Items[violations.KeyHandled] != items[violations.KeyHandled] {
		t.Fatalf("after the republish: %+v; want the one variable as the controller left it", after)
	}
}

// A violation publishes what its task asked for beside what it held: the controller sizes the
// next allocation's units from the larger.
func TestPublishedRecordCarriesWhatWasAsked(t *testing.T) {
	l, err := ledger.Open("", ledger.Options{NoPersist: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	v := ledger.Violation{GPU: "GPU-x", Task: ledger.Task{AllocID: "a1", JobName: "j", TaskName: "t", Namespace: "ml"}, CapBytes: 3 * size.GiB,
		PeakBytes: size.GiB, AskedBytes: 20 * size.GiB, Action: "oom-in-process", CrossedAt: time.Now()}
	r := record(v, l, "n1")
	if r.AskedBytes != v.AskedBytes || r.PeakBytes != v.PeakBytes || r.Reached() != 20*size.GiB {
		t.Fatalf("record %+v from %+v", r, v)
	}
	if got := r.Items()[violations.KeyAskedBytes]; got != "21474836480" {
		t.Fatalf("item %s = %q, want 21474836480", violations.KeyAskedBytes, got)
	}
	// the controller reads the allocation in its own namespace
	if got := r.Items()[violations.KeyNamespace]; got != "ml" {
		t.Fatalf("item %s = %q, want the task's namespace ml", violations.KeyNamespace, got)
	}
}
