package fence_test

import (
	"fmt"
	"strings"
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
