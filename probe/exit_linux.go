package probe

import (
	"errors"

	"golang.org/x/sys/unix"
)

// exitPending says whether the child pid has exited, asking the kernel without reaping it
// (WNOWAIT), so that Start's goroutine still gets its status from Wait: an exit is in from the
// moment the child ends, not from when that goroutine next runs. ECHILD: reaped already. Any
// other failure says "still running", which leaves the answer to Done.
func exitPending(pid int) bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if err != nil {
		return errors.Is(err, unix.ECHILD)
	}
	// Linux zeroes info when no child has changed state.
	return info.Signo == int32(unix.SIGCHLD)
}
