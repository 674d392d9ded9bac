package enforcer

import (
	"context"
	"os"
	"syscall"
	"testing"

	"github.com/gpufrac/gpufrac/attribution"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/procfs"
	"github.com/gpufrac/gpufrac/size"
)

// A task's process that only its Nomad cgroup ties to it (a daemon whose environment was
// scrubbed and whose parent exited) is tied through the cgroup of a process that carries the
// task's token, which only the token scan reads: an enforcer that starts again must scan before
// it judges, or its first pass finds the daemon no task's, and policy unmanaged = stop kills it.
func TestFirstPassKnowsTheTasksCgroups(t *testing.T) {
	const alloc = "0b5c2a1e-7d3f-4c2b-9a8e-1f2e3d4c5b6a"
	cg := "0::/nomad.slice/share.slice/" + alloc + ".train.scope\n"
	daemon := os.Getpid() // the simulated GPU lists only live processes
	procs := procfs.NewTable()
	signals := map[int][]syscall.Signal{}
	r := newRig(t, policy.ModeIsolated, func(c *Config) {
		c.Procs = procs
		c.Signal = func(pid int, _ uint64, sig syscall.Signal) error {
			signals[pid] = append(signals[pid], sig)
			return nil
		}
	})
	p := testPolicy(policy.ModeIsolated)
	p.Unmanaged = policy.UnmanagedStop
	if err := r.led.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	res := r.reserve(4*size.GiB, "train")
	// what an earlier enforcer's scans left in the ledger
	if err := r.led.Seen(res.Token, ledger.Task{AllocID: alloc, TaskName: "train"}); err != nil {
		t.Fatal(err)
	}
	procs.Set(procfs.Proc{PID: 4000001, PPID: 1, Start: 5, Cgroup: cg,
		Env: []string{EnvReservation + "=" + res.Token, attribution.EnvNomadAlloc + "=" + alloc, envNomadTask + "=train"}})
	procs.Set(procfs.Proc{PID: daemon, PPID: 1, Start: 7, Cgroup: cg, Env: []string{"X=1"}})
	if err := r.sim.SetUsage(r.uuid, daemon, size.GiB); err != nil {
		t.Fatal(err)
	}
	r.enf.Tick(context.Background())
	if got, ok := r.enf.TaskUsage(res.Token); !ok || got != size.GiB {
		t.Errorf("the task's use after the first pass: %s, %v; want the daemon's 1GiB", got, ok)
	}
	if len(signals) != 0 {
		t.Errorf("signals %v: the task's daemon was stopped as unmanaged", signals)
	}
}
