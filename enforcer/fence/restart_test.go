package fence_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// The enforcer restarts (a Nomad client upgrade or restart takes the plugin down, shut down or
// killed, and a new one opens the same fence directory and places the reservations that still
// live, under the same tokens) while a task's processes run. A process that attached before
// stays fenced: what it allocates afterwards is charged to its task in the file the new
// enforcer reads, refused past its task's limit, and counted in the sums the borrowers read; a
// process that attaches afterwards lands in the same task, and the two share the task's limit.
func TestEnforcerRestartKeepsItsTasksFenced(t *testing.T) {
	k := fencetest.Build(t)
	const budget = 3 * size.GiB
	// A and B may each borrow to 2 GiB of the 3 GiB budget, past their 1 GiB guarantees.
	tasks := []fence.Task{{Token: tokA, Cap: size.GiB, Limit: 2 * size.GiB}, {Token: tokB, Cap: size.GiB, Limit: 2 * size.GiB}}
	for _, how := range []string{"shut down", "killed"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			path := fence.Path(dir, fencetest.FakeUUID)
			var stop func()
			if how == "killed" {
				old := k.StartTool(t)
				want(t, old.Do(fmt.Sprintf("create %s %s 80G", path, fencetest.FakeUUID)), "ok", "the first enforcer")
				want(t, old.Do(fmt.Sprintf("place 3G %s=1G/2G %s=1G/2G", tokA, tokB)), "placed 2", "its placement")
				stop = old.Kill
			} else {
				old, err := fence.Create(dir, fencetest.FakeUUID, 80*size.GiB, budget)
				if err != nil {
					t.Fatal(err)
				}
				if err := old.SetTasks(tasks, budget); err != nil {
					t.Fatal(err)
				}
				stop = func() { old.Close() }
			}
			a1 := k.Start(t, k.Env(dir, tokA))
			b := k.Start(t, k.Env(dir, tokB))
			want(t, a1.Do("alloc 512M"), "ok", "A's first process before the restart")
			want(t, b.Do("alloc 256M"), "ok", "B before the restart")

			stop()
			tb := startAgain(t, dir, tasks, budget)
			if u := snap(t, tb, tokA); u.Used != 512*size.MiB || u.Procs != 1 {
				t.Fatalf("A as the new enforcer found it: %+v, want 512 MiB in 1 process", u)
			}

			// Charged to A where the enforcer reads, and borrowing past A's guarantee.
			want(t, a1.Do("alloc 1G"), "ok", "A's first process after the restart")
			a2 := k.Start(t, k.Env(dir, tokA))
			want(t, a2.Do("alloc 256M"), "ok", "A's second process, started after the restart")
			s := snapshotWithin(t, tb)
			u, _ := s.Task(tokA)
			if u.Used != 1792*size.MiB || u.Procs != 2 || s.Borrowed() != 768*size.MiB {
				t.Fatalf("after the restart: A %+v, borrowed %s; want 1792 MiB in 2 processes, 768 MiB borrowed", u, s.Borrowed())
			}
			n := 0
			for _, p := range s.Procs {
				if p.Token == tokA {
					n++
				}
			}
			if n != 2 {
				t.Fatalf("A's processes in the snapshot: %+v, want both", s.Procs)
			}
			// Past A's limit, whichever process asks: 1792 MiB + 512 MiB > 2 GiB.
			want(t, a1.Do("alloc 512M"), "err 2", "A's first process past its task's limit")
			want(t, a2.Do("alloc 512M"), "err 2", "A's second process past its task's limit")
			a1.WaitStderr("past its limit")
			// B reads A's use: 256 MiB of borrowable memory is left, not more.
			want(t, b.Do("alloc 1025M"), "err 2", "B borrowing what A's processes hold")
			want(t, b.Do("alloc 1G"), "ok", "B borrowing what is left")
			for _, p := range []*fencetest.Proc{a1, a2, b} {
				if e := p.Stderr(); strings.Contains(e, "unfenced") || strings.Contains(e, "watchdog alone") {
					t.Fatalf("a process left the fence across the restart: %s", e)
				}
			}
			if u := snap(t, tb, tokB); u.Used != 1280*size.MiB || u.Procs != 1 {
				t.Fatalf("B after the restart: %+v", u)
			}
		})
	}
}

// startAgain is the enforcer that starts after another: it opens the GPU's fence files in dir
// and places the reservations that still live, as they were.
func startAgain(t *testing.T, dir string, tasks []fence.Task, budget size.Bytes) *fence.Table {
	t.Helper()
	var tb *fence.Table
	var err error
	within(t, bound, "fence.Create after a restart", func() { tb, err = fence.Create(dir, fencetest.FakeUUID, 80*size.GiB, budget) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	within(t, bound, "SetTasks after a restart", func() { err = tb.SetTasks(tasks, budget) })
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// An enforcer that starts again and cannot open a placed task's accounting file (here it is short
// of file descriptors; so with any error but the file being gone or not a table) leaves the file
// as it is: the task's running process goes on charging it, and the enforcer counts it from its
// next pass (Verify opens it again). Before, the enforcer wrote the task a fresh file in its
// place, and, as that failed too, dropped the task from the control copy: SetTasks failed, the
// running process lost its placement (NoTask: unfenced, and for good, as the next write placed
// the task anew in a fresh file).
func TestRestartThatCannotOpenATasksFileKeepsIt(t *testing.T) {
	k := fencetest.Build(t)
	dir, tasks, a1 := placedAndLeft(t, k)
	path := fence.AccountPath(dir, tokA, fencetest.FakeUUID)
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	var tb *fence.Table
	// Two descriptors: the enforcer's claim on the GPU and its control copy.
	restore := descriptorsLeft(t, 2)
	within(t, bound, "a restart short of descriptors", func() {
		if tb, err = fence.Create(dir, fencetest.FakeUUID, 80*size.GiB, 0); err == nil {
			err = tb.SetTasks(tasks, 0)
		}
	})
	restore()
	if tb != nil {
		t.Cleanup(func() { tb.Close() })
	}
	if err != nil {
		t.Fatalf("the restart: %v", err)
	}
	if u := snap(t, tb, tokA); !u.Unopened || u.Used != 0 {
		t.Fatalf("a task whose file the enforcer could not open: %+v, want it unopened and nothing counted", u)
	}
	if now, err := os.Stat(path); err != nil || !os.SameFile(before, now) {
		t.Fatalf("the task's accounting file was replaced (%v)", err)
	}
	want(t, a1.Do("alloc 256M"), "ok", "A's process while its file is not open")
	diffs, err := tb.Verify()
	if err != nil || len(diffs) != 1 || !strings.Contains(diffs[0], "could not be opened") {
		t.Fatalf("Verify says %q, %v", diffs, err)
	}
	if u := snap(t, tb, tokA); u.Unopened || u.Used != 768*size.MiB || u.Procs != 1 {
		t.Fatalf("once the file is opened: %+v, want 768 MiB in 1 process", u)
	}
	want(t, a1.Do("alloc 257M"), "err 2", "A's process past its cap")
	a2 := k.Start(t, k.Env(dir, tokA))
	want(t, a2.Do("alloc 256M"), "ok", "a process of A started after the restart")
	want(t, a2.Do("alloc 1M"), "err 2", "that process past the cap the two share")
	if e := a1.Stderr(); strings.Contains(e, "unfenced") {
		t.Fatalf("A's process left the fence: %s", e)
	}
}

// descriptorsLeft lowers this process's limit on open files so that its next n opens succeed
// and the one after fails (EMFILE), and returns what puts the limit back.
func descriptorsLeft(t *testing.T, n int) func() {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// A new descriptor takes the lowest free number: the limit is the (n+1)th free one.
	var free []uint64
	for fd := uint64(0); len(free) <= n && fd < lim.Cur; fd++ {
		if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0); e == syscall.EBADF {
			free = append(free, fd)
		}
	}
	if len(free) <= n {
		t.Fatalf("fewer than %d descriptors free below the limit %d", n+1, lim.Cur)
	}
	short := lim
	short.Cur = free[n]
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &short); err != nil {
		t.Fatal(err)
	}
	restore := func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(restore)
	return restore
}

// A restarted enforcer that finds a placed task's lock file gone (the task's own directory: a
// process of it may remove it) cannot tell which of the task's processes live, and writes the
// task a fresh pair of files: a placement anew, with a generation of its own. A process of the
// file it replaced is told so at its next allocation (the fence's line on its stderr) instead of
// charging a file nobody reads any more, and the other tasks' borrowers, which keep a
// descriptor of each task's file by generation, read the new one. Before, the placement kept its
// generation: the old process went on allocating unseen, beside a new process of its task
// granted the whole guarantee again, and a borrower that had read the task's file before kept
// reading the replaced one, so it borrowed what the task's new process held.
func TestRestartThatReplacesATasksFileTellsItsProcesses(t *testing.T) {
	k := fencetest.Build(t)
	const budget = 3 * size.GiB
	tasks := []fence.Task{{Token: tokA, Cap: size.GiB, Limit: 2 * size.GiB}, {Token: tokB, Cap: size.GiB, Limit: 2 * size.GiB}}
	dir, old := table(t, budget, tasks...)
	a1 := k.Start(t, k.Env(dir, tokA))
	b := k.Start(t, k.Env(dir, tokB))
	want(t, a1.Do("alloc 512M"), "ok", "A before the restart")
	want(t, b.Do("alloc 1100M"), "ok", "B borrowing before the restart (it reads A's file)")
	old.Close()
	if err := os.Remove(livePath(t, dir, tokA)); err != nil {
		t.Fatal(err)
	}
	tb := startAgain(t, dir, tasks, budget)

	want(t, a1.Do("alloc 256M"), "ok", "A's process of the replaced file")
	a2 := k.Start(t, k.Env(dir, tokA))
	want(t, a2.Do("alloc 1536M"), "ok", "A's process of the new file, borrowing")
	if u := snap(t, tb, tokA); u.Used != 1536*size.MiB || u.Procs != 1 {
		t.Fatalf("A in its new file: %+v, want 1536 MiB in 1 process", u)
	}
	// A holds 1536 MiB and B 1100 MiB of the 3 GiB: 436 MiB is left to borrow.
	want(t, b.Do("alloc 437M"), "err 2", "B borrowing what A's new process holds")
	want(t, b.Do("alloc 436M"), "ok", "B borrowing what is left")
	a1.WaitStderr("ended or this process lost its slot")
}

// placedAndLeft places task A (1 GiB) in a fence directory, starts a process of it holding 512
// MiB, and closes the enforcer's table: the enforcer is gone, its task runs on. It returns the
// directory, the tasks placed and the process.
func placedAndLeft(t *testing.T, k fencetest.Kit) (string, []fence.Task, *fencetest.Proc) {
	t.Helper()
	tasks := []fence.Task{{Token: tokA, Cap: size.GiB}}
	dir, old := table(t, 0, tasks...)
	a1 := k.Start(t, k.Env(dir, tokA))
	want(t, a1.Do("alloc 512M"), "ok", "A before the enforcer went")
	old.Close()
	return dir, tasks, a1
}

// pausedAtPlacementAnew removes A's lock file, so that an enforcer starting on dir must place A
// anew, and starts one that stops between writing A's new file and publishing its generation.
// It returns that enforcer and the control copy's path.
func pausedAtPlacementAnew(t *testing.T, k fencetest.Kit, dir string) (*fencetest.Proc, string) {
	t.Helper()
	if err := os.Remove(livePath(t, dir, tokA)); err != nil {
		t.Fatal(err)
	}
	path := fence.Path(dir, fencetest.FakeUUID)
	enf := k.StartTool(t, "GF_TEST_PAUSE=task-file")
	want(t, enf.Do(fmt.Sprintf("create %s %s 80G", path, fencetest.FakeUUID)), "ok", "the enforcer that places A anew")
	enf.Send(fmt.Sprintf("place 0 %s=1G/1G", tokA))
	enf.WaitStderr("gf-test: paused at task-file")
	waitStopped(t, enf.PID())
	return enf, path
}

// A process that attaches while the enforcer places its task anew in the same slot finds, for a
// moment, the new placement's file in place (written first) and the control copy still naming
// the earlier generation (published after): it waits for the publish instead of claiming a slot
// under the earlier generation, which it would lose at its first charge after.
func TestAttachBeforeAPlacementAnewIsPublishedWaitsForIt(t *testing.T) {
	k := fencetest.Build(t)
	dir, old := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
	old.Close()
	enf, path := pausedAtPlacementAnew(t, k, dir)

	p := k.StartTool(t, "GF_TEST_PAUSE=attach-wait")
	p.Send("attach " + path + " " + tokA)
	p.WaitStderr("gf-test: paused at attach-wait")
	waitStopped(t, p.PID())
	// The try it waits after left the new file's generation as the enforcer wrote it, so the
	// next tries wait too (a restore of the control copy's would have made the two agree).
	var file, control uint32
	if _, err := fmt.Sscanf(k.StartTool(t).Do("gens "+path+" "+tokA), "gens %d %d", &file, &control); err != nil || file != control+1 {
		t.Fatalf("generations of the file and the control copy while the attach waits: %d and %d (%v), want the file's one ahead", file, control, err)
	}
	if err := syscall.Kill(enf.PID(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	want(t, enf.Reply(), "placed 1", "the placement anew")
	if err := syscall.Kill(p.PID(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	want(t, p.Reply(), "ok ", "the attach")
	want(t, p.DoWithin("charge 100M", bound), "ok", "its first charge")
	want(t, enf.Do("snapshot"), fmt.Sprintf("snap used=%d procs=1 ", 100*size.MiB), "the enforcer's reading")
}

// An enforcer killed while it places a task anew, between writing the new placement's file and
// publishing its generation, leaves the control copy naming the earlier generation and the new
// file in place. The next enforcer must not take that file as the placement the control copy
// names: a process of the replaced file would go on charging it under the earlier generation,
// believing itself fenced, where no enforcer reads any more. It places the task anew itself,
// and that process is told at its next allocation.
func TestRestartAfterAKilledPlacementAnewTellsTheReplacedFilesProcesses(t *testing.T) {
	k := fencetest.Build(t)
	dir, tasks, a1 := placedAndLeft(t, k)
	enf, _ := pausedAtPlacementAnew(t, k, dir)
	enf.Kill()

	tb := startAgain(t, dir, tasks, 0)
	want(t, a1.Do("alloc 256M"), "ok", "A's process of the replaced file")
	a1.WaitStderr("ended or this process lost its slot")
	a2 := k.Start(t, k.Env(dir, tokA))
	want(t, a2.DoWithin("alloc 1G", bound), "ok", "a process of A started after the restart")
	if u := snap(t, tb, tokA); u.Used != size.GiB || u.Procs != 1 {
		t.Fatalf("A after the restart: %+v, want 1 GiB in 1 process", u)
	}
}

// A task whose files cannot be made (a full or read-only disk; here a file where its directory
// goes) is named as that, with the system's reason: before, it was "no free task slot", with a
// table of 64 holding one task. The tasks beside it are placed, and the next write, once the
// cause is gone, places it too.
func TestATaskWhoseFilesCannotBeMadeSaysWhy(t *testing.T) {
	dir, tb := table(t, 8*size.GiB)
	blocker := filepath.Dir(fence.AccountPath(dir, tokA, fencetest.FakeUUID))
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tasks := []fence.Task{{Token: tokA, Cap: size.GiB}, {Token: tokB, Cap: size.GiB}}
	err := tb.SetTasks(tasks, 8*size.GiB)
	if !errors.Is(err, fence.ErrNoFile) || !errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fence.ErrFull) {
		t.Fatalf("SetTasks with A's directory taken by a file: %v; want ErrNoFile wrapping ENOTDIR", err)
	}
	placed := func() (a, b bool) {
		s, err := tb.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		_, a = s.Task(tokA)
		_, b = s.Task(tokB)
		return a, b
	}
	if a, b := placed(); a || !b {
		t.Fatalf("placed A %t, B %t; want B alone", a, b)
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	if err := tb.SetTasks(tasks, 8*size.GiB); err != nil {
		t.Fatalf("SetTasks once the file is gone: %v", err)
	}
	if a, b := placed(); !a || !b {
		t.Errorf("placed A %t, B %t; want both", a, b)
	}
}
