package policy_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/storetest"
)

func TestWatcherFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.json")
	fs := policy.NewFileStore(path, policy.FileOptions{PollInterval: 10 * time.Millisecond, WaitTime: time.Second})
	p := storetest.SamplePolicy()
	if _, err := fs.PutPolicy(context.Background(), p, 0); err != nil {
		t.Fatal(err)
	}
	r := storetest.StartWatcher(t, fs, p.Name, nil)
	if got := r.Next(t); got != p {
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
	got := r.Next(t)
	if got.MaxTasksPerGPU != 2 {
		t.Fatalf("after hand edit = %+v", got)
	}

	// Broken JSON: keep the last good one.
	writeAtomic(t, path, "{ not json")
	r.WaitLog(t, "ignoring an invalid policy")
	if cur, _, _ := r.W.Current(); cur.MaxTasksPerGPU != 2 {
		t.Fatalf("current after bad file = %+v", cur)
	}
	// Removed file: keep it too.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	r.WaitLog(t, "policy is absent")
	// The single-policy form works as a source as well.
	items := storetest.EncodePolicy(t, p)
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
	if got := r.Next(t); got.Mode != policy.ModeIsolated || got.Name != p.Name {
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
	w := policy.NewWatcher(policy.WatcherConfig{Source: policy.NewFileStore(filepath.Join(t.TempDir(), "p.json"), policy.FileOptions{}), Name: "a/b"})
	if err := w.Run(context.Background()); !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), `"a/b"`) {
		t.Fatalf("Run = %v", err)
	}
}
