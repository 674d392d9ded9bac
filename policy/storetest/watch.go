package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/hashicorp/go-hclog"
)

// WatchRig runs a policy.Watcher for a test and collects its logs.
type WatchRig struct {
	W      *policy.Watcher
	Logs   fmt.Stringer
	cancel context.CancelFunc
	done   chan error
}

// StartWatcher runs a watcher of src with short backoffs until the test ends, and checks that it
// stops on cancel.
func StartWatcher(t *testing.T, src policy.PolicySource, name string, onChange func(policy.Policy, policy.Meta)) *WatchRig {
	t.Helper()
	logs := &testutil.Buffer{}
	w := policy.NewWatcher(policy.WatcherConfig{Source: src, Name: name, OnChange: onChange, MinBackoff: 10 * time.Millisecond, MaxBackoff: 80 * time.Millisecond,
		Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})})
	ctx, cancel := context.WithCancel(context.Background())
	r := &WatchRig{W: w, Logs: logs, cancel: cancel, done: make(chan error, 1)}
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

// Next waits for the watcher's next update.
func (r *WatchRig) Next(t *testing.T) policy.Policy {
	t.Helper()
	select {
	case p := <-r.W.Updates():
		return p
	case <-time.After(5 * time.Second):
		t.Fatalf("no update; logs:\n%s", r.Logs)
		return policy.Policy{}
	}
}

// WaitLog waits until the watcher has logged substr.
func (r *WatchRig) WaitLog(t *testing.T, substr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(r.Logs.String(), substr) {
		if time.Now().After(deadline) {
			t.Fatalf("log never said %q; logs:\n%s", substr, r.Logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// EncodePolicy is policy.EncodePolicy that fails the test on error.
func EncodePolicy(t *testing.T, p policy.Policy) map[string]string {
	t.Helper()
	items, err := policy.EncodePolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	return items
}
