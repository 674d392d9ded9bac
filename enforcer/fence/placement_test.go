package fence_test

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// A process that attaches while its task is placed anew (ended and placed again under the same
// token) ends up in the new placement's files, whichever step of its attach the placement came
// at, and whichever slot of the control copy the new placement took, so the enforcer sees what
// it charges. It once locked the new placement's bytes beside the old placement's accounting
// file, or claimed a slot in a file the enforcer had let go, and charged where nobody reads:
// past its task's cap, and out of its neighbours' sight. And one that had read the control copy
// before a placement anew in another slot found that slot held by someone else and gave up
// (no task for its reservation): it was held to the unplaced allowance while its task was placed.
func TestAttachDuringAPlacementAnewLandsInTheNewFiles(t *testing.T) {
	k := fencetest.Build(t)
	for _, point := range []string{"attach-found", "attach-opened", "attach-mapped"} {
		for _, tt := range []struct {
			name string
			// anew ends task A and places it again; the second placement is what A is now.
			anew [][]fence.Task
		}{
			{"same slot", [][]fence.Task{nil, {{Token: tokA, Cap: size.GiB}}}},
			{"another slot", [][]fence.Task{nil, {{Token: tokB, Cap: size.GiB}},
				{{Token: tokB, Cap: size.GiB}, {Token: tokA, Cap: size.GiB}}}},
		} {
			t.Run(point+"/"+tt.name, func(t *testing.T) {
				dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
				before := livePath(t, dir, tokA)
				p := k.StartTool(t, "GF_TEST_PAUSE="+point)
				p.Send("attach " + fence.Path(dir, fencetest.FakeUUID) + " " + tokA)
				p.WaitStderr("gf-test: paused at " + point)
				waitStopped(t, p.PID())
				// Held open as a process of the earlier placement would: its inode is not
				// free for the new file to take, so the new lock file has another name.
				held, err := os.Open(fence.AccountPath(dir, tokA, fencetest.FakeUUID))
				if err != nil {
					t.Fatal(err)
				}
				defer held.Close()
				for _, tasks := range tt.anew {
					if err := tb.SetTasks(tasks, 0); err != nil {
						t.Fatal(err)
					}
				}
				if now := livePath(t, dir, tokA); now == before {
					t.Fatalf("placed anew, the task kept its lock file %s", now)
				}
				if err := syscall.Kill(p.PID(), syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				want(t, p.Reply(), "ok ", "attach across the placement")
				want(t, p.DoWithin("charge 100M", bound), "ok", "charge")
				if u := snap(t, tb, tokA); u.Used != 100*size.MiB || u.Procs != 1 {
					t.Fatalf("charged 100M after attaching across a placement anew: the enforcer sees %+v", u)
				}
				if _, err := os.Stat(before); !os.IsNotExist(err) {
					t.Fatalf("the earlier placement's lock file %s: %v, want it removed", before, err)
				}
			})
		}
	}
}

// waitStopped waits until the process pid is stopped (a SIGCONT sent before would be lost).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		// The state follows the command name's closing parenthesis.
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "T" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop within %s", pid, bound)
		}
		time.Sleep(time.Millisecond)
	}
}

// Every placement gets a fresh accounting file in a directory of its own token's hash, and an
// ended task's is removed: a container still holding the mount of an ended task's directory
// reaches nothing of its successor's. An enforcer that starts again keeps the files of the tasks
// it finds placed (their processes' use stays counted).
func TestEachPlacementGetsAFreshFile(t *testing.T) {
	dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
	a := attach(t, dir, tokA)
	liveA := livePath(t, dir, tokA)
	if r := a.Charge(100 * size.MiB); r != fence.Charged {
		t.Fatal(r)
	}
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	tb, err := fence.Create(dir, fencetest.FakeUUID, 80*size.GiB, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	if err := tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB}}, 0); err != nil {
		t.Fatal(err)
	}
	if u := snap(t, tb, tokA); u.Used != 100*size.MiB || u.Procs != 1 {
		t.Fatalf("after the enforcer started again: %+v, want the running process's use kept", u)
	}
	if err := tb.SetTasks([]fence.Task{{Token: tokB, Cap: size.GiB}}, 0); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fence.AccountPath(dir, tokA, fencetest.FakeUUID), fence.AccountDir(dir, tokA),
		liveA, fence.LiveDir(dir, tokA)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s after its task ended: %v, want it removed", p, err)
		}
	}
	if r := a.Charge(size.MiB); r != fence.NoTask {
		t.Fatalf("a process of the ended task: %v, want NoTask", r)
	}
	for _, p := range []string{fence.AccountPath(dir, tokB, fencetest.FakeUUID), livePath(t, dir, tokB)} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o666 {
			t.Fatalf("the successor's file %s: %v %v, want 0666 in its own directory", p, st, err)
		}
	}
	if d := fence.AccountDir(dir, tokB); d == fence.AccountDir(dir, tokA) || !strings.HasPrefix(d, dir+"/") {
		t.Fatalf("the successor's directory %s", d)
	}
	b := attach(t, dir, tokB)
	if r := b.Charge(size.GiB); r != fence.Charged {
		t.Fatalf("the successor within its guarantee: %v", r)
	}
}
