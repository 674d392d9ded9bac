//go:build unix

package procfs

import "syscall"

// signalChecked is Signal in two steps, where no pidfd can be had: the start time is checked,
// then the PID signalled, so a process that takes the PID between the two can still be hit.
func signalChecked(pid int, startTicks uint64, sig syscall.Signal) error {
	if replaced(pid, startTicks) {
		return syscall.ESRCH
	}
	return syscall.Kill(pid, sig)
}

// replaced says whether the process that started at startTicks no longer holds pid (0: any
// process will do).
func replaced(pid int, startTicks uint64) bool {
	return startTicks != 0 && !Same(Linux(""), pid, startTicks)
}
