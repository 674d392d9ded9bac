package attribution

import (
	"io/fs"
	"testing"

	"github.com/gpufrac/gpufrac/procfs"
)

// A tenant may create cgroups below its own and name them as it likes, and its environment's
// NOMAD_ALLOC_ID is its to write: neither may tie its process to a neighbour, whose cap would
// then be judged, and whose processes stopped, for that process's memory. A process is tied by
// its cgroup only to a task one of whose token carriers lives at or above that cgroup.
func TestCgroupRuleNeedsTheTasksOwnCgroup(t *testing.T) {
	const (
		allocV = "11111111-2222-4333-8444-555555555555"
		allocH = "66666666-7777-4888-9999-aaaaaaaaaaaa"
		execV  = "0::/nomad.slice/share.slice/" + allocV + ".v.scope\n"
		dockH  = "0::/nomad.slice/docker-0f3a9c.scope\n"
		// v1: one line per hierarchy; the task moved itself in the one it may write
		v1V = "4:pids:/nomad/" + allocV + ".v\n1:name=systemd:/nomad/" + allocV + ".v\n"
	)
	for _, tc := range []struct {
		name  string
		tasks Tasks
		procs []procfs.Proc
		pid   int
		want  Owner
	}{
		{name: "a scrubbed daemon in its task's exec cgroup",
			tasks: NewTasks(Task{Token: "tokV", GPU: gpuA, AllocID: allocV, TaskName: "v"}),
			procs: []procfs.Proc{
				{PID: 10, PPID: 1, Env: []string{tok("tokV")}, Cgroup: execV},
				{PID: 11, PPID: 1, Cgroup: execV},
			},
			pid: 11, want: Owner{"tokV", ViaCgroup, ""}},
		{name: "a scrubbed daemon in a cgroup its task made below its own",
			tasks: NewTasks(Task{Token: "tokV", GPU: gpuA, AllocID: allocV, TaskName: "v"}),
			procs: []procfs.Proc{
				{PID: 10, PPID: 1, Env: []string{tok("tokV")}, Cgroup: execV},
				{PID: 11, PPID: 1, Cgroup: "0::/nomad.slice/share.slice/" + allocV + ".v.scope/workers\n"},
			},
			pid: 11, want: Owner{"tokV", ViaCgroup, ""}},
		{name: "cgroup v1, every hierarchy in the task's",
			tasks: NewTasks(Task{Token: "tokV", GPU: gpuA, AllocID: allocV, TaskName: "v"}),
			procs: []procfs.Proc{
				{PID: 10, PPID: 1, Env: []string{tok("tokV")}, Cgroup: v1V},
				{PID: 11, PPID: 1, Cgroup: v1V},
			},
			pid: 11, want: Owner{"tokV", ViaCgroup, ""}},
		{name: "no carrier of the task read: not tied by its cgroup",
			tasks: NewTasks(Task{Token: "tokV", GPU: gpuA, AllocID: allocV, TaskName: "v"}),
			procs: []procfs.Proc{{PID: 11, PPID: 1, Cgroup: execV}},
			pid:   11, want: Owner{}},
		{name: "a sibling cgroup whose name begins with the task's",
			tasks: NewTasks(Task{Token: "tokV", GPU: gpuA, AllocID: allocV, TaskName: "v"}),
			procs: []procfs.Proc{
				{PID: 10, PPID: 1, Env: []string{tok("tokV")}, Cgroup: execV},
				{PID: 11, PPID: 1, Cgroup: "0::/nomad.slice/share.slice/" + allocV + ".v.scopex\n"},
			},
			pid: 11, want: Owner{}},
		{name: "a docker tenant's process in a cgroup named after a neighbour's allocation",
			tasks: NewTasks(Task{Token: "tokV", GPU: gpuA, AllocID: allocV, TaskName: "v"},
				Task{Token: "tokH", GPU: gpuA, AllocID: allocH, TaskName: "h"}),
			procs: []procfs.Proc{
				{PID: 10, PPID: 1, Env: []string{tok("tokV")}, Cgroup: execV},
				// the tenant's init has scrubbed its own environment; a helper keeps its token alive
				{PID: 20, PPID: 1, Cgroup: dockH},
				{PID: 21, PPID: 20, Env: []string{tok("tokH")}, Cgroup: dockH},
				{PID: 22, PPID: 20, Cgroup: "0::/nomad.slice/docker-0f3a9c.scope/" + allocV + ".v.scope\n"},
			},
			pid: 22, want: Owner{}},
		{name: "a tenant that wrote a neighbour's allocation and task into its environment",
			tasks: NewTasks(Task{Token: "tokV", GPU: gpuA, AllocID: allocV, TaskName: "v"},
				Task{Token: "tokH", GPU: gpuA, AllocID: allocV, TaskName: "h"}),
			procs: []procfs.Proc{
				{PID: 10, PPID: 1, Env: []string{tok("tokV")}, Cgroup: execV},
				{PID: 20, PPID: 1, Cgroup: dockH},
				{PID: 21, PPID: 20, Env: []string{tok("tokH")}, Cgroup: dockH},
				{PID: 22, PPID: 20, Cgroup: "0::/nomad.slice/docker-0f3a9c.scope/" + allocV + ".v.scope\n"},
			},
			pid: 22, want: Owner{"tokH", ViaCgroup, ""}},
		{name: "cgroup v1, moved out of the task's cgroup in one hierarchy",
			tasks: NewTasks(Task{Token: "tokV", GPU: gpuA, AllocID: allocV, TaskName: "v"}),
			procs: []procfs.Proc{
				{PID: 10, PPID: 1, Env: []string{tok("tokV")}, Cgroup: v1V},
				{PID: 11, PPID: 1, Cgroup: "4:pids:/other/" + allocV + ".v\n1:name=systemd:/nomad/" + allocV + ".v\n"},
			},
			pid: 11, want: Owner{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procs := procfs.NewTable(tc.procs...)
			a := New(procs)
			scan(t, procs, a)
			if got := a.Attribute(tc.pid, gpuA, tc.tasks); got != tc.want {
				t.Fatalf("pid %d: got %+v, want %+v", tc.pid, got, tc.want)
			}
		})
	}
}

// scan is the token scan the watchdog runs before it judges, through the entry point it uses.
func scan(t *testing.T, procs *procfs.Table, a *Attributor) {
	t.Helper()
	s, err := a.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if pids, _ := procs.PIDs(); len(s.Live) != len(pids) {
		t.Fatalf("the scan found %d of %d processes live", len(s.Live), len(pids))
	}
}

// The scan reads every live process, so a carrier that holds no GPU memory ties its task's
// scrubbed workers by their cgroup, and it forgets processes that have ended: a carrier gone
// ties nothing, or a task's cgroup would keep a neighbour's later process in it.
func TestScan(t *testing.T) {
	const (
		allocV = "11111111-2222-4333-8444-555555555555"
		execV  = "0::/nomad.slice/share.slice/" + allocV + ".v.scope\n"
	)
	tasks := NewTasks(Task{Token: "tokV", GPU: gpuA, AllocID: allocV, TaskName: "v"})
	procs := procfs.NewTable(
		procfs.Proc{PID: 10, PPID: 1, Env: []string{tok("tokV"), perGPU(gpuA, "tokV")}, Cgroup: execV},
		procfs.Proc{PID: 11, PPID: 1, Cgroup: execV},
		procfs.Proc{PID: 12, PPID: 1, EnvErr: fs.ErrPermission},
	)
	a := New(procs)
	if got := a.Attribute(11, gpuA, tasks); got.Managed() {
		t.Fatalf("before any scan: %+v (nothing has read the carrier)", got)
	}
	s, err := a.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Live) != 3 || len(s.Carriers) != 1 || len(s.Carriers["tokV"]) != 1 || s.Carriers["tokV"][0].PID != 10 {
		t.Fatalf("scan %+v: want 3 live, process 10 the one carrier of tokV", s)
	}
	a.NewPass()
	if got := a.Attribute(11, gpuA, tasks); got != (Owner{"tokV", ViaCgroup, ""}) {
		t.Fatalf("after the scan: %+v", got)
	}
	procs.Remove(10)
	if s, err = a.Scan(); err != nil || s.Live[10] || len(s.Carriers) != 0 {
		t.Fatalf("scan after the carrier ended: %+v, %v", s, err)
	}
	a.NewPass()
	if got := a.Attribute(11, gpuA, tasks); got.Managed() {
		t.Fatalf("tied through a carrier that has ended: %+v", got)
	}
}
