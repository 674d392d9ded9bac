package enforcer

import (
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/gpufrac/gpufrac/ledger"
)

type fakeProc struct {
	ppid   int
	start  uint64
	env    []string
	envErr error
	cgroup string
	argv   []string
}

// fakeProcs is a process table for tests.
type fakeProcs map[int]fakeProc

func (f fakeProcs) PIDs() ([]int, error) {
	var out []int
	for pid := range f {
		out = append(out, pid)
	}
	return out, nil
}

func (f fakeProcs) get(pid int) (fakeProc, error) {
	p, ok := f[pid]
	if !ok {
		return p, fs.ErrNotExist
	}
	return p, nil
}

func (f fakeProcs) Stat(pid int) (ProcStat, error) {
	p, err := f.get(pid)
	return ProcStat{PPID: p.ppid, StartTicks: p.start}, err
}

func (f fakeProcs) Environ(pid int) ([]string, error) {
	p, err := f.get(pid)
	if err != nil {
		return nil, err
	}
	return p.env, p.envErr
}

func (f fakeProcs) Cgroup(pid int) (string, error) {
	p, err := f.get(pid)
	return p.cgroup, err
}

func (f fakeProcs) Cmdline(pid int) ([]string, error) {
	p, err := f.get(pid)
	return p.argv, err
}

func TestAttribute(t *testing.T) {
	const gpuA, gpuB = "GPU-a", "GPU-b"
	const alloc = "0b5c2a1e-7d3f-4c2b-9a8e-1f2e3d4c5b6a"
	res := map[string]ledger.Reservation{
		"tokA":  {Token: "tokA", GPU: gpuA, Task: ledger.Task{AllocID: alloc, TaskName: "train"}},
		"tokA2": {Token: "tokA2", GPU: gpuA, Task: ledger.Task{AllocID: alloc, TaskName: "eval"}},
		"tokB":  {Token: "tokB", GPU: gpuB},
	}
	procs := fakeProcs{
		10: {ppid: 1, env: []string{"PATH=/bin", EnvReservation + "=tokA"}},
		// a worker whose environment was scrubbed, in the task's Nomad cgroup (exec driver, v2)
		11: {ppid: 1, env: []string{"PATH=/bin"}, cgroup: "0::/nomad.slice/share.slice/" + alloc + ".eval.scope\n"},
		// environ unreadable (another user, no root) but its parent carries the token
		12: {ppid: 10, envErr: fs.ErrPermission},
		// a grandchild of the token holder
		13: {ppid: 12, env: []string{"X=1"}},
		// a token of a reservation on another GPU
		14: {ppid: 1, env: []string{EnvReservation + "=tokB"}},
		// a stale token
		15: {ppid: 1, env: []string{EnvReservation + "=gone-token-123"}},
		// nothing at all
		16: {ppid: 1, envErr: fs.ErrPermission},
		// alloc ID with two tasks on the GPU and no task name in the path: ambiguous
		17: {ppid: 1, cgroup: "0::/docker/" + alloc + "\n"},
		// a task of two device requests (tokA on GPU a, then tokB on GPU b): Nomad's merge left
		// the last GPUFRAC_RESERVATION; the per-GPU keys carry both
		18: {ppid: 1, env: []string{EnvReservation + "=tokB", ReservationKey(gpuA) + "=tokA", ReservationKey(gpuB) + "=tokB"}},
		// its child, environment scrubbed
		19: {ppid: 18, env: []string{"X=1"}},
	}
	cases := []struct {
		pid      int
		gpu      string
		tok, via string
		wantNote string
	}{
		{10, gpuA, "tokA", viaEnviron, ""},
		{11, gpuA, "tokA2", viaCgroup, ""},
		{12, gpuA, "tokA", viaParent, ""},
		{13, gpuA, "tokA", viaParent, ""},
		{14, gpuA, "", "", "token of a reservation on GPU GPU-b"},
		{14, gpuB, "tokB", viaEnviron, ""},
		{15, gpuA, "", "", "token gone-tok… matches no reservation"},
		{16, gpuA, "", "", "environ unreadable: permission denied"},
		{17, gpuA, "", "", ""},
		{99, gpuA, "", "", "process vanished"},
		{18, gpuA, "tokA", viaEnviron, ""},
		{18, gpuB, "tokB", viaEnviron, ""},
		{19, gpuA, "tokA", viaParent, ""},
		{19, gpuB, "tokB", viaParent, ""},
	}
	c := newProcCache(procs)
	for _, tc := range cases {
		tok, via, note := c.attribute(tc.pid, tc.gpu, res)
		if tok != tc.tok || via != tc.via || note != tc.wantNote {
			t.Errorf("pid %d on %s: got (%q, %q, %q), want (%q, %q, %q)", tc.pid, tc.gpu, tok, via, note, tc.tok, tc.via, tc.wantNote)
		}
	}
}

func TestProcCacheRecycledPID(t *testing.T) {
	procs := fakeProcs{20: {ppid: 1, start: 100, env: []string{EnvReservation + "=old"}}}
	c := newProcCache(procs)
	if id, _ := c.get(20); id.token != "old" {
		t.Fatalf("token %q", id.token)
	}
	procs[20] = fakeProc{ppid: 1, start: 200, env: []string{"A=b"}}
	if id, _ := c.get(20); id.token != "old" {
		t.Fatalf("within one pass the first read stands, got %q", id.token)
	}
	c.newPass()
	if id, _ := c.get(20); id.token != "" {
		t.Fatalf("a recycled PID kept the dead process's token %q", id.token)
	}
}

// A process first read between its fork and its exec has its parent's environment; once it has
// exec'd it is read again, and its token is found.
func TestProcCacheRereadsAfterExec(t *testing.T) {
	procs := fakeProcs{30: {ppid: 1, start: 100, env: []string{"PARENT=1"}, argv: []string{"runner"}}}
	c := newProcCache(procs)
	if id, _ := c.get(30); id.token != "" {
		t.Fatalf("token %q before the exec", id.token)
	}
	procs[30] = fakeProc{ppid: 1, start: 100, env: []string{EnvReservation + "=tok"}, argv: []string{"python3", "train.py"}}
	c.newPass()
	if id, _ := c.get(30); id.token != "tok" {
		t.Fatalf("after the exec the token is %q, want tok", id.token)
	}
	// A process with a token is not read again, even if it rewrites its command line.
	procs[30] = fakeProc{ppid: 1, start: 100, env: nil, argv: []string{"renamed"}}
	c.newPass()
	if id, _ := c.get(30); id.token != "tok" {
		t.Fatalf("a cached token was lost: %q", id.token)
	}
}

func TestTaskIdentityFromEnviron(t *testing.T) {
	procs := fakeProcs{30: {ppid: 1, env: []string{
		EnvReservation + "=t", envNomadAlloc + "=a1", envNomadJob + "=job", envNomadTask + "=task", EnvTemplate + "=tmpl",
		EnvMPSPipeDir + "=/run/p"}}}
	id, err := newProcCache(procs).get(30)
	if err != nil {
		t.Fatal(err)
	}
	want := ledger.Task{AllocID: "a1", JobName: "job", TaskName: "task", Template: "tmpl"}
	if id.task != want || id.pipeDir != "/run/p" {
		t.Fatalf("identity %+v", id)
	}
}

func TestParseStat(t *testing.T) {
	cases := []struct {
		in      string
		want    ProcStat
		wantErr bool
	}{
		{"42 (python3) S 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 123456 0 0", ProcStat{PPID: 7, StartTicks: 123456}, false},
		{"42 (a) b) (c) R 9 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0", ProcStat{PPID: 9, StartTicks: 77}, false},
		{"42 (x S 1", ProcStat{}, true},
		{"42 (x) S 1 2", ProcStat{}, true},
	}
	for _, tc := range cases {
		got, err := parseStat(42, []byte(tc.in))
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseStat(%q) = %+v, %v", tc.in, got, err)
		}
	}
}

// The real /proc, read for this test process.
func TestLinuxProcs(t *testing.T) {
	p := LinuxProcs("")
	pids, err := p.PIDs()
	if err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()
	found := false
	for _, pid := range pids {
		found = found || pid == self
	}
	if !found {
		t.Fatalf("own pid %d not listed", self)
	}
	st, err := p.Stat(self)
	if err != nil || st.PPID != os.Getppid() || st.StartTicks == 0 {
		t.Fatalf("stat %+v, %v", st, err)
	}
	argv, err := p.Cmdline(self)
	if err != nil || len(argv) == 0 {
		t.Fatalf("cmdline %v, %v", argv, err)
	}
	if _, err := p.Stat(1 << 30); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing pid: %v", err)
	}
}
