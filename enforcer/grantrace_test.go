package enforcer

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// A pass judges a task by its cap as the ledger holds it when the GPU is sampled, not when the
// pass read the GPU's state: a staged task granted in between allocates what it was granted
// before the sample. It was once stopped for that memory, judged by its staged cap; under MPS
// the stop is a GPU-wide event (leakers.sh's runaway on an H100, 2026-12-07: "4.85GiB used, cap
// 1GiB", at the instant of its grant).
func TestGrantBetweenStateAndSampleIsNoViolation(t *testing.T) {
	r := newRig(t, policy.ModeIsolated, nil)
	staged, err := r.led.ReserveBytes(r.uuid, size.GiB, ledger.Task{}, ledger.WithStage(8*size.GiB))
	if err != nil {
		t.Fatal(err)
	}
	stale, err := r.led.State(r.uuid) // the pass reads the GPU's state...
	if err != nil {
		t.Fatal(err)
	}
	granted, err := r.led.Grant(staged.Token) // ...the grant comes...
	if err != nil {
		t.Fatal(err)
	}
	j := r.run(granted, "granted", "--peak", "5GiB", "--ramp", "10ms", "--hold", "1m")
	r.waitHolding(t, j, 5*size.GiB) // ...and the task uses it
	r.enf.watch(context.Background(), stale)
	if tr := r.enf.mem.tracks[staged.Token]; tr != nil {
		t.Fatalf("a task within its granted %s judged past its staged %s: %+v", granted.CapBytes, staged.CapBytes, tr)
	}
	if sig := r.sent(j.cmd.Process.Pid); len(sig) != 0 {
		t.Fatalf("the granted task was signalled: %v", sig)
	}
	// A task past the cap it holds now is still stopped: the pass judged the raise, not a pardon.
	over, err := r.led.ReserveBytes(r.uuid, size.GiB, ledger.Task{})
	if err != nil {
		t.Fatal(err)
	}
	stale, _ = r.led.State(r.uuid)
	o := r.run(over, "over", "--peak", "3GiB", "--ramp", "10ms", "--hold", "1m", "--seed", "2")
	r.waitHolding(t, o, 3*size.GiB)
	r.enf.watch(context.Background(), stale)
	if r.enf.mem.tracks[over.Token] == nil {
		t.Fatalf("a task at 3 GiB under a 1 GiB cap was not judged past it")
	}
}

// A task reserved after a pass read the GPU's state may be on the GPU when the pass samples it:
// its processes are the task's, not strays. Outside the state the pass had read they were
// nobody's, and policy unmanaged = stop killed them.
func TestReservedBetweenStateAndSampleIsNoStray(t *testing.T) {
	r := newRig(t, policy.ModeIsolated, nil)
	p := testPolicy(policy.ModeIsolated)
	p.Unmanaged = policy.UnmanagedStop
	if err := r.led.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	stale, err := r.led.State(r.uuid)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.led.ReserveBytes(r.uuid, 4*size.GiB, ledger.Task{})
	if err != nil {
		t.Fatal(err)
	}
	j := r.run(res, "new", "--peak", "2GiB", "--ramp", "10ms", "--hold", "1m")
	r.waitHolding(t, j, 2*size.GiB)
	r.enf.watch(context.Background(), stale)
	if sig := r.sent(j.cmd.Process.Pid); len(sig) != 0 {
		t.Fatalf("a task reserved just before the sample was stopped as a stray: %v", sig)
	}
	if st, _ := r.led.State(r.uuid); st.UnmanagedBytes != 0 {
		t.Fatalf("its memory recorded as unmanaged: %s", st.UnmanagedBytes)
	}
}

// waitHolding waits until the simulated GPU lists j's process holding at least n.
func (r *rig) waitHolding(t *testing.T, j *job, n size.Bytes) {
	t.Helper()
	testutil.Eventually(t, waitLong, fmt.Sprintf("pid %d holding %s", j.cmd.Process.Pid, n), func() bool {
		ps, err := r.sim.Processes(context.Background(), r.uuid)
		return err == nil && slices.ContainsFunc(ps, func(p gpu.Process) bool { return p.PID == j.cmd.Process.Pid && p.UsedBytes >= n })
	})
}
