package testutil

import (
	"io"
	"os/exec"
	"testing"
)

// StartPiped starts cmd with its stdout piped to the test, which reads what the child reports
// (an address, a "ready" line), and its stderr kept in the returned Buffer for failure
// messages. Ending and reaping the child stays the caller's.
func StartPiped(t testing.TB, cmd *exec.Cmd) (io.ReadCloser, *Buffer) {
	t.Helper()
	stderr := &Buffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	return out, stderr
}
