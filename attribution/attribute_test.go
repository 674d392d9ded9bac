package attribution

import (
	"io/fs"
	"sync"
	"testing"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/procfs"
	"github.com/gpufrac/gpufrac/size"
	"github.com/gpufrac/gpufrac/taskenv"
)

const (
	gpuA, gpuB = "GPU-a", "GPU-b"
	alloc      = "0b5c2a1e-7d3f-4c2b-9a8e-1f2e3d4c5b6a"
)

func tok(t string) string { return taskenv.Reservation + "=" + t }

func perGPU(uuid, t string) string { return taskenv.ReservationKey(uuid) + "=" + t }

func TestAttribute(t *testing.T) {
	tasks := NewTasks(
		Task{Token: "tokA", GPU: gpuA, AllocID: alloc, TaskName: "train"},
		Task{Token: "tokA2", GPU: gpuA, AllocID: alloc, TaskName: "eval"},
		Task{Token: "tokB", GPU: gpuB},
		// a job of gpufrac run: its root leads its own process group
		Task{Token: "tokR", GPU: gpuA, Root: 40},
		// a job probed without a reservation: known by its root alone
		Task{GPU: gpuB, Root: 50},
	)
	procs := procfs.NewTable(
		procfs.Proc{PID: 10, PPID: 1, Env: []string{"PATH=/bin", tok("tokA")}},
		// a worker whose environment was scrubbed, in the task's Nomad cgroup (exec driver, v2)
		procfs.Proc{PID: 11, PPID: 1, Env: []string{"PATH=/bin"}, Cgroup: "0::/nomad.slice/share.slice/" + alloc + ".eval.scope\n"},
		// the eval task's process that carries its token, in the same cgroup
		procfs.Proc{PID: 20, PPID: 1, Env: []string{tok("tokA2")}, Cgroup: "0::/nomad.slice/share.slice/" + alloc + ".eval.scope\n"},
		// environ unreadable (another user, no root) but its parent carries the token
		procfs.Proc{PID: 12, PPID: 10, EnvErr: fs.ErrPermission},
		// a grandchild of the token holder: the token is in an ancestor only
		procfs.Proc{PID: 13, PPID: 12, Env: []string{"X=1"}},
		// a token of a reservation on another GPU
		procfs.Proc{PID: 14, PPID: 1, Env: []string{tok("tokB")}},
		// a token no task has
		procfs.Proc{PID: 15, PPID: 1, Env: []string{tok("gone-token-123")}},
		// nothing at all, and no ancestry
		procfs.Proc{PID: 16, PPID: 1, EnvErr: fs.ErrPermission},
		// alloc ID with two tasks on the GPU and no task name in the path: ambiguous
		procfs.Proc{PID: 17, PPID: 1, Cgroup: "0::/docker/" + alloc + "\n"},
		// a task of two device requests (tokA on GPU a, then tokB on GPU b): Nomad's merge left
		// the last GPUFRAC_RESERVATION; the per-GPU keys carry both
		procfs.Proc{PID: 18, PPID: 1, Env: []string{tok("tokB"), perGPU(gpuA, "tokA"), perGPU(gpuB, "tokB")}},
		// its child, environment scrubbed
		procfs.Proc{PID: 19, PPID: 18, Env: []string{"X=1"}},
		// gpufrac run's job: the root, a child in its group without the token, a child that
		// called setsid (a group and session of its own) with a scrubbed environment, and a
		// daemon that left the tree (reparented to init) but stayed in the group
		procfs.Proc{PID: 40, PPID: 7, Env: []string{tok("tokR")}},
		procfs.Proc{PID: 41, PPID: 40, PGRP: 40, Env: []string{"X=1"}},
		procfs.Proc{PID: 42, PPID: 41, PGRP: 42, Session: 42, Env: []string{"X=1"}},
		procfs.Proc{PID: 43, PPID: 1, PGRP: 40, Env: []string{"X=1"}},
		// the process that started the job (gpufrac run itself) is not the job's
		procfs.Proc{PID: 7, PPID: 1, Env: []string{"X=1"}},
		// a probed job without a token: its root and a setsid grandchild
		procfs.Proc{PID: 50, PPID: 7},
		procfs.Proc{PID: 51, PPID: 50, PGRP: 51, Session: 51},
	)
	cases := []struct {
		name string
		pid  int
		gpu  string
		want Owner
	}{
		{"token in its environment", 10, gpuA, Owner{"tokA", ViaEnviron, ""}},
		{"alloc ID and task name in its cgroup", 11, gpuA, Owner{"tokA2", ViaCgroup, ""}},
		{"unreadable environ, token in its parent", 12, gpuA, Owner{"tokA", ViaParent, ""}},
		{"token in an ancestor only", 13, gpuA, Owner{"tokA", ViaParent, ""}},
		{"token of another GPU's task", 14, gpuA, Owner{"", "", "token of a reservation on GPU GPU-b"}},
		{"token on its own GPU", 14, gpuB, Owner{"tokB", ViaEnviron, ""}},
		{"unknown token", 15, gpuA, Owner{"", "", "token gone-tok… matches no reservation"}},
		{"no token, no ancestry: unmanaged", 16, gpuA, Owner{"", "", "environ unreadable: permission denied"}},
		{"ambiguous cgroup", 17, gpuA, Owner{}},
		{"no such process", 99, gpuA, Owner{"", "", "process vanished"}},
		{"per-GPU key, GPU a", 18, gpuA, Owner{"tokA", ViaEnviron, ""}},
		{"last GPUFRAC_RESERVATION, GPU b", 18, gpuB, Owner{"tokB", ViaEnviron, ""}},
		{"child of a two-GPU task on a", 19, gpuA, Owner{"tokA", ViaParent, ""}},
		{"child of a two-GPU task on b", 19, gpuB, Owner{"tokB", ViaParent, ""}},
		{"a job's root", 40, gpuA, Owner{"tokR", ViaRoot, ""}},
		{"a job's root on another GPU", 40, gpuB, Owner{"", "", "token of a reservation on GPU GPU-a"}},
		{"in the root's group", 41, gpuA, Owner{"tokR", ViaGroup, ""}},
		{"setsid child", 42, gpuA, Owner{"tokR", ViaParent, ""}},
		{"left the tree, stayed in the group", 43, gpuA, Owner{"tokR", ViaGroup, ""}},
		{"the job's parent", 7, gpuA, Owner{}},
		{"root without a token", 50, gpuB, Owner{"", ViaRoot, ""}},
		{"setsid grandchild of a root without a token", 51, gpuB, Owner{"", ViaParent, ""}},
		{"root without a token, other GPU", 51, gpuA, Owner{}},
	}
	a := New(procs)
	scan(t, procs, a)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := a.Attribute(tc.pid, tc.gpu, tasks); got != tc.want {
				t.Fatalf("pid %d on %s: got %+v, want %+v", tc.pid, tc.gpu, got, tc.want)
			}
		})
	}
}

func TestReservedTasks(t *testing.T) {
	ts := Reserved([]ledger.Reservation{
		{Token: "t1", GPU: gpuA, Task: ledger.Task{AllocID: alloc, TaskName: "train"}},
		{Token: "t2", GPU: gpuB},
	})
	procs := procfs.NewTable(procfs.Proc{PID: 5, PPID: 1, Cgroup: "0::/nomad/" + alloc + ".train.scope\n"},
		procfs.Proc{PID: 6, PPID: 1, Env: []string{tok("t2")}},
		procfs.Proc{PID: 7, PPID: 1, Env: []string{tok("t1")}, Cgroup: "0::/nomad/" + alloc + ".train.scope\n"})
	a := New(procs)
	scan(t, procs, a)
	if got := a.Attribute(5, gpuA, ts); got != (Owner{"t1", ViaCgroup, ""}) {
		t.Errorf("cgroup rule from the ledger's task names: %+v", got)
	}
	if got := a.Attribute(6, gpuA, ts); got.Managed() {
		t.Errorf("a reservation's GPU from the ledger: %+v", got)
	}
}

// A PID the kernel gave to a new process is read again: the new process does not inherit the
// dead one's task. Within one pass the first reading stands.
func TestRecycledPID(t *testing.T) {
	procs := procfs.NewTable(procfs.Proc{PID: 20, PPID: 1, Start: 100, Env: []string{tok("old")}})
	tasks := NewTasks(Task{Token: "old", GPU: gpuA})
	a := New(procs)
	if got := a.Attribute(20, gpuA, tasks); got.Token != "old" {
		t.Fatalf("before the reuse: %+v", got)
	}
	procs.Set(procfs.Proc{PID: 20, PPID: 1, Start: 200, Env: []string{"A=b"}})
	if id, _ := a.Identity(20); id.Token != "old" {
		t.Fatalf("within one pass the first read stands, got %q", id.Token)
	}
	a.NewPass()
	if got := a.Attribute(20, gpuA, tasks); got.Managed() {
		t.Fatalf("a recycled PID kept the dead process's task: %+v", got)
	}
}

// readBeforeExec reads process 30 between its fork and its exec (its parent's environment, no
// token), then lets it exec with token "tok", within the same pass.
func readBeforeExec(t *testing.T) (*procfs.Table, *Attributor) {
	t.Helper()
	procs := procfs.NewTable(procfs.Proc{PID: 30, PPID: 1, Start: 100, Env: []string{"PARENT=1"}, Argv: []string{"runner"}})
	a := New(procs)
	if id, _ := a.Identity(30); id.Token != "" {
		t.Fatalf("token %q before the exec", id.Token)
	}
	procs.Set(procfs.Proc{PID: 30, PPID: 1, Start: 100, Env: []string{tok("tok")}, Argv: []string{"python3", "train.py"}})
	return procs, a
}

// A process first read between its fork and its exec has its parent's environment; once it has
// exec'd it is read again, and its token is found.
func TestRereadsAfterExec(t *testing.T) {
	procs, a := readBeforeExec(t)
	a.NewPass()
	if id, _ := a.Identity(30); id.Token != "tok" {
		t.Fatalf("after the exec the token is %q, want tok", id.Token)
	}
	// A process with a token is not read again, even if it rewrites its command line.
	procs.Set(procfs.Proc{PID: 30, PPID: 1, Start: 100, Argv: []string{"renamed"}})
	a.NewPass()
	if id, _ := a.Identity(30); id.Token != "tok" {
		t.Fatalf("a cached token was lost: %q", id.Token)
	}
}

// Within a pass a process is read once; Fresh reads it again, so a caller outside the passes
// (the plugin's Holders, before it ends a reservation) sees the token a task carries once it has
// exec'd, not the parent's environment this pass read before the exec.
func TestFreshReadsPastThePass(t *testing.T) {
	_, a := readBeforeExec(t)
	if id, _ := a.Identity(30); id.Token != "" {
		t.Fatalf("the same pass read %q: want its one read, from before the exec", id.Token)
	}
	if id, _ := a.Fresh(30); id.Token != "tok" {
		t.Fatalf("Fresh: token %q, want tok", id.Token)
	}
}

// execAfterEnviron is a process table in which process 30 execs the moment its environment has
// been read once: the read sees the parent's environment and, next, the new command line.
type execAfterEnviron struct {
	*procfs.Table
	once sync.Once
}

func (e *execAfterEnviron) Environ(pid int) ([]string, error) {
	env, err := e.Table.Environ(pid)
	e.once.Do(func() {
		e.Set(procfs.Proc{PID: 30, PPID: 1, Start: 100, Env: []string{tok("tok")}, Argv: []string{"python3", "train.py"}})
	})
	return env, err
}

// An exec that lands between the reads of a process's environment and of its command line must
// not pair the parent's environment with the new program: cached that way, the task's process
// stayed unmanaged for good (TestRestartMidViolation, once, on a loaded machine: its helper was
// "GPU process without a reservation" for 10 s).
func TestExecBetweenTheReads(t *testing.T) {
	procs := &execAfterEnviron{Table: procfs.NewTable(procfs.Proc{PID: 30, PPID: 1, Start: 100, Env: []string{"PARENT=1"}, Argv: []string{"runner"}})}
	a := New(procs)
	id, _ := a.Identity(30)
	a.NewPass()
	if again, _ := a.Identity(30); again.Token != "tok" {
		t.Fatalf("first read %+v, the next pass's %+v: want the exec'd program's token", id, again)
	}
}

// An ancestry read once is kept: a process whose parent exited (and was reparented to init)
// still belongs to the parent's task.
func TestAncestryOutlivesTheParent(t *testing.T) {
	procs := procfs.NewTable(
		procfs.Proc{PID: 60, PPID: 1, Env: []string{tok("t")}},
		procfs.Proc{PID: 61, PPID: 60, PGRP: 61, Env: []string{"X=1"}},
	)
	tasks := NewTasks(Task{Token: "t", GPU: gpuA})
	a := New(procs)
	if got := a.Attribute(61, gpuA, tasks); got.Via != ViaParent {
		t.Fatalf("while the parent lives: %+v", got)
	}
	procs.Remove(60)
	procs.Set(procfs.Proc{PID: 61, PPID: 1, PGRP: 61, Env: []string{"X=1"}})
	a.NewPass()
	if got := a.Attribute(61, gpuA, tasks); got != (Owner{"t", ViaParent, ""}) {
		t.Fatalf("after the parent died: %+v", got)
	}
}

// A process keeps the parent it was first read with, but that PID may since have gone to a later
// process, another task's: a parent that started after its child is not its parent, and the
// child is not tied to that task (which would be judged, and stopped, for the child's memory).
func TestRecycledParentPIDIsNotAnAncestor(t *testing.T) {
	procs := procfs.NewTable(
		procfs.Proc{PID: 60, PPID: 1, Start: 100, Env: []string{"X=1"}},
		procfs.Proc{PID: 61, PPID: 60, PGRP: 61, Start: 200, Env: []string{"X=1"}},
	)
	tasks := NewTasks(Task{Token: "tokV", GPU: gpuA})
	a := New(procs)
	if _, err := a.Identity(61); err != nil { // read by a token scan while its parent lived
		t.Fatal(err)
	}
	procs.Remove(60)
	procs.Set(procfs.Proc{PID: 61, PPID: 1, PGRP: 61, Start: 200, Env: []string{"X=1"}})
	procs.Set(procfs.Proc{PID: 60, PPID: 1, Start: 900, Env: []string{tok("tokV")}})
	a.NewPass()
	if got := a.Attribute(61, gpuA, tasks); got.Managed() {
		t.Fatalf("tied through a recycled parent PID: %+v", got)
	}
}

func TestIdentityFromEnviron(t *testing.T) {
	procs := procfs.NewTable(procfs.Proc{PID: 30, PPID: 1, Env: []string{
		tok("t"), EnvNomadAlloc + "=a1", EnvNomadJob + "=job", EnvNomadTask + "=task", EnvNomadNS + "=ml", taskenv.Template + "=tmpl",
		taskenv.MPSPipeDir + "=/run/p", taskenv.MPSMemLimit + "=0=8G"}})
	id, err := New(procs).Identity(30)
	if err != nil {
		t.Fatal(err)
	}
	want := ledger.Task{AllocID: "a1", JobName: "job", TaskName: "task", Template: "tmpl", Namespace: "ml"}
	if id.Task != want || id.PipeDir != "/run/p" || id.MPSLimit != "0=8G" || id.Token != "t" {
		t.Fatalf("identity %+v", id)
	}
}

func TestSplit(t *testing.T) {
	procs := procfs.NewTable(
		procfs.Proc{PID: 70, PPID: 1, Env: []string{tok("t1")}},
		procfs.Proc{PID: 71, PPID: 70, Env: []string{"X=1"}},
		procfs.Proc{PID: 72, PPID: 1, Env: []string{tok("t2")}},
		procfs.Proc{PID: 73, PPID: 1, Env: []string{"X=1"}},
		procfs.Proc{PID: 74, PPID: 1, Argv: []string{"/usr/bin/nvidia-cuda-mps-server"}},
	)
	tasks := NewTasks(Task{Token: "t1", GPU: gpuA}, Task{Token: "t2", GPU: gpuA}, Task{Token: "t3", GPU: gpuA})
	listed := []gpu.Process{{PID: 70, UsedBytes: 1 * size.GiB}, {PID: 71, UsedBytes: 2 * size.GiB},
		{PID: 72, UsedBytes: 4 * size.GiB}, {PID: 73, UsedBytes: 8 * size.GiB}, {PID: 74, UsedBytes: 16 * size.MiB}}
	a := New(procs)
	s := a.Split(gpuA, listed, tasks)
	use := func(token string, want size.Bytes, wantOK bool) {
		t.Helper()
		if got, ok := s.Use(token); got != want || ok != wantOK {
			t.Errorf("Use(%s) = %s, %v; want %s, %v", token, got, ok, want, wantOK)
		}
	}
	use("t1", 3*size.GiB, true)
	use("t2", 4*size.GiB, true)
	use("t3", 0, false)
	if s.Unmanaged != 8*size.GiB {
		t.Errorf("unmanaged %s, want 8GiB (the MPS server is no one's)", s.Unmanaged)
	}
	if by := s.ByTask(); len(by) != 2 || len(by["t1"]) != 2 || len(by["t2"]) != 1 {
		t.Errorf("by task %+v", by)
	}
	if !s.Procs[4].MPSServer || s.Procs[4].Managed() {
		t.Errorf("MPS server %+v", s.Procs[4])
	}
	// 71 ends after the GPU listed it: it cannot be tied to its task any more (its PID may be
	// another process's by the time anyone acts on it), and a process never seen is the same.
	procs.Remove(71)
	a.NewPass()
	s = a.Split(gpuA, append(listed, gpu.Process{PID: 75, UsedBytes: size.GiB}), tasks)
	use("t1", size.GiB, true)
	if s.Unmanaged != 11*size.GiB || s.Procs[1].Managed() || s.Procs[1].Note != "process vanished" ||
		s.Procs[5].Note != "process vanished" {
		t.Errorf("unmanaged %s, vanished %+v and %+v", s.Unmanaged, s.Procs[1], s.Procs[5])
	}
}

// A task names its processes as it likes: one called nvidia-cuda-mps-server that carries a
// task's token, or whose parent does, is that task's and counts against it. Before, the name
// alone made it the server, whose memory no sum of the watchdog's holds. Only a process no task
// claims is the server.
func TestAProcessNamedAsTheMPSServerIsItsTasks(t *testing.T) {
	server := []string{"/usr/bin/nvidia-cuda-mps-server"}
	procs := procfs.NewTable(
		procfs.Proc{PID: 80, PPID: 1, Argv: server, Env: []string{tok("t1")}},
		procfs.Proc{PID: 82, PPID: 1, Env: []string{tok("t2")}},
		procfs.Proc{PID: 81, PPID: 82, Argv: server},
		procfs.Proc{PID: 83, PPID: 1, Argv: server},
	)
	tasks := NewTasks(Task{Token: "t1", GPU: gpuA}, Task{Token: "t2", GPU: gpuA})
	listed := []gpu.Process{{PID: 80, UsedBytes: 6 * size.GiB}, {PID: 81, UsedBytes: 5 * size.GiB}, {PID: 83, UsedBytes: 66 * size.MiB}}
	s := New(procs).Split(gpuA, listed, tasks)
	for i, want := range []struct {
		token, via string
	}{{"t1", ViaEnviron}, {"t2", ViaParent}} {
		if p := s.Procs[i]; p.MPSServer || p.Token != want.token || p.Via != want.via {
			t.Errorf("process %d, named as the server: %+v; want task %s via %s", p.PID, p, want.token, want.via)
		}
	}
	if p := s.Procs[2]; !p.MPSServer || p.Managed() || s.Unmanaged != 0 {
		t.Errorf("the server no task claims: %+v, unmanaged %s", p, s.Unmanaged)
	}
	if u, _ := s.Use("t1"); u != 6*size.GiB {
		t.Errorf("t1 holds %s, want its process's 6GiB", u)
	}
}
