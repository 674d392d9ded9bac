package probe

import "syscall"

// diesWithParent makes the kernel SIGKILL the job when its parent dies. The signal follows the
// parent thread; Go ends a thread only when a goroutine locked to it exits, which the runner's
// never are. SIGKILL, because a job still running without its runner has no watchdog and no
// reservation that will last.
func diesWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
