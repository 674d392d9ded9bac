package procfs

import (
	"errors"
	"io/fs"
	"os"
	"slices"
	"syscall"
	"testing"
)

func TestParseStat(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		want    Stat
		wantErr bool
	}{
		{"plain", "42 (python3) S 7 42 40 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 123456 0 0",
			Stat{PPID: 7, PGRP: 42, Session: 40, State: 'S', StartTicks: 123456}, false},
		{"name with parentheses and spaces", "42 (a) b) (c) R 9 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0",
			Stat{PPID: 9, PGRP: 1, Session: 1, State: 'R', StartTicks: 77}, false},
		{"zombie", "42 (x) Z 9 3 3 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0",
			Stat{PPID: 9, PGRP: 3, Session: 3, State: 'Z', StartTicks: 5}, false},
		{"no closing parenthesis", "42 (x S 1", Stat{}, true},
		{"too few fields", "42 (x) S 1 2", Stat{}, true},
		{"ppid not a number", "42 (x) S p 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0", Stat{}, true},
		{"start not a number", "42 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 -5 0", Stat{}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStat(42, []byte(tc.in))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("ParseStat(%q) = %+v, %v", tc.in, got, err)
			}
		})
	}
}

func TestDead(t *testing.T) {
	for state, dead := range map[byte]bool{'R': false, 'S': false, 'D': false, 'Z': true, 'X': true} {
		if got := (Stat{State: state}).Dead(); got != dead {
			t.Errorf("state %c: Dead() = %v", state, got)
		}
	}
}

// statErr is a process table whose stat cannot be read.
type statErr struct{ *Table }

func (statErr) Stat(int) (Stat, error) { return Stat{}, fs.ErrPermission }

// Running counts a zombie as dead (its stat still read), and a process gone as not running
// rather than an error.
func TestRunning(t *testing.T) {
	tab := NewTable(Proc{PID: 10, PPID: 1, Start: 5}, Proc{PID: 11, PPID: 10, State: 'Z', Start: 6}, Proc{PID: 12, PPID: 10, State: 'D', Start: 7})
	cases := []struct {
		name    string
		src     Source
		pid     int
		running bool
		start   uint64
		err     error
	}{
		{"sleeping", tab, 10, true, 5, nil},
		{"in disk sleep", tab, 12, true, 7, nil},
		{"zombie", tab, 11, false, 6, nil},
		{"gone", tab, 99, false, 0, nil},
		{"stat unreadable", statErr{tab}, 10, false, 0, fs.ErrPermission},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, running, err := Running(tc.src, tc.pid)
			if running != tc.running || st.StartTicks != tc.start || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("Running(%d) = %+v, %v, %v; want running %v, start %d, error %v", tc.pid, st, running, err, tc.running, tc.start, tc.err)
			}
		})
	}
}

// Same names one process for good: a zombie, a recycled PID or an unreadable stat is not it.
func TestSame(t *testing.T) {
	tab := NewTable(Proc{PID: 10, PPID: 1, Start: 5}, Proc{PID: 11, PPID: 10, State: 'Z', Start: 6})
	for _, tc := range []struct {
		name  string
		src   Source
		pid   int
		start uint64
		want  bool
	}{
		{"the same process", tab, 10, 5, true},
		{"the PID reused by a later process", tab, 10, 4, false},
		{"ended, not reaped", tab, 11, 6, false},
		{"gone", tab, 99, 5, false},
		{"stat unreadable", statErr{tab}, 10, 5, false},
	} {
		if got := Same(tc.src, tc.pid, tc.start); got != tc.want {
			t.Errorf("%s: Same(%d, %d) = %v, want %v", tc.name, tc.pid, tc.start, got, tc.want)
		}
	}
}

// The real /proc, read for this test process.
func TestLinux(t *testing.T) {
	p := Linux("")
	pids, err := p.PIDs()
	if err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()
	if !slices.Contains(pids, self) {
		t.Fatalf("own pid %d not listed", self)
	}
	st, err := p.Stat(self)
	if err != nil || st.PPID != os.Getppid() || st.StartTicks == 0 || st.PGRP != syscall.Getpgrp() || st.Dead() {
		t.Fatalf("stat %+v, %v", st, err)
	}
	argv, err := p.Cmdline(self)
	if err != nil || len(argv) == 0 {
		t.Fatalf("cmdline %v, %v", argv, err)
	}
	env, err := p.Environ(self)
	if err != nil || len(env) == 0 {
		t.Fatalf("environ %d entries, %v", len(env), err)
	}
	if _, err := p.Stat(1 << 30); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing pid: %v", err)
	}
	if _, err := Linux(t.TempDir()).Stat(self); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a procfs root without the pid: %v", err)
	}
}

func TestTable(t *testing.T) {
	denied := fs.ErrPermission
	tab := NewTable(
		Proc{PID: 10, PPID: 1, Start: 5, Env: []string{"A=1"}, Argv: []string{"sh"}},
		Proc{PID: 11, PPID: 10, PGRP: 10, Session: 10, State: 'Z', EnvErr: denied, Cgroup: "0::/x\n"},
	)
	if pids, _ := tab.PIDs(); !slices.Equal(pids, []int{10, 11}) {
		t.Fatalf("PIDs %v", pids)
	}
	if st, err := tab.Stat(10); err != nil || st != (Stat{PPID: 1, PGRP: 10, Session: 10, State: 'S', StartTicks: 5}) {
		t.Fatalf("a group leader by default: %+v, %v", st, err)
	}
	if st, _ := tab.Stat(11); !st.Dead() || st.PGRP != 10 {
		t.Fatalf("zombie in 10's group: %+v", st)
	}
	if _, err := tab.Environ(11); !errors.Is(err, denied) {
		t.Fatalf("environ error %v, want %v", err, denied)
	}
	if cg, _ := tab.Cgroup(11); cg != "0::/x\n" {
		t.Fatalf("cgroup %q", cg)
	}
	tab.Set(Proc{PID: 10, PPID: 1, Start: 9, Argv: []string{"python3"}})
	if st, _ := tab.Stat(10); st.StartTicks != 9 {
		t.Fatalf("a recycled PID keeps the old start %d", st.StartTicks)
	}
	tab.Remove(10)
	for name, err := range map[string]error{
		"stat":    second(tab.Stat(10)),
		"environ": second(tab.Environ(10)),
		"cgroup":  second(tab.Cgroup(10)),
		"cmdline": second(tab.Cmdline(10)),
	} {
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s of a removed process: %v", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }
