package probe

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/testutil"
)

// notAFile stands for the runner's stderr (the log and the tail of its last words): any
// writer that is not a file makes exec copy the job's output through a pipe.
type notAFile struct{ strings.Builder }

// A job is its first process: once that has exited, Done closes, whatever the processes it left
// hold. exec's Wait also waited for every holder of the job's stderr pipe, so a helper left
// running kept a job that had ended "running", holding its guarantee, until the helper ended:
// one in the job's process group (`sleep 600 &`, which Reap would have ended), or one that left
// it (setsid, a daemon), which Stop's SIGKILL of the group never reaches, so that Ctrl-C of
// gpufrac run, or of gpufrac probe, waited for it without bound. A stop then hangs no longer.
func TestAHelperHoldingTheJobsOutputDoesNotHoldTheJob(t *testing.T) {
	for _, tc := range []struct {
		name string
		// script starts a helper that writes its pid to $1 and keeps stderr open, then goes on.
		script string
		stop   bool // the job runs on until stopped
		code   int
	}{
		{"a helper in its group, the job exits", `sleep 600 & echo $! > "$1"; echo done >&2; exit 0`, false, 0},
		{"a helper in its group, the job fails", `sleep 600 & echo $! > "$1"; exit 3`, false, 3},
		{"a helper in a session of its own, the job exits", `setsid sh -c 'echo $$ > "$1"; exec sleep 600' sh "$1" & sleep 0.2; exit 0`, false, 0},
		{"a helper in a session of its own, the job is stopped", `setsid sh -c 'echo $$ > "$1"; exec sleep 600' sh "$1" & exec sleep 600`, true, 128 + int(syscall.SIGINT)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "helper.pid")
			var stderr notAFile
			p, err := Start(Spec{Command: []string{"sh", "-c", tc.script, "sh", pidFile}, Env: os.Environ(), Stderr: &stderr})
			if err != nil {
				t.Fatal(err)
			}
			testutil.LeftPID(t, pidFile)
			stopped := make(chan struct{})
			go func() {
				defer close(stopped)
				if tc.stop {
					p.Stop(time.Second)
				} else {
					<-p.Done()
				}
			}()
			// The helper lives 600 s: a bound well under it tells "held by the helper" apart
			// from a slow machine.
			select {
			case <-stopped:
			case <-time.After(30 * time.Second):
				t.Fatal("the job was held past 30s by the helper it left")
			}
			if got := p.ExitCode(); got != tc.code {
				t.Errorf("exit code %d, want %d (err %v)", got, tc.code, p.err)
			}
		})
	}
}

// joinGroupIfAsked makes the test binary a job's process that moves itself into the process
// group $GPUFRAC_TEST_JOIN_PGID names: exit 0 when it could, 3 when the kernel refused (EPERM).
func joinGroupIfAsked() {
	v := os.Getenv("GPUFRAC_TEST_JOIN_PGID")
	if v == "" {
		return
	}
	pgid, _ := strconv.Atoi(v)
	if err := syscall.Setpgid(0, pgid); err != nil {
		os.Exit(3)
	}
	os.Exit(0)
}

// A job's process cannot move into another job's process group, where the watchdog would charge
// it to that job (it ties a process that carries no token to the job whose group it is in): each
// job is a session of its own, and a process may join only a group of its own session. Jobs in
// the runner's session could.
func TestAJobCannotJoinAnothersProcessGroup(t *testing.T) {
	b, err := Start(Spec{Command: []string{"sleep", "600"}, Env: os.Environ()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Stop(time.Second) })
	a, err := Start(Spec{Command: []string{self(t)}, Env: append(os.Environ(), "GPUFRAC_TEST_JOIN_PGID="+strconv.Itoa(b.PID))})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the joining job did not end")
	}
	if code := a.ExitCode(); code != 3 {
		t.Fatalf("a job's process joining another job's group: exit %d, want 3 (refused)", code)
	}
}
