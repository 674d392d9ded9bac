package procfs

import (
	"fmt"
	"io/fs"
	"slices"
	"sync"
)

// Proc is one process of a Table.
type Proc struct {
	PID, PPID int
	// PGRP and Session default to the PID's own when zero (a process that leads its group).
	PGRP, Session int
	State         byte // 0 means 'S'
	Start         uint64
	Env           []string
	// EnvErr is what reading the environment answers instead (another user's process: a
	// permission error).
	EnvErr error
	Cgroup string
	Argv   []string
}

// Table is an in-memory process table, the simulated twin of Linux: tests build the process
// trees they need (a re-parented child, a recycled PID, an unreadable environment) and change
// them while the code under test reads them. Safe for concurrent use.
type Table struct {
	mu sync.Mutex
	m  map[int]Proc
}

// NewTable holds procs.
func NewTable(procs ...Proc) *Table {
	t := &Table{m: map[int]Proc{}}
	for _, p := range procs {
		t.Set(p)
	}
	return t
}

// Set adds p, or replaces the process of its PID (an exec, or a recycled PID).
func (t *Table) Set(p Proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[p.PID] = p
}

// Remove ends a process.
func (t *Table) Remove(pid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, pid)
}

func (t *Table) get(pid int) (Proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.m[pid]
	if !ok {
		return p, fmt.Errorf("process %d: %w", pid, fs.ErrNotExist)
	}
	return p, nil
}

// PIDs lists the table's processes in ascending order.
func (t *Table) PIDs() ([]int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]int, 0, len(t.m))
	for pid := range t.m {
		out = append(out, pid)
	}
	slices.Sort(out)
	return out, nil
}

func (t *Table) Stat(pid int) (Stat, error) {
	p, err := t.get(pid)
	if err != nil {
		return Stat{}, err
	}
	st := Stat{PPID: p.PPID, PGRP: p.PGRP, Session: p.Session, State: p.State, StartTicks: p.Start}
	if st.PGRP == 0 {
		st.PGRP = pid
	}
	if st.Session == 0 {
		st.Session = pid
	}
	if st.State == 0 {
		st.State = 'S'
	}
	return st, nil
}

func (t *Table) Environ(pid int) ([]string, error) {
	p, err := t.get(pid)
	if err != nil {
		return nil, err
	}
	return slices.Clone(p.Env), p.EnvErr
}

func (t *Table) Cgroup(pid int) (string, error) {
	p, err := t.get(pid)
	return p.Cgroup, err
}

func (t *Table) Cmdline(pid int) ([]string, error) {
	p, err := t.get(pid)
	return slices.Clone(p.Argv), err
}
