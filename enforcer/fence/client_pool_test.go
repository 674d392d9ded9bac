package fence_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// deviceHolds is what the fake device holds for the client's process: what NVML would report
// to the watchdog (less the context, which the fake does not model).
func deviceHolds(t *testing.T, c *fencetest.Proc) size.Bytes {
	t.Helper()
	r := c.Do("used")
	n, err := strconv.ParseUint(strings.TrimPrefix(r, "used "), 10, 64)
	if err != nil || !strings.HasPrefix(r, "used ") {
		t.Fatalf("used: got %q", r)
	}
	return size.Bytes(n)
}

// An honest stream-ordered borrower: its pool reserves in 32 MiB units and keeps what it frees
// (PyTorch's cudaMallocAsync backend sets the release threshold that high), so the driver holds
// more than its live allocations. The fence must charge what the driver holds, or the watchdog
// (NVML against cap + borrowed + allowance) kills a job the fence let borrow: after every step
// the task's charge is what the device holds.
func TestPoolChargeIsWhatTheDriverHolds(t *testing.T) {
	k := fencetest.Build(t)
	grain := fmt.Sprintf("FAKE_CUDA_POOL_GRAIN=%d", 32*size.MiB)
	steps := []struct {
		cmd, reply string
	}{
		{"poolkeep 64G", "ok"},  // keep freed memory in the pool
		{"async 700M", "ok 0"},  // 704 MiB reserved
		{"async 300M", "ok 1"},  // 320 MiB more: 1024 MiB, the guarantee
		{"async 100M", "ok 2"},  // borrowing: 128 MiB reserved past it
		{"pool 10M", "ok 3"},    // another 32 MiB unit for 10 MiB
		{"free 0", "ok"},        // 704 MiB stay reserved in the pool
		{"async 500M", "ok 4"},  // served from what the pool keeps: nothing new
		{"free 4", "ok"},        //
		{"trim 0", "ok"},        // the pool gives back what no allocation uses
		{"async 1100M", "ok 5"}, // grows again
		{"free 5", "ok"},
		{"poolkeep 0", "ok"},
		{"free 1", "ok"}, // released at once now
	}
	for _, mode := range []struct {
		name string
		args []string
	}{{"runtime", nil}, {"direct", []string{"direct"}}} {
		t.Run(mode.name, func(t *testing.T) {
			dir, tb := table(t, 4*size.GiB, fence.Task{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB})
			c := k.Start(t, k.Env(dir, tokA, grain), mode.args...)
			for _, s := range steps {
				want(t, c.Do(s.cmd), s.reply, s.cmd)
				held, u := deviceHolds(t, c), snap(t, tb, tokA)
				if u.Used != held {
					t.Fatalf("after %q the device holds %s for the task and the fence charges it %s (borrowed %s): "+
						"the watchdog and the fence disagree", s.cmd, held, u.Used, u.Borrowed())
				}
			}
			c.Exit()
			if u := afterExit(t, tb, tokA); u.Used != 0 {
				t.Fatalf("an exited process kept a pool's charge: %+v", u)
			}
		})
	}
}

// A pool that grows past what the task may hold (its units round a small allocation up) gives
// that allocation back: the process gets out of memory inside itself, and the charge is still
// what the device holds.
func TestPoolGrowthPastTheCapFailsInsideTheProcess(t *testing.T) {
	_, _, tb, c := taskA(t, 1000*size.MiB, fmt.Sprintf("FAKE_CUDA_POOL_GRAIN=%d", 32*size.MiB))
	for _, s := range []struct{ cmd, reply string }{
		{"async 990M", "ok 0"}, // 992 MiB reserved
		{"async 5M", "err 2"},  // fits the cap, but the pool would grow to 1024 MiB
		{"free 0", "ok"},       // the pool gives it all back (release threshold 0)
		{"async 5M", "ok 1"},   // now it fits
	} {
		want(t, c.Do(s.cmd), s.reply, s.cmd)
		if held, u := deviceHolds(t, c), snap(t, tb, tokA); u.Used != held || held > 1000*size.MiB {
			t.Fatalf("after %q the device holds %s and the fence charges %s (cap 1000MiB)", s.cmd, held, u.Used)
		}
	}
}

// An honest stream-ordered job that does not borrow: its pool keeps what it frees (PyTorch's
// cudaMallocAsync backend), and its next step allocates as much again, served from what the
// pool keeps. The fence charges the pool what the driver holds, so that allocation takes no new
// memory and must not be charged again on top: charged twice, the job was refused its second
// step within its cap. What the pool must grow by is still charged, and refused past the cap.
func TestPoolReuseWithinTheCap(t *testing.T) {
	for _, mode := range []struct {
		name string
		args []string
	}{{"runtime", nil}, {"direct", []string{"direct"}}} {
		t.Run(mode.name, func(t *testing.T) {
			k := fencetest.Build(t)
			dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
			c := k.Start(t, k.Env(dir, tokA, fmt.Sprintf("FAKE_CUDA_POOL_GRAIN=%d", 32*size.MiB)), mode.args...)
			for _, s := range []struct{ cmd, reply string }{
				{"poolkeep 64G", "ok"},
				{"async 900M", "ok 0"}, // 928 MiB reserved of a 1 GiB guarantee
				{"free 0", "ok"},       // the pool keeps it
				{"async 900M", "ok 1"}, // the next step, from what the pool keeps
				{"free 1", "ok"},
				{"async 950M", "ok 2"},  // 22 MiB past what it keeps: the pool grows to 960 MiB
				{"async 100M", "err 2"}, // past the cap
				{"async 40M", "ok 3"},   // within it: 1024 MiB reserved
			} {
				want(t, c.Do(s.cmd), s.reply, s.cmd)
				if held, u := deviceHolds(t, c), snap(t, tb, tokA); u.Used != held || held > size.GiB {
					t.Fatalf("after %q the device holds %s and the fence charges %s (cap 1GiB)", s.cmd, held, u.Used)
				}
			}
		})
	}
}
