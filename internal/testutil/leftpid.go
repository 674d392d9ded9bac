package testutil

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/procfs"
)

// LeftPID is the PID a job's helper process wrote to file (the tests of a job that leaves a
// helper running, `echo $$ > "$1"`), waited for up to 10 s; the helper is SIGKILLed when the
// test ends, whatever the code under test did with it.
func LeftPID(t testing.TB, file string) int {
	t.Helper()
	var pid int
	Eventually(t, 10*time.Second, "the helper to write its pid to "+file, func() bool {
		b, err := os.ReadFile(file)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// Ended waits up to 10 s for process pid to be gone or a zombie; what names it in the failure.
func Ended(t testing.TB, pid int, what string) {
	t.Helper()
	Eventually(t, 10*time.Second, what, func() bool {
		st, err := procfs.Linux("").Stat(pid)
		return err != nil || st.Dead()
	})
}
