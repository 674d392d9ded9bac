package enforcer

import (
	"syscall"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// A borrower that writes a huge use of its own into the fence table (every task maps it
// writable) does not buy itself room with the watchdog: what it may have borrowed is bounded
// by its reservation's limit, which the ledger holds, so NVML past cap + (limit - cap) +
// allowance still stops it.
func TestBorrowerThatLiesInTheFenceTableIsStillStopped(t *testing.T) {
	k := fencetest.Build(t)
	dir := t.TempDir()
	r := newRig(t, policy.ModeIsolated, func(c *Config) {
		c.Fence, c.Allowance = FenceConfig{Dir: dir}, 640*size.MiB
	})
	r.start()
	liar, err := r.led.ReserveBytes(r.uuid, 2*size.GiB, ledger.Task{}, ledger.WithLimit(4*size.GiB))
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.led.State(r.uuid)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.enf.SyncFence(st); err != nil {
		t.Fatal(err)
	}
	tenant := k.StartTool(t)
	if got := tenant.Do("tamper " + fence.AccountPath(dir, liar.Token, r.uuid) + " used 60G " + liar.Token); got != "ok" {
		t.Fatalf("tamper: %q", got)
	}
	// Its process allocates around the fence (no fence directory), as a liar would.
	j := r.runEnv(liar, "liar", []string{fence.EnvDir + "="}, "--peak", "10GiB", "--ramp", "200ms", "--hold", "2m")
	if code := j.wait(t); code == 0 || j.killedBy() != syscall.SIGKILL {
		t.Fatalf("the liar: exit %d, signal %v; want stopped by SIGKILL; output:\n%s", code, j.killedBy(), j.out.String())
	}
	if v := r.violation(liar.Token); v.Action != ActionSIGKILL {
		t.Fatalf("the liar's violation: %+v", v)
	}
}
