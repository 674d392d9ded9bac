//go:build unix && !linux

package procfs

import "syscall"

// Signal sends sig to the process pid that started at startTicks (0: whichever holds pid now).
// Without pidfds the check and the kill are two steps.
func Signal(pid int, startTicks uint64, sig syscall.Signal) error {
	return signalChecked(pid, startTicks, sig)
}
