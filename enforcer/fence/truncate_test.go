package fence_test

import (
	"crypto/rand"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// A task may cut its own accounting file (it is root in its container and the file is its to
// write). The enforcer used to map every task's file and faulted with SIGBUS at its next pass:
// one tenant ended the node's enforcement. It now reads the files with pread and writes them
// only from a child process: here the file is cut to nothing and to half a page, and put back
// whole with a dead process's slot in it (so a reap has work and forks), over and over, while
// this process snapshots, verifies, reaps and places tasks. A SIGBUS would end this test binary.
// The neighbour's accounting is untouched throughout, and the cut file is named, its task
// counted for nothing.
func TestTruncatedAccountingFileDoesNotCrashTheEnforcer(t *testing.T) {
	k := fencetest.Build(t)
	tasks := []fence.Task{{Token: tokA, Cap: size.GiB}, {Token: tokB, Cap: size.GiB}}
	dir, tb := table(t, 0, tasks...)
	b := attach(t, dir, tokB)
	if r := b.Charge(300 * size.MiB); r != fence.Charged {
		t.Fatalf("the neighbour's charge: %v", r)
	}
	// A process of the hostile task charges and dies without detaching: its slot is a reaper's.
	path := fence.AccountPath(dir, tokA, fencetest.FakeUUID)
	victim := k.StartTool(t)
	want(t, victim.Do("attach "+fence.Path(dir, fencetest.FakeUUID)+" "+tokA), "ok", "attach")
	want(t, victim.Do("charge 100M"), "ok", "charge")
	victim.Kill()
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	restore := func() {
		if _, err := f.WriteAt(whole, 0); err != nil {
			t.Error(err)
		}
	}
	cut := func(n int64) {
		if err := f.Truncate(n); err != nil {
			t.Error(err)
		}
	}
	neighbourIntact := func(s fence.Snapshot, when string) {
		t.Helper()
		if u, ok := s.Task(tokB); !ok || u.Used != 300*size.MiB || u.Procs != 1 || u.Unreadable {
			t.Fatalf("%s: the neighbour's accounting %+v", when, u)
		}
	}

	// In turn, so each state is seen for sure.
	for _, n := range []int64{0, 2048} {
		restore()
		if got := tb.Reap(); got != 1 {
			t.Fatalf("the dead process's slot in the whole file: %d reaped, want 1", got)
		}
		if u := snap(t, tb, tokA); u.Used != 0 || u.Unreadable {
			t.Fatalf("after the reap: %+v", u)
		}
		cut(n)
		s := snapshotWithin(t, tb)
		neighbourIntact(s, "cut")
		if u, _ := s.Task(tokA); !u.Unreadable || !u.Unlocked || u.Used != 0 || u.Procs != 0 {
			t.Fatalf("cut to %d bytes, the task is read as %+v", n, u)
		}
		diffs, err := tb.Verify()
		if err != nil || len(diffs) != 1 || !strings.Contains(diffs[0], "cut short") {
			t.Fatalf("cut to %d bytes, Verify says %q, %v", n, diffs, err)
		}
		if got := tb.Reap(); got != 0 {
			t.Fatalf("cut to %d bytes, %d slots reaped", n, got)
		}
	}

	// At once: the cuts race the enforcer's reads and its reaping children.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			restore()
			cut(2048)
			cut(0)
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	rounds := 0
	for ; rounds < 300 && time.Now().Before(deadline); rounds++ {
		var s fence.Snapshot
		var snapErr, verifyErr, setErr error
		within(t, bound, "a pass over a file being cut", func() {
			s, snapErr = tb.Snapshot()
			tb.Reap()
			_, verifyErr = tb.Verify()
			setErr = tb.SetTasks(tasks, 0)
		})
		// Verify may find the cut file's lock kept (a reaping child ended inside it): left
		// for the next pass, as a kept lock is.
		if snapErr != nil || setErr != nil || (verifyErr != nil && !errors.Is(verifyErr, fence.ErrLocked)) {
			t.Fatalf("pass %d: snapshot %v, verify %v, set %v", rounds, snapErr, verifyErr, setErr)
		}
		neighbourIntact(s, "racing")
	}
	close(stop)
	wg.Wait()
	t.Logf("%d passes over a file being cut", rounds)
	if r := b.Charge(100 * size.MiB); r != fence.Charged {
		t.Fatalf("the neighbour's next charge: %v", r)
	}
	b.Uncharge(100 * size.MiB)
}

// A task that writes garbage over its own file, or grows it, harms nobody: garbage is named and
// counted for nothing, a grown file is read as before.
func TestGarbageAccountingFileIsTheTasksOwnLoss(t *testing.T) {
	tasks := []fence.Task{{Token: tokA, Cap: size.GiB}, {Token: tokB, Cap: size.GiB}}
	dir, tb := table(t, 0, tasks...)
	nb, own := attach(t, dir, tokB), attach(t, dir, tokA)
	if r := own.Charge(200 * size.MiB); r != fence.Charged {
		t.Fatalf("charge: %v", r)
	}
	path := fence.AccountPath(dir, tokA, fencetest.FakeUUID)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 3*st.Size()); err != nil {
		t.Fatal(err)
	}
	if u := snap(t, tb, tokA); u.Unreadable || u.Used != 200*size.MiB || u.Procs != 1 {
		t.Fatalf("a grown file: %+v", u)
	}
	garbage := make([]byte, st.Size())
	if _, err := rand.Read(garbage); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, garbage, 0o666); err != nil {
		t.Fatal(err)
	}
	s := snapshotWithin(t, tb)
	if u, _ := s.Task(tokA); !u.Unreadable || u.Used != 0 || u.Procs != 0 {
		t.Fatalf("a garbage file is read as %+v", u)
	}
	if u, _ := s.Task(tokB); u.Unreadable || u.Used != 0 || u.Procs != 1 {
		t.Fatalf("the neighbour: %+v", u)
	}
	diffs, err := tb.Verify()
	if err != nil || len(diffs) != 1 || !strings.Contains(diffs[0], "not a fence table") {
		t.Fatalf("Verify says %q, %v", diffs, err)
	}
	if r := nb.Charge(500 * size.MiB); r != fence.Charged {
		t.Fatalf("the neighbour's charge within its guarantee: %v", r)
	}
}
