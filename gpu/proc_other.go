//go:build unix && !linux

package gpu

import (
	"errors"
	"syscall"
)

// readProcStat has no /proc to read: a process counts as alive while signal 0 reaches it.
func readProcStat(pid int) (procStat, error) {
	err := syscall.Kill(pid, 0)
	if err == nil || errors.Is(err, syscall.EPERM) {
		return procStat{alive: true}, nil
	}
	return procStat{}, nil
}
