package nomadvars_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
	"github.com/gpufrac/gpufrac/policy/storetest"
)

// handled waits until the watcher waits in a blocking query past index: it has taken in the
// write made at index, and any update that write caused has been delivered (the watcher
// delivers before it asks again).
func handled(t *testing.T, srv *varserver.Server, index uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := srv.WaitHeldAt(ctx, index); err != nil {
		t.Fatal(err)
	}
}

// noUpdate checks that no update is waiting now; call it once the watcher has handled the write.
func noUpdate(t *testing.T, r *storetest.WatchRig) {
	t.Helper()
	select {
	case p := <-r.W.Updates():
		t.Fatalf("unexpected update %+v", p)
	default:
	}
}

func TestWatcherNomad(t *testing.T) {
	srv := varserver.New(varserver.Options{})
	t.Cleanup(srv.Close)
	srv.SetToken("plugin", varserver.Rule{Path: "gpufrac/*", Capabilities: []string{"read", "list"}})
	st, err := nomadvars.New(nomadvars.Config{Address: srv.URL(), Token: "plugin", WaitTime: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := storetest.SamplePolicy()
	path := policy.PolicyPath(p.Name)

	var calls []policy.Policy
	var mu sync.Mutex
	r := storetest.StartWatcher(t, st, p.Name, func(p policy.Policy, _ policy.Meta) { mu.Lock(); calls = append(calls, p); mu.Unlock() })

	// Absent at first: no policy, a warning, and a blocking query rather than polling.
	r.WaitLog(t, "policy is absent")
	if _, _, ok := r.W.Current(); ok {
		t.Fatal("Current() ok before any policy")
	}
	v := srv.Put("", path, storetest.EncodePolicy(t, p))
	if got := r.Next(t); got != p {
		t.Fatalf("first = %+v", got)
	}

	// Idle: the watcher waits in a blocking query past the policy's index instead of polling
	// (a query without an index is answered at once and never waits at the server).
	handled(t, srv, v.ModifyIndex)

	// A rewrite with equal content bumps the index but is not a change.
	v = srv.Put("", path, storetest.EncodePolicy(t, p))
	handled(t, srv, v.ModifyIndex)
	noUpdate(t, r)

	// An invalid write is ignored and logged; the last good one stays.
	bad := storetest.EncodePolicy(t, p)
	bad["max_tasks_per_gpu"] = "0"
	v = srv.Put("", path, bad)
	r.WaitLog(t, "ignoring an invalid policy")
	handled(t, srv, v.ModifyIndex)
	noUpdate(t, r)
	if cur, _, _ := r.W.Current(); cur != p {
		t.Fatalf("current after invalid write = %+v", cur)
	}
	p2 := p
	p2.MaxTasksPerGPU = 4
	srv.Put("", path, storetest.EncodePolicy(t, p2))
	if got := r.Next(t); got != p2 {
		t.Fatalf("after fix = %+v", got)
	}

	// Deleted: keep the last good one.
	srv.Delete("", path)
	r.WaitLog(t, "policy is absent or was deleted; keeping the last good policy")
	if cur, _, ok := r.W.Current(); !ok || cur != p2 {
		t.Fatalf("current after delete = %+v", cur)
	}

	// 403: an error (not "absent"), backoff, then recovery when the token is fixed.
	// A query in flight was authorised when it started, so wake it with an unrelated write
	// (the policy is absent, so the table index moves) and only then change the policy.
	srv.SetToken("plugin")
	srv.Put("", "gpufrac/unrelated", map[string]string{"x": "1"})
	r.WaitLog(t, "permission denied")
	deniedSince := time.Now()
	srv.Put("", path, storetest.EncodePolicy(t, p))
	deniedCount := func() int {
		n := 0
		for _, rq := range srv.RequestLog() {
			if rq.Status == 403 {
				n++
			}
		}
		return n
	}
	// Wait for the retries themselves, however slowly a loaded machine runs them.
	for deadline := time.Now().Add(10 * time.Second); deniedCount() < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d denied requests in 10s: the watcher does not retry", deniedCount())
		}
	}
	if cur, _, _ := r.W.Current(); cur != p2 {
		t.Fatalf("current during 403 = %+v", cur)
	}
	denied := deniedCount()
	// Backoff 10, 20, 40, then 80ms: at most 4 + elapsed/80ms retries (+1 for the first).
	limit := 5 + int(time.Since(deniedSince)/(80*time.Millisecond))
	if denied < 3 || denied > limit {
		t.Fatalf("%d denied requests in %v with 10-80ms backoff: want retries, at most %d", denied, time.Since(deniedSince), limit)
	}
	srv.SetToken("plugin", varserver.Rule{Path: "gpufrac/*", Capabilities: []string{"read", "list"}})
	if got := r.Next(t); got != p {
		t.Fatalf("after 403 fixed = %+v", got)
	}

	// Unavailable, and a change made meanwhile is seen when it comes back.
	srv.SetDown(true)
	r.WaitLog(t, "cannot read the policy; retrying")
	srv.Put("", path, storetest.EncodePolicy(t, p2))
	noUpdate(t, r) // nothing answers while down; the change is seen once the server is back
	srv.SetDown(false)
	if got := r.Next(t); got != p2 {
		t.Fatalf("after outage = %+v", got)
	}

	// A restart drops the blocking query; the watcher reconnects and follows the next write.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	srv.Put("", path, storetest.EncodePolicy(t, p))
	if got := r.Next(t); got != p {
		t.Fatalf("after restart = %+v", got)
	}

	if os.Getenv("GPUFRAC_SHOW_LOGS") != "" {
		t.Log(r.Logs.String())
	}
	mu.Lock()
	defer mu.Unlock()
	want := []policy.Policy{p, p2, p, p2, p}
	if len(calls) != len(want) {
		t.Fatalf("OnChange calls = %d, want %d", len(calls), len(want))
	}
	for i := range want {
		if calls[i] != want[i] {
			t.Fatalf("OnChange call %d = %+v", i, calls[i])
		}
	}
	if strings.Contains(r.Logs.String(), "plugin\"") || strings.Contains(r.Logs.String(), "=plugin") {
		t.Fatalf("logs mention the token:\n%s", r.Logs)
	}
}
