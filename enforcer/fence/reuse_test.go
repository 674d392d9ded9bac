package fence_test

import (
	"testing"

	"github.com/gpufrac/gpufrac/size"
)

// An allocation that gets the address (or handle) of a free still returning in another thread
// is charged once and stays charged: the free gives back its own bytes, not the newcomer's. The
// fence forgot an allocation after the driver's free returned, so the newcomer, recorded at the
// same key meanwhile, was forgotten in its place: its bytes went back while it held them, and a
// task that freed and allocated from two threads at once held past its cap unrefused.
func TestFreeRacingAnAllocationAtItsAddress(t *testing.T) {
	for _, kind := range []struct{ name, alloc string }{{"alloc", "alloc"}, {"create", "create"}} {
		t.Run(kind.name, func(t *testing.T) {
			_, _, tb, c := taskA(t, size.GiB, "FAKE_CUDA_REUSE=1")
			want(t, c.Do(kind.alloc+" 400M"), "ok 0", "first allocation")
			want(t, c.Do("freealloc 0 400M"), "ok 1", "a free while another allocation takes its address")
			if u := snap(t, tb, tokA); u.Used != 400*size.MiB {
				t.Fatalf("the task holds 400M at one address, the fence charges %v: %+v", u.Used, u)
			}
			want(t, c.Do(kind.alloc+" 700M"), "err 2", "allocation past the cap beside the newcomer")
			want(t, c.Do("free 1"), "ok", "the newcomer's free")
			s, err := tb.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if u, _ := s.Task(tokA); u.Used != 0 || s.Underflows != 0 {
				t.Fatalf("after every free: %+v, %d underflows", u, s.Underflows)
			}
		})
	}
}
