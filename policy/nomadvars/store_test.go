package nomadvars_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
	"github.com/gpufrac/gpufrac/policy/storetest"
)

// TestContract runs the check-and-set contract every policy.Store keeps against Nomad Variables.
func TestContract(t *testing.T) {
	storetest.Contract(t, func(t *testing.T) policy.Store { s, _ := newNomad(t); return s })
}

func newNomad(t *testing.T) (*nomadvars.Store, *varserver.Server) {
	t.Helper()
	srv := varserver.New(varserver.Options{})
	t.Cleanup(srv.Close)
	st, err := nomadvars.New(nomadvars.Config{Address: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return st, srv
}

func TestOutOfBand(t *testing.T) {
	ctx := context.Background()
	s, srv := newNomad(t)
	good, _ := policy.EncodeTemplate(policy.Template{Name: "ok", PeakBytes: 1})
	srv.Put("", policy.TemplatePath("ok"), good)
	srv.Put("", policy.TemplatePath("broken"), map[string]string{"schema_version": "1", "name": "broken", "policy": "", "peak_bytes": "lots"})
	srv.Put("", policy.TemplatePath("nested/x"), good) // not a template: two segments
	srv.Put("", policy.TemplatePath("copied"), good)   // name item says "ok"
	list, err := s.ListTemplates(ctx)
	if len(list) != 1 || list[0].Name != "ok" {
		t.Fatalf("list = %+v", list)
	}
	if !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), `peak_bytes = "lots"`) || !strings.Contains(err.Error(), "gpufrac/templates/copied") {
		t.Fatalf("list error = %v", err)
	}
	if _, _, err := s.GetTemplate(ctx, "copied"); !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("copied: %v", err)
	}
}

func TestPermissionDenied(t *testing.T) {
	ctx := context.Background()
	srv := varserver.New(varserver.Options{})
	t.Cleanup(srv.Close)
	items, _ := policy.EncodePolicy(storetest.SamplePolicy())
	srv.Put("", policy.PolicyPath(storetest.SamplePolicy().Name), items)
	srv.SetToken("reader", varserver.Rule{Path: "gpufrac/*", Capabilities: []string{"read", "list"}})
	srv.SetToken("nobody")

	dir := t.TempDir()
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte("reader\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reader, err := nomadvars.New(nomadvars.Config{Address: srv.URL(), TokenFile: tokFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := reader.GetPolicy(ctx, storetest.SamplePolicy().Name); err != nil {
		t.Fatalf("reader via token file: %v", err)
	}
	if _, err := reader.PutPolicyUnchecked(ctx, storetest.SamplePolicy()); !errors.Is(err, policy.ErrPermissionDenied) {
		t.Fatalf("reader write: %v", err)
	}
	nobody, _ := nomadvars.New(nomadvars.Config{Address: srv.URL(), Token: "nobody"})
	_, _, err = nobody.GetPolicy(ctx, storetest.SamplePolicy().Name)
	if !errors.Is(err, policy.ErrPermissionDenied) || errors.Is(err, policy.ErrNotFound) {
		t.Fatalf("403 read: %v", err)
	}
	if strings.Contains(err.Error(), "nobody") {
		t.Fatalf("error leaks the token: %v", err)
	}
	if _, err := nobody.ListTemplates(ctx); err != nil {
		t.Fatalf("list without list capability drops entries silently, got %v", err)
	}
	if _, err := nomadvars.New(nomadvars.Config{Address: srv.URL(), TokenFile: filepath.Join(dir, "missing")}); err == nil {
		t.Fatal("missing token file accepted")
	}
}

func TestEnvAndNamespace(t *testing.T) {
	ctx := context.Background()
	srv := varserver.New(varserver.Options{})
	t.Cleanup(srv.Close)
	srv.SetToken("envtok", varserver.Rule{Namespace: "prod", Path: "gpufrac/*", Capabilities: []string{"read", "write"}})
	t.Setenv("NOMAD_ADDR", srv.URL())
	t.Setenv("NOMAD_TOKEN", "envtok")
	t.Setenv("NOMAD_NAMESPACE", "prod")
	s, err := nomadvars.New(nomadvars.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s.String(), "envtok") || !strings.Contains(s.String(), "prod") {
		t.Fatalf("String() = %q", s.String())
	}
	if _, err := s.PutPolicy(ctx, storetest.SamplePolicy(), 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := srv.Get("prod", policy.PolicyPath(storetest.SamplePolicy().Name)); !ok {
		t.Fatal("policy not written to namespace prod")
	}
	if _, err := nomadvars.New(nomadvars.Config{Namespace: "*"}); err == nil {
		t.Fatal("wildcard namespace accepted")
	}
}

func TestUnreachable(t *testing.T) {
	srv := varserver.New(varserver.Options{})
	url := srv.URL()
	srv.Close()
	s, err := nomadvars.New(nomadvars.Config{Address: url})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.GetPolicy(context.Background(), "default")
	if err == nil || errors.Is(err, policy.ErrNotFound) || !strings.Contains(err.Error(), url) {
		t.Fatalf("unreachable: %v", err)
	}
}

// A client certificate is loaded when the client is built, so a wrong path fails there, naming
// the file, rather than on the first request.
func TestClientCertificate(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "client.pem")
	_, err := nomadvars.New(nomadvars.Config{Address: "https://127.0.0.1:1", ClientCert: missing, ClientKey: missing})
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("missing client certificate: %v, want an error naming %s", err, missing)
	}
}

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
