package enforcer

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// A process SIGKILLed while its allocation waited for borrowable memory does not freeze its GPU:
// what admission reads (FenceUse) shows no wait, though no watchdog pass has reaped its slot.
// On an H200 a queue's last jobs were never admitted again after such a kill.
func TestKilledWaiterDoesNotFreezeTheGPU(t *testing.T) {
	k := fencetest.Build(t)
	dir := t.TempDir()
	r := newRig(t, policy.ModeIsolated, func(c *Config) { c.Fence = FenceConfig{Dir: dir, BorrowWait: time.Minute} })
	borrower, owner, st := borrowerBesideOwner(r)
	o, err := fence.Attach(dir, r.uuid, owner.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Detach()
	if got := o.Charge(size.GiB); got != fence.Charged {
		t.Fatalf("the owner's first GiB: %v", got)
	}
	victim := k.StartTool(t)
	for _, c := range []string{"attach " + fence.Path(dir, r.uuid) + " " + borrower.Token, fmt.Sprintf("charge %d", st.BudgetBytes-owner.CapBytes)} {
		if got := victim.Do(c); !strings.HasPrefix(got, "ok") {
			t.Fatalf("%s: %q", c, got)
		}
	}
	victim.Send("charge 1G") // only the owner's guarantee is left: it waits
	testutil.Eventually(t, waitLong, "the borrower's allocation waiting", func() bool {
		_, waiting := r.enf.FenceUse(r.uuid)
		return waiting
	})
	victim.Kill()
	if _, waiting := r.enf.FenceUse(r.uuid); waiting {
		s, _ := r.enf.fence.view(r.uuid)
		t.Fatalf("a dead process's wait freezes the GPU: %+v", s.Procs)
	}
	if u, ok := snapTask(r, borrower.Token); !ok || u.Used != 0 || u.Procs != 0 {
		t.Fatalf("the dead borrower's task: %+v (%v), want its slot given back", u, ok)
	}
}
