package fence_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// A process started without the reservation in its environment (a child, a child's child, a
// child in a new session, one without the fence directory either) is charged to the task its
// ancestry belongs to: 300M fits beside the
// parent's 600M of the 1G cap, 600M does not. Unfenced, both would pass; held to the unplaced
// allowance, both would fail.
func TestChildrenWithoutTheTokenAreChargedToTheTask(t *testing.T) {
	k := fencetest.Build(t)
	for _, mode := range []string{"child", "grandchild", "setsid", "nodir"} {
		t.Run(mode, func(t *testing.T) {
			dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
			c := k.Start(t, k.Env(dir, tokA))
			want(t, c.Do("alloc 600M"), "ok", "parent")
			want(t, c.Do("spawn "+mode+" 300M"), "child ok", "a tokenless "+mode+" within the task's cap")
			want(t, c.Do("spawn "+mode+" 600M"), "child err 2", "a tokenless "+mode+" past the task's cap")
			if u := snap(t, tb, tokA); u.Used != 600*size.MiB || u.Peak != 900*size.MiB || u.Refused != 1 {
				t.Fatalf("the %s's allocations must be the task's: %+v", mode, u)
			}
		})
	}
}

// A process that no environment up its ancestry places in a task (no reservation, or one the
// table does not know) is held to a small allowance of its own, said once, and charges no task.
func TestUnplacedProcessIsHeldToTheAllowance(t *testing.T) {
	k := fencetest.Build(t)
	dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
	cases := []struct{ name, token, say string }{
		{"no reservation", "", "no reservation for " + fencetest.FakeUUID},
		{"unknown reservation", tokB, "no reservation the fence knows for " + fencetest.FakeUUID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := k.Start(t, k.Env(dir, tc.token))
			want(t, c.Do("alloc 2G"), "err 2", "past the allowance")
			want(t, c.Do("alloc 32M"), "ok", "within the allowance")
			want(t, c.Do("alloc 40M"), "err 2", "past the allowance with 32M held")
			want(t, c.Do("info"), fmt.Sprintf("info %d %d", 32*size.MiB, 64*size.MiB), "the GPU it sees is its allowance")
			c.Exit()
			got := c.Stderr()
			if !strings.Contains(got, tc.say) || strings.Count(got, "refused past 64 MiB") != 1 {
				t.Fatalf("want one line saying %q and the allowance, got %q", tc.say, got)
			}
		})
	}
	if u := snap(t, tb, tokA); u.Used != 0 || u.Peak != 0 {
		t.Fatalf("unplaced processes charged a task: %+v", u)
	}
}
