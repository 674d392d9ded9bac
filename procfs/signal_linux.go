//go:build linux

package procfs

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Signal sends sig to the process pid that started at startTicks (0: whichever process holds
// pid now). A watchdog that read a process on one pass and signals it later must not hit a
// process that took the PID meanwhile: a stranger's job SIGKILLed for a tenant's violation.
// So the signal goes through a pidfd, which names one process for good, and the start time is
// checked after the pidfd is open: a match then means the pidfd is the process that was read.
// A process gone, or replaced by a later one, gives ESRCH, which callers take as "already
// stopped". Kernels before 5.3 have no pidfd, and a seccomp profile older than the call (a
// container runtime's) refuses it; there the check and the kill are two steps.
func Signal(pid int, startTicks uint64, sig syscall.Signal) error {
	if pid <= 0 {
		return fmt.Errorf("signal %s: pid %d names no single process", sig, pid)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	// pidfd_open itself never fails with EPERM (it checks no permission): that errno comes from
	// a seccomp filter, as ENOSYS does from one that answers so or from an old kernel.
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM):
		return signalChecked(pid, startTicks, sig)
	case err != nil:
		return err
	}
	defer unix.Close(fd)
	if replaced(pid, startTicks) {
		return syscall.ESRCH
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0)
}
