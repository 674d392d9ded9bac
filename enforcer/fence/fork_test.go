package fence_test

import (
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// A forked child (a DataLoader worker, multiprocessing's fork) never speaks for its parent: a
// free of an allocation it inherited gives nothing of the parent's back (the driver refuses it
// there; the fake frees its copy), and what it allocates is charged to a slot of its own.
func TestForkedChildNeverSpeaksForItsParent(t *testing.T) {
	_, _, tb, c := taskA(t, size.GiB)
	want(t, c.Do("alloc 600M"), "ok 0", "parent")
	want(t, c.Do("fork 300M 0"), "child ok", "a child that frees its parent's allocation, then allocates")
	if u := snap(t, tb, tokA); u.Used != 900*size.MiB || u.Procs != 2 {
		t.Fatalf("the child's free gave back the parent's bytes, or its allocation went to the parent's slot: %+v", u)
	}
	tb.Reap()
	if u := snap(t, tb, tokA); u.Used != 600*size.MiB || u.Procs != 1 {
		t.Fatalf("once the child is reaped the parent's allocation alone is charged: %+v", u)
	}
	want(t, c.Do("free 0"), "ok", "the parent's free")
	if u := snap(t, tb, tokA); u.Used != 0 {
		t.Fatalf("after the parent's free: %+v", u)
	}
}

// A child forked while another thread of its parent waits inside the fence for memory (holding
// nothing of the process's: the wait sleeps without the record table's lock or the file's)
// allocates at once in a slot of its own, and the parent's wait goes on to its end.
func TestForkWhileAThreadWaitsInsideTheFence(t *testing.T) {
	tb, a := blockedBorrower(t)
	want(t, a.Do("bg 1500M"), "started", "a thread's allocation that waits to borrow")
	until(t, 10*time.Second, "the allocation waits", func() bool { return snap(t, tb, tokA).Waiting })
	want(t, a.DoWithin("fork 100M", time.Second), "child ok", "a child forked meanwhile")
	if !snap(t, tb, tokA).Waiting {
		t.Fatal("the parent's wait ended with the child")
	}
	want(t, a.DoWithin("cancel", 10*time.Second), "finished err 2", "the parent's waiting allocation, at its bound")
}
