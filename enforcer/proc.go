package enforcer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ProcStat is what the watchdog needs from /proc/<pid>/stat.
type ProcStat struct {
	PPID int
	// StartTicks is the process start time in clock ticks since boot; with the PID it names one
	// process for good, so a recycled PID never inherits a dead task's reservation.
	StartTicks uint64
}

// ProcSource is the watchdog's view of the host's processes. PIDs are host PIDs, as NVML reports.
// The plugin needs the host PID namespace and the right to read other users' environ (root).
type ProcSource interface {
	// PIDs lists every live process.
	PIDs() ([]int, error)
	Stat(pid int) (ProcStat, error)
	// Environ is the process's initial environment as KEY=VALUE entries.
	Environ(pid int) ([]string, error)
	// Cgroup is the content of /proc/<pid>/cgroup.
	Cgroup(pid int) (string, error)
	// Cmdline is the process's argument vector.
	Cmdline(pid int) ([]string, error)
}

// LinuxProcs reads a procfs mounted at root ("" means /proc).
func LinuxProcs(root string) ProcSource {
	if root == "" {
		root = "/proc"
	}
	return linuxProcs{root: root}
}

type linuxProcs struct{ root string }

func (p linuxProcs) PIDs() ([]int, error) {
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

func (p linuxProcs) read(pid int, name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(p.root, strconv.Itoa(pid), name))
}

func (p linuxProcs) Stat(pid int) (ProcStat, error) {
	b, err := p.read(pid, "stat")
	if err != nil {
		return ProcStat{}, err
	}
	return parseStat(pid, b)
}

// parseStat reads fields 4 (ppid) and 22 (starttime). The command name (field 2) may hold spaces
// and parentheses, so parsing starts after its last ')'.
func parseStat(pid int, b []byte) (ProcStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: no ')' in %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is f[1], starttime f[19].
	if len(f) < 20 {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: %d fields after the name, want at least 20", pid, len(f))
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: ppid %q: %w", pid, f[1], err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: starttime %q: %w", pid, f[19], err)
	}
	return ProcStat{PPID: ppid, StartTicks: start}, nil
}

func (p linuxProcs) Environ(pid int) ([]string, error) {
	b, err := p.read(pid, "environ")
	if err != nil {
		return nil, err
	}
	return splitNUL(b), nil
}

func (p linuxProcs) Cgroup(pid int) (string, error) {
	b, err := p.read(pid, "cgroup")
	return string(b), err
}

func (p linuxProcs) Cmdline(pid int) ([]string, error) {
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
