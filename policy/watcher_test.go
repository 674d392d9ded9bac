package policy

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/hashicorp/go-hclog"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type watchRig struct {
	w      *Watcher
	logs   *syncBuf
	cancel context.CancelFunc
	done   chan error
}

func startWatcher(t *testing.T, src PolicySource, name string, onChange func(Policy, Meta)) *watchRig {
	t.Helper()
	logs := &syncBuf{}
	w := NewWatcher(WatcherConfig{Source: src, Name: name, OnChange: onChange, MinBackoff: 10 * time.Millisecond, MaxBackoff: 80 * time.Millisecond,
		Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})})
	ctx, cancel := context.WithCancel(context.Background())
	r := &watchRig{w: w, logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v, want context.Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not stop on cancel")
		}
	})
	return r
}

func (r *watchRig) next(t *testing.T) Policy {
	t.Helper()
	select {
	case p := <-r.w.Updates():
		return p
	case <-time.After(5 * time.Second):
		t.Fatalf("no update; logs:\n%s", r.logs)
		return Policy{}
	}
}

func (r *watchRig) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case p := <-r.w.Updates():
		t.Fatalf("unexpected update %+v", p)
	case <-time.After(d):
	}
}

func (r *watchRig) waitLog(t *testing.T, substr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(r.logs.String(), substr) {
		if time.Now().After(deadline) {
			t.Fatalf("log never said %q; logs:\n%s", substr, r.logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func encodeP(t *testing.T, p Policy) map[string]string {
	t.Helper()
	items, err := EncodePolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	return items
}

func TestWatcherNomad(t *testing.T) {
	srv := varserver.New(varserver.Options{})
	t.Cleanup(srv.Close)
	srv.SetToken("plugin", varserver.Rule{Path: "gpufrac/*", Capabilities: []string{"read", "list"}})
	st, err := NewNomadStore(Config{Address: srv.URL(), Token: "plugin", WaitTime: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := samplePolicy()
	path := PolicyPath(p.Name)

	var calls []Policy
	var mu sync.Mutex
	r := startWatcher(t, st, p.Name, func(p Policy, _ Meta) { mu.Lock(); calls = append(calls, p); mu.Unlock() })

	// Absent at first: no policy, a warning, and a blocking query rather than polling.
	r.waitLog(t, "policy is absent")
	if _, _, ok := r.w.Current(); ok {
		t.Fatal("Current() ok before any policy")
	}
	srv.Put("", path, encodeP(t, p))
	if got := r.next(t); got != p {
		t.Fatalf("first = %+v", got)
	}

	// Idle: the blocking query holds, so only a handful of requests in 300ms.
	before := srv.Requests()
	r.none(t, 300*time.Millisecond)
	if n := srv.Requests() - before; n > 1 {
		t.Fatalf("%d requests while idle: polling instead of blocking", n)
	}

	// A rewrite with equal content bumps the index but is not a change.
	srv.Put("", path, encodeP(t, p))
	r.none(t, 100*time.Millisecond)

	// An invalid write is ignored and logged; the last good one stays.
	bad := encodeP(t, p)
	bad["max_tasks_per_gpu"] = "0"
	srv.Put("", path, bad)
	r.waitLog(t, "ignoring an invalid policy")
	r.none(t, 50*time.Millisecond)
	if cur, _, _ := r.w.Current(); cur != p {
		t.Fatalf("current after invalid write = %+v", cur)
	}
	p2 := p
	p2.MaxTasksPerGPU = 4
	srv.Put("", path, encodeP(t, p2))
	if got := r.next(t); got != p2 {
		t.Fatalf("after fix = %+v", got)
	}

	// Deleted: keep the last good one.
	srv.Delete("", path)
	r.waitLog(t, "policy is absent or was deleted; keeping the last good policy")
	if cur, _, ok := r.w.Current(); !ok || cur != p2 {
		t.Fatalf("current after delete = %+v", cur)
	}

	// 403: an error (not "absent"), backoff, then recovery when the token is fixed.
	// A query in flight was authorised when it started, so wake it with an unrelated write
	// (the policy is absent, so the table index moves) and only then change the policy.
	srv.SetToken("plugin")
	srv.Put("", "gpufrac/unrelated", map[string]string{"x": "1"})
	r.waitLog(t, "permission denied")
	deniedSince := time.Now()
	srv.Put("", path, encodeP(t, p))
	time.Sleep(200 * time.Millisecond)
	if cur, _, _ := r.w.Current(); cur != p2 {
		t.Fatalf("current during 403 = %+v", cur)
	}
	denied := 0
	for _, rq := range srv.RequestLog() {
		if rq.Status == 403 {
			denied++
		}
	}
	// Backoff 10, 20, 40, then 80ms: at most 4 + elapsed/80ms retries (+1 for the first).
	limit := 5 + int(time.Since(deniedSince)/(80*time.Millisecond))
	if denied < 2 || denied > limit {
		t.Fatalf("%d denied requests in %v with 10-80ms backoff: want retries, at most %d", denied, time.Since(deniedSince), limit)
	}
	srv.SetToken("plugin", varserver.Rule{Path: "gpufrac/*", Capabilities: []string{"read", "list"}})
	if got := r.next(t); got != p {
		t.Fatalf("after 403 fixed = %+v", got)
	}

	// Unavailable, and a change made meanwhile is seen when it comes back.
	srv.SetDown(true)
	r.waitLog(t, "cannot read the policy; retrying")
	srv.Put("", path, encodeP(t, p2))
	r.none(t, 100*time.Millisecond)
	srv.SetDown(false)
	if got := r.next(t); got != p2 {
		t.Fatalf("after outage = %+v", got)
	}

	// A restart drops the blocking query; the watcher reconnects and follows the next write.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	srv.Put("", path, encodeP(t, p))
	if got := r.next(t); got != p {
		t.Fatalf("after restart = %+v", got)
	}

	if os.Getenv("GPUFRAC_SHOW_LOGS") != "" {
		t.Log(r.logs.String())
	}
	mu.Lock()
	defer mu.Unlock()
	want := []Policy{p, p2, p, p2, p}
	if len(calls) != len(want) {
		t.Fatalf("OnChange calls = %d, want %d", len(calls), len(want))
	}
	for i := range want {
		if calls[i] != want[i] {
			t.Fatalf("OnChange call %d = %+v", i, calls[i])
		}
	}
	if strings.Contains(r.logs.String(), "plugin\"") || strings.Contains(r.logs.String(), "=plugin") {
		t.Fatalf("logs mention the token:\n%s", r.logs)
	}
}

func TestWatcherFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.json")
	fs := NewFileStore(path, FileOptions{PollInterval: 10 * time.Millisecond, WaitTime: time.Second})
	p := samplePolicy()
	if _, err := fs.PutPolicy(context.Background(), p, 0); err != nil {
		t.Fatal(err)
	}
	r := startWatcher(t, fs, p.Name, nil)
	if got := r.next(t); got != p {
		t.Fatalf("first = %+v", got)
	}

	// A hand edit that leaves indexes alone is still seen.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), `"max_tasks_per_gpu": "6"`, `"max_tasks_per_gpu": "2"`, 1)
	if edited == string(data) {
		t.Fatalf("test setup: no max_tasks_per_gpu in\n%s", data)
	}
	writeAtomic(t, path, edited)
	got := r.next(t)
	if got.MaxTasksPerGPU != 2 {
		t.Fatalf("after hand edit = %+v", got)
	}

	// Broken JSON: keep the last good one.
	writeAtomic(t, path, "{ not json")
	r.waitLog(t, "ignoring an invalid policy")
	if cur, _, _ := r.w.Current(); cur.MaxTasksPerGPU != 2 {
		t.Fatalf("current after bad file = %+v", cur)
	}
	// Removed file: keep it too.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	r.waitLog(t, "policy is absent")
	// The single-policy form works as a source as well.
	items := encodeP(t, p)
	items["mode"] = "isolated"
	var b strings.Builder
	b.WriteString("{")
	first := true
	for k, v := range items {
		if !first {
			b.WriteString(",")
		}
		first = false
		b.WriteString(`"` + k + `":"` + v + `"`)
	}
	b.WriteString("}")
	writeAtomic(t, path, b.String())
	if got := r.next(t); got.Mode != ModeIsolated || got.Name != p.Name {
		t.Fatalf("single form = %+v", got)
	}
}

func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".edit"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestWatcherBadName(t *testing.T) {
	w := NewWatcher(WatcherConfig{Source: NewFileStore(filepath.Join(t.TempDir(), "p.json"), FileOptions{}), Name: "a/b"})
	if err := w.Run(context.Background()); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"a/b"`) {
		t.Fatalf("Run = %v", err)
	}
}
