// Package procfs is the one reader of the host's process table: a process's parent, process
// group, session, state and start time (/proc/<pid>/stat), its initial environment, cgroup and
// command line. Source is the seam: Linux reads a mounted procfs, Table is an in-memory process
// table for tests. It imports nothing of the module, so every package that asks about processes
// (the watchdog, attribution, the simulated GPUs, the runner's holder) reads them the same way.
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Stat is what gpufrac reads from /proc/<pid>/stat.
type Stat struct {
	PPID int
	// PGRP and Session are the process group and session IDs: a job started in its own group
	// (gpufrac run, gpufrac probe) is found by its root's PID here even after its parent died.
	PGRP, Session int
	// State is the one-letter state (R, S, D, Z, ...).
	State byte
	// StartTicks is the start time in clock ticks since boot; with the PID it names one process
	// for good, so a recycled PID never inherits what a dead process held.
	StartTicks uint64
}

// Dead says whether the process has ended but not been reaped (a zombie holds no GPU memory).
func (s Stat) Dead() bool { return s.State == 'Z' || s.State == 'X' || s.State == 'x' }

// Running reads process pid's stat from src and says whether the process still runs: false, with
// no error, when it is gone or has ended unreaped (Dead), so that whoever asks whether a process
// lives counts a zombie as dead. An error is a stat that could not be read or parsed.
func Running(src Source, pid int) (Stat, bool, error) {
	st, err := src.Stat(pid)
	if errors.Is(err, fs.ErrNotExist) {
		return Stat{}, false, nil
	}
	if err != nil {
		return Stat{}, false, err
	}
	return st, !st.Dead(), nil
}

// Same says whether pid still runs as the process that started at startTicks: not gone, not
// ended unreaped, not a later process that reuses the PID. A stat that cannot be read says no:
// callers use it to let go of what a dead process held, and a process they cannot see holds
// nothing they can check.
func Same(src Source, pid int, startTicks uint64) bool {
	st, running, err := Running(src, pid)
	return err == nil && running && st.StartTicks == startTicks
}

// Source is a view of the host's processes. PIDs are host PIDs, as NVML reports them; reading
// another user's environ needs root. A process that does not exist gives an error satisfying
// errors.Is(err, fs.ErrNotExist).
type Source interface {
	// PIDs lists every live process.
	PIDs() ([]int, error)
	Stat(pid int) (Stat, error)
	// Environ is the process's initial environment as KEY=VALUE entries.
	Environ(pid int) ([]string, error)
	// Cgroup is the content of /proc/<pid>/cgroup.
	Cgroup(pid int) (string, error)
	// Cmdline is the process's argument vector.
	Cmdline(pid int) ([]string, error)
}

// Linux reads a procfs mounted at root ("" means /proc).
func Linux(root string) Source {
	if root == "" {
		root = "/proc"
	}
	return linux{root: root}
}

type linux struct{ root string }

func (p linux) PIDs() ([]int, error) {
	ents, err := os.ReadDir(p.root)
	if err != nil {
		return nil, fmt.Errorf("list processes in %s: %w", p.root, err)
	}
	pids := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

func (p linux) read(pid int, name string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(p.root, strconv.Itoa(pid), name))
	if errors.Is(err, syscall.ESRCH) {
		// A process that ends while its file is read answers ESRCH: it is gone all the same.
		err = fmt.Errorf("process %d: %w", pid, fs.ErrNotExist)
	}
	return b, err
}

func (p linux) Stat(pid int) (Stat, error) {
	b, err := p.read(pid, "stat")
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(pid, b)
}

// ParseStat reads fields 3 (state), 4 (ppid), 5 (pgrp), 6 (session) and 22 (starttime) of a
// /proc/<pid>/stat line. The command name (field 2) may hold spaces and parentheses, so parsing
// starts after its last ')'.
func ParseStat(pid int, b []byte) (Stat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("/proc/%d/stat: no ')' in %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3: ppid is f[1], pgrp f[2], session f[3], starttime f[19].
	if len(f) < 20 {
		return Stat{}, fmt.Errorf("/proc/%d/stat: %d fields after the name, want at least 20", pid, len(f))
	}
	var st Stat
	if len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("/proc/%d/stat: state %q is not one letter", pid, f[0])
	}
	st.State = f[0][0]
	ints := []struct {
		name string
		s    string
		dst  *int
	}{{"ppid", f[1], &st.PPID}, {"pgrp", f[2], &st.PGRP}, {"session", f[3], &st.Session}}
	for _, n := range ints {
		v, err := strconv.Atoi(n.s)
		if err != nil {
			return Stat{}, fmt.Errorf("/proc/%d/stat: %s %q: %w", pid, n.name, n.s, err)
		}
		*n.dst = v
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("/proc/%d/stat: starttime %q: %w", pid, f[19], err)
	}
	st.StartTicks = start
	return st, nil
}

func (p linux) Environ(pid int) ([]string, error) {
	b, err := p.read(pid, "environ")
	if err != nil {
		return nil, err
	}
	return splitNUL(b), nil
}

func (p linux) Cgroup(pid int) (string, error) {
	b, err := p.read(pid, "cgroup")
	return string(b), err
}

func (p linux) Cmdline(pid int) ([]string, error) {
	b, err := p.read(pid, "cmdline")
	if err != nil {
		return nil, err
	}
	return splitNUL(b), nil
}

func splitNUL(b []byte) []string {
	var out []string
	for _, s := range bytes.Split(b, []byte{0}) {
		if len(s) > 0 {
			out = append(out, string(s))
		}
	}
	return out
}
