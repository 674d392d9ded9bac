package fence_test

import (
	"testing"

	"github.com/gpufrac/gpufrac/size"
)

// A program that points its own low descriptors elsewhere (a shell's exec 5>file, a daemon's
// dup2 onto the numbers it means to use) keeps its place in the fence: the descriptors that
// hold its liveness lock are not among the numbers a program picks, so a reap still finds it
// alive and its bytes charged.
func TestAProgramsOwnDup2LeavesItsSlotAlive(t *testing.T) {
	_, _, tb, c := taskA(t, size.GiB)
	want(t, c.Do("alloc 600M"), "ok 0", "an allocation that attaches the process")
	want(t, c.Do("clobber 64"), "clobbered", "dup2 onto every open descriptor below 64")
	tb.Reap()
	if u := snap(t, tb, tokA); u.Used != 600*size.MiB || u.Procs != 1 {
		t.Fatalf("the process's own dup2 ended its place in the fence: %+v", u)
	}
	want(t, c.Do("alloc 300M"), "ok 1", "a later allocation")
	if u := snap(t, tb, tokA); u.Used != 900*size.MiB || u.Procs != 1 {
		t.Fatalf("after a later allocation: %+v", u)
	}
	want(t, c.Do("alloc 200M"), "err 2", "an allocation past the cap, still fenced")
}
