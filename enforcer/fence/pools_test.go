package fence_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// A process that makes and destroys memory pools over and over (a stream-ordered memory
// resource made per request or per test) has each charged what the driver reserves for it. The
// fence kept an entry for every pool it had seen, destroyed or not, and past 64 charged the
// others' allocations as allocated: a 1 MiB allocation from a pool that reserves 64 MiB was
// charged 1 MiB, the gap between the fence and NVML that got an honest borrower SIGKILLed.
func TestPoolsMadeAgainAndAgainAreChargedWhatTheDriverHolds(t *testing.T) {
	k := fencetest.Build(t)
	dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
	c := k.Start(t, k.Env(dir, tokA, fmt.Sprintf("FAKE_CUDA_POOL_GRAIN=%d", 64*size.MiB)))
	id := func(reply, what string) string {
		t.Helper()
		want(t, reply, "ok ", what)
		return strings.TrimPrefix(reply, "ok ")
	}
	for i := range 100 {
		pool := id(c.Do("mkpool"), "a pool")
		alloc := id(c.Do("frompool "+pool+" 1M"), "an allocation from it")
		if u := snap(t, tb, tokA); u.Used != 64*size.MiB {
			t.Fatalf("pool %d: the task is charged %s for an allocation whose pool reserves 64 MiB", i+1, u.Used)
		}
		want(t, c.Do("free "+alloc), "ok", "its free")
		want(t, c.Do("free "+pool), "ok", "the pool's destroy")
		if u := snap(t, tb, tokA); u.Used != 0 {
			t.Fatalf("pool %d destroyed, its allocation freed: the task is charged %s", i+1, u.Used)
		}
	}
}

// A thread's look at what a pool reserves that another thread's allocation from it overtakes:
// the look read the pool before it grew, the other allocation charged the growth and settled,
// and then the look set the pool's charge to what it had read, taking the growth off until the
// pool's next call. The fence charges a pool what the driver holds, never less.
func TestPoolLookOvertakenByAnAllocationKeepsItsGrowth(t *testing.T) {
	k := fencetest.Build(t)
	dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
	c := k.Start(t, k.Env(dir, tokA, fmt.Sprintf("FAKE_CUDA_POOL_GRAIN=%d", 64*size.MiB)))
	want(t, c.Do("pool 1M"), "ok 0", "a first allocation from the default pool: the fence follows it")
	want(t, c.DoWithin("racepool 100M", 10*time.Second), "raced ok", "an allocation inside the fence's look")
	held := deviceHolds(t, c)
	if u := snap(t, tb, tokA); u.Used != held {
		t.Fatalf("the task is charged %s for pools the driver holds %s of", u.Used, held)
	}
}
