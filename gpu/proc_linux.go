//go:build linux

package gpu

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// readProcStat reads /proc/<pid>/stat. A zombie counts as dead: a killed child whose parent has
// not reaped it yet holds no GPU memory, and tests kill children before waiting for them.
func readProcStat(pid int) (procStat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return procStat{}, nil
	}
	if err != nil {
		return procStat{}, err
	}
	// The command name is in parentheses and may itself contain spaces and parentheses.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("unexpected /proc/%d/stat %q", pid, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("unexpected /proc/%d/stat %q", pid, s)
	}
	switch f[0] {
	case "Z", "X", "x":
		return procStat{}, nil
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("unexpected start time in /proc/%d/stat: %w", pid, err)
	}
	return procStat{alive: true, start: start}, nil
}
