package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
)

func TestTaskLabel(t *testing.T) {
	tests := []struct {
		task ledger.Task
		want string
	}{
		{ledger.Task{JobName: "leaker-1", TaskName: "leaker-1"}, "leaker-1"},
		{ledger.Task{JobName: "train", TaskName: "worker"}, "train/worker"},
		{ledger.Task{JobName: "train", TaskName: "train", AllocID: "1a2b3c4d5e"}, "train (alloc 1a2b3c4d)"},
		{ledger.Task{}, "unknown task"},
	}
	for _, tt := range tests {
		if got := taskLabel(tt.task); got != tt.want {
			t.Errorf("taskLabel(%+v) = %q, want %q", tt.task, got, tt.want)
		}
	}
}

func TestExpiry(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name          string
		created, seen time.Time
		seenWant      string
		expiresPrefix string
	}{
		{"never seen", now.Add(-30 * time.Second), time.Time{}, "never", "in 1m30s"},
		{"seen lately", now.Add(-time.Hour), now.Add(-10 * time.Second), " ago", "in 1m50s"},
		{"unseen past the grace", now.Add(-time.Hour), now.Add(-3 * time.Minute), " ago", "overdue"},
	}
	for _, tt := range tests {
		seen, exp := expiry(tt.created, tt.seen, now)
		if !strings.Contains(seen, tt.seenWant) || !strings.HasPrefix(exp, tt.expiresPrefix) {
			t.Errorf("%s: seen %q expires %q, want %q and %q...", tt.name, seen, exp, tt.seenWant, tt.expiresPrefix)
		}
	}
}

func TestLockHolder(t *testing.T) {
	dir := t.TempDir()
	if got := lockHolder(dir); !strings.Contains(got, "none has locked") {
		t.Errorf("no lock file: %q", got)
	}
	lock := filepath.Join(dir, ledger.LockFile)
	if err := os.WriteFile(lock, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := lockHolder(dir); !strings.Contains(got, "pid "+strconv.Itoa(os.Getpid())+" (") {
		t.Errorf("lock file of a live process: %q", got)
	}
	// PIDs are at most 2^22 on Linux: this one cannot be running.
	if err := os.WriteFile(lock, []byte("99999999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := lockHolder(dir); !strings.Contains(got, "has exited") {
		t.Errorf("lock file of a gone process: %q", got)
	}
}

// frames counts the frames --watch draws and ends the watch after two.
type frames struct {
	mu     sync.Mutex
	buf    strings.Builder
	cancel context.CancelFunc
}

func (f *frames) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buf.Write(p)
	if strings.Count(f.buf.String(), "gpufrac status    ") >= 2 {
		f.cancel()
	}
	return len(p), nil
}

func TestStatusWatchRedraws(t *testing.T) {
	c := newCLI(t)
	if code, _, errs := c.run("probe", "--template", "w", "--no-store", "--", "gpufrac", "simjob", "--peak", "1GiB", "--ramp", "20ms", "--hold", "50ms"); code != 0 {
		t.Fatalf("probe: %s", errs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := &frames{cancel: cancel}
	g := &globals{stateDir: c.state, backend: "simulated", simDir: c.simDir, defaultLevel: "warn"}
	var errb strings.Builder
	if err := cmdStatus(ctx, g, []string{"--watch", "--interval", "100ms", "--no-usage"}, out, &errb); err != nil {
		t.Fatalf("status --watch: %v (%s)", err, errb.String())
	}
	got := out.buf.String()
	if n := strings.Count(got, "every 100ms: gpufrac status"); n < 2 {
		t.Errorf("%d frames drawn before the watch ended, want 2:\n%s", n, got)
	}
	if !strings.Contains(got, "writer: ") || !strings.Contains(got, "footprints") {
		t.Errorf("a frame lacks the ledger's writer or its footprints:\n%s", got)
	}
	if err := cmdStatus(context.Background(), g, []string{"--watch", "--json"}, out, &errb); err == nil {
		t.Error("--watch --json was accepted")
	}
}
