package fence_test

import (
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// Where the driver fails a call for reasons of its own (an invalid value, no context, a context
// destroyed at exit), the process gets the driver's exact error and the task's accounting does
// not move: a failed allocation holds nothing, a failed free still holds its bytes (given back
// by the free that succeeds), and a second free is the driver's to refuse.
func TestDriverErrorsPassThroughUncounted(t *testing.T) {
	k := fencetest.Build(t)
	for _, p := range []string{"alloc 100M", "managed 100M", "async 100M", "pool 100M", "create 100M",
		"pitch 1M 100", "array 1M 25", "array3d 1M 25 1", "mipmap 1M 0 0 0 1"} {
		t.Run(p, func(t *testing.T) {
			dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
			c := k.Start(t, k.Env(dir, tokA))
			want(t, c.Do(p), "ok 0", "an allocation")
			held := snap(t, tb, tokA).Used
			for _, code := range []string{"1", "201", "4"} { // invalid value, invalid context, deinitialized
				want(t, c.Do("fail "+code+" 0"), "ok", "the driver fails allocations")
				want(t, c.Do(p), "err "+code, "an allocation the driver fails")
			}
			if u := snap(t, tb, tokA); u.Used != held || u.Refused != 0 {
				t.Fatalf("after allocations the driver failed: %+v, want %s used and no refusal", u, held)
			}
			want(t, c.Do("fail 0 4"), "ok", "the driver fails frees")
			want(t, c.Do("free 0"), "err 4", "a free the driver fails")
			if u := snap(t, tb, tokA); u.Used != held {
				t.Fatalf("a free the driver failed gave bytes back: %+v", u)
			}
			want(t, c.Do("fail 0 0"), "ok", "the driver recovers")
			want(t, c.Do("free 0"), "ok", "the free again")
			want(t, c.Do("free 0"), "err 1", "a second free of it")
			s, err := tb.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if u, _ := s.Task(tokA); u.Used != 0 || s.Underflows != 0 {
				t.Fatalf("after the free and a second one: %+v, underflows %d", u, s.Underflows)
			}
		})
	}
}
