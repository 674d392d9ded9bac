package probe

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gpufrac/gpufrac/taskenv"
)

// Tree decides whether a host PID belongs to one job. A PID belongs when its parent chain
// reaches the job's root process, when it is in the root's process group, or when its
// environment carries the job's reservation token (which survives reparenting to init).
// Decisions are cached per PID and start time, so a hot sampling loop reads /proc rarely.
type Tree struct {
	// root is the job's first process; it leads the job's process group, so its PID is also
	// the group's ID.
	root  int
	token string

	mu    sync.Mutex
	cache map[int]treeEntry
}

type treeEntry struct {
	start uint64
	owned bool
}

// NewTree tracks the processes of the job whose first process is root. token may be empty.
// The job is expected to run in its own process group led by root.
func NewTree(root int, token string) *Tree {
	return &Tree{root: root, token: token, cache: map[int]treeEntry{}}
}

// Owns reports whether pid is one of the job's processes.
func (t *Tree) Owns(pid int) bool {
	if pid == t.root {
		return true
	}
	st, ok := readStat(pid)
	if !ok {
		// Gone, or not visible from here (another PID namespace): fall back to the cache, so a
		// process that exits between the GPU listing and this call is still counted once.
		t.mu.Lock()
		e, hit := t.cache[pid]
		t.mu.Unlock()
		return hit && e.owned
	}
	t.mu.Lock()
	e, hit := t.cache[pid]
	t.mu.Unlock()
	if hit && e.start == st.start {
		return e.owned
	}
	owned := t.decide(pid, st)
	t.mu.Lock()
	t.cache[pid] = treeEntry{start: st.start, owned: owned}
	t.mu.Unlock()
	return owned
}

func (t *Tree) decide(pid int, st stat) bool {
	if st.pgrp == t.root {
		return true
	}
	// Walk the parent chain; a bounded walk keeps a corrupt or cyclic view from looping.
	cur := st
	for range 64 {
		if cur.ppid == t.root {
			return true
		}
		if cur.ppid <= 1 {
			break
		}
		next, ok := readStat(cur.ppid)
		if !ok {
			break
		}
		cur = next
	}
	if t.token != "" {
		return environHas(pid, taskenv.Reservation+"="+t.token)
	}
	return false
}

type stat struct {
	ppid, pgrp int
	start      uint64
}

func readStat(pid int) (stat, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return stat{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	start, err3 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return stat{}, false
	}
	return stat{ppid: ppid, pgrp: pgrp, start: start}, true
}

func environHas(pid int, kv string) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	return slices.Contains(strings.Split(string(data), "\x00"), kv)
}
