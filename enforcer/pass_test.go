package enforcer

import (
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// Tick called while Run runs waits for Run's pass and takes its turn: under -race, what the
// passes carry from one to the next is never touched by two at once, and the watchdog still
// stops a violator while both call it.
func TestTickBesideRun(t *testing.T) {
	r := newRig(t, policy.ModeIsolated, nil)
	res := r.reserve(2*size.GiB, "task")
	h := r.helper(t, res.Token, "task")
	h.use(t, r, size.GiB)
	r.start()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range 10 {
				r.enf.Tick(t.Context())
			}
		})
	}
	testutil.Eventually(t, waitLong, "the task's use in a sample", func() bool {
		b, ok := r.enf.TaskUsage(res.Token)
		return ok && b == size.GiB
	})
	h.use(t, r, 4*size.GiB)
	wg.Go(func() { r.enf.Tick(t.Context()) })
	wg.Wait()
	v := r.violation(res.Token)
	if v.Action != ActionSIGKILL {
		t.Fatalf("violation %+v: want the task stopped with SIGKILL", v)
	}
}

// A violator the watchdog cannot signal is recorded as reported, with why, not as stopped.
func TestViolatorThatCannotBeSignalledIsReported(t *testing.T) {
	r := newRig(t, policy.ModeIsolated, func(c *Config) {
		c.Signal = func(int, syscall.Signal) error { return syscall.EPERM }
	})
	res := r.reserve(2*size.GiB, "task")
	h := r.helper(t, res.Token, "task")
	h.use(t, r, 4*size.GiB)
	r.enf.Tick(t.Context())
	h.exit(t)
	r.enf.Tick(t.Context())
	vs := r.led.Violations()
	if len(vs) != 1 || vs[0].Action != ActionReported || !strings.Contains(vs[0].Detail, "cannot signal pid") {
		t.Fatalf("violations %+v: want one, reported, saying the signal failed", vs)
	}
}
