package testutil

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

func TestNewSim(t *testing.T) {
	s, devs := NewSim(t, "2xH100=80GiB", "A10=24GiB")
	if len(devs) != 3 || devs[0].Index != 0 || devs[2].Index != 2 || devs[2].Model != "A10" || devs[1].MemoryBytes != 80*size.GiB {
		t.Fatalf("devices = %+v, want two H100 then an A10, in index order", devs)
	}
	if s.Kind() != "simulated" {
		t.Fatalf("Kind = %q", s.Kind())
	}
}

func TestAttachSim(t *testing.T) {
	s, devs := NewSim(t, "H100=80GiB")
	if err := AttachSim(t, s.Dir()).SetHealth(devs[0].UUID, false, "ECC errors"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Devices(context.Background())
	if err != nil || got[0].Healthy || got[0].HealthReason != "ECC errors" {
		t.Fatalf("the fault set through the attached handle is not seen by the first: %+v, %v", got, err)
	}
	r := &fatalRecorder{}
	done := make(chan struct{})
	empty := t.TempDir()
	go func() {
		defer close(done)
		AttachSim(r, empty)
	}()
	<-done
	if !strings.Contains(r.msg, empty) {
		t.Fatalf("attaching to a directory with no simulated GPUs: failure %q does not name it", r.msg)
	}
}

// fatalRecorder stands in for a test so that Eventually's failure can be observed; Fatalf ends
// the goroutine as testing's does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func runEventually(within time.Duration, what string, cond func() bool) (failure string) {
	r := &fatalRecorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Eventually(r, within, what, cond)
	}()
	<-done
	return r.msg
}

func TestEventually(t *testing.T) {
	var calls atomic.Int32
	if msg := runEventually(5*time.Second, "the third call", func() bool { return calls.Add(1) >= 3 }); msg != "" {
		t.Fatalf("Eventually failed on a condition that came true: %s", msg)
	}
	if calls.Load() != 3 {
		t.Fatalf("cond called %d times, want 3 (it must stop polling once the condition holds)", calls.Load())
	}
	start := time.Now()
	msg := runEventually(50*time.Millisecond, "a condition that never holds", func() bool { return false })
	if !strings.Contains(msg, "a condition that never holds") || !strings.Contains(msg, "50ms") {
		t.Fatalf("failure %q does not name the condition and the wait", msg)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("gave up after %s, before the 50ms it was given", waited)
	}
}

func TestBufferConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprint(&b, "x")
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("x", 400) {
		t.Fatalf("Buffer holds %d bytes, want 400", len(got))
	}
}

func TestFakeMPSControl(t *testing.T) {
	fi, err := os.Stat(FakeMPSControl(t))
	if err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("the fake MPS control is not an executable file: %v, %v", fi, err)
	}
}

func TestMPSRootIsShortAndGoes(t *testing.T) {
	var root string
	t.Run("test", func(t *testing.T) {
		root = MPSRoot(t)
		// A Unix socket path has about 100 bytes; a pipe directory adds a GPU UUID and more.
		if len(root) > 40 {
			t.Errorf("MPSRoot %q is %d bytes: too long for the sockets under it", root, len(root))
		}
	})
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("MPSRoot %s outlived its test: %v", root, err)
	}
}

// environOf is a child's environment once its exec is done (until then /proc shows the test's).
func environOf(t *testing.T, pid int, want string) string {
	t.Helper()
	var env string
	Eventually(t, 10*time.Second, "the child's own environment", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		env = strings.ReplaceAll(string(b), "\x00", "\n")
		return err == nil && strings.Contains(env, want)
	})
	return env
}

func TestStartTask(t *testing.T) {
	k := StartTask(t, map[string]string{"B": "2", "A": "1"}, "NOMAD_JOB_NAME=train")
	if env := environOf(t, k.PID(), "NOMAD_JOB_NAME=train\n"); env != "NOMAD_JOB_NAME=train\nA=1\nB=2\n" {
		t.Fatalf("environment %q, want the extra entries then the map's in key order, and nothing else", env)
	}
	select {
	case <-k.Exited():
		t.Fatal("the task exited before it was stopped")
	default:
	}
	k.Stop()
	select {
	case <-k.Exited():
	default:
		t.Fatal("Stop returned before the task was reaped")
	}
	k.Stop() // the test's cleanup stops it again: a second Stop must not block

	t.Setenv("GPUFRAC_TESTUTIL_INHERITED", "yes")
	stranger := StartTask(t, nil)
	environOf(t, stranger.PID(), "GPUFRAC_TESTUTIL_INHERITED=yes")
}

func TestStartPiped(t *testing.T) {
	cmd := exec.Command("sh", "-c", "echo ready; echo trouble >&2")
	out, stderr := StartPiped(t, cmd)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("stdout gave %q, %v; want the child's line", line, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := stderr.String(); got != "trouble\n" {
		t.Fatalf("stderr kept %q, want the child's", got)
	}
}
