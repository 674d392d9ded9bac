package ledger

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/gpufrac/gpufrac/size"
)

// A full disk fails every commit its callers retry; the log says so once, not once a commit,
// and says when commits succeed again, so that the next full disk is said again.
func TestFullDiskIsLoggedOnce(t *testing.T) {
	var logs bytes.Buffer
	l, dir := newTest(t, Options{Logger: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})})
	failed := func() int { return strings.Count(logs.String(), "[ERROR] ledger: commit failed") }
	for _, step := range []struct {
		name       string
		full       bool
		wantErrors int
	}{
		{"the disk fills", true, 1},
		{"room again", false, 1},
		{"it fills again", true, 2},
	} {
		var free func()
		if step.full {
			free = fillDisk(t, dir, StateFile)
		}
		for range 5 {
			_, err := l.ReserveBytes(gpuA, size.GiB, Task{JobName: "j"})
			if step.full == (err == nil) {
				t.Fatalf("%s: Reserve: %v", step.name, err)
			}
		}
		if got := failed(); got != step.wantErrors {
			t.Errorf("%s: %d errors logged, want %d:\n%s", step.name, got, step.wantErrors, logs.String())
		}
		if free != nil {
			free()
		}
	}
	if !strings.Contains(logs.String(), "commits succeed again") {
		t.Errorf("the log does not say commits succeed again:\n%s", logs.String())
	}
}
