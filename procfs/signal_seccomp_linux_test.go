//go:build linux

package procfs

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// refusePidfdOpen makes every thread of this process fail pidfd_open with errno, as a
// container runtime's seccomp profile written before the call existed does (Docker's before
// 20.10 answered EPERM, later ones and gVisor ENOSYS). It cannot be undone: only a child
// process of the test calls it.
func refusePidfdOpen(t *testing.T, errno syscall.Errno) {
	t.Helper()
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: unix.SYS_PIDFD_OPEN},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(errno)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		os.Stdout.WriteString(noSeccomp + "\n")
		t.Skipf("no_new_privs: %v", err)
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&fprog))); e != 0 {
		os.Stdout.WriteString(noSeccomp + "\n")
		t.Skipf("seccomp: %v", e)
	}
	if _, err := unix.PidfdOpen(os.Getpid(), 0); !errors.Is(err, errno) {
		t.Fatalf("pidfd_open under the filter: %v, want %v", err, errno)
	}
}

const (
	seccompErrnoEnv = "GPUFRAC_TEST_PIDFD_OPEN_ERRNO"
	// noSeccomp is the child's word for a kernel or sandbox that lets it install no filter.
	noSeccomp = "cannot install a seccomp filter here"
)

// The child's half of TestSignalWherePidfdOpenIsRefused.
func TestSignalUnderSeccompChild(t *testing.T) {
	name := os.Getenv(seccompErrnoEnv)
	if name == "" {
		t.Skip("run by TestSignalWherePidfdOpenIsRefused")
	}
	errno := map[string]syscall.Errno{"EPERM": unix.EPERM, "ENOSYS": unix.ENOSYS}[name]
	cmd, start := startSleeper(t)
	refusePidfdOpen(t, errno)
	if err := Signal(cmd.Process.Pid, start+1, syscall.SIGKILL); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("signal with another start time: %v, want ESRCH", err)
	}
	if err := Signal(cmd.Process.Pid, start, syscall.SIGKILL); err != nil {
		t.Fatalf("signal with its own start time: %v", err)
	}
	if err := cmd.Wait(); err == nil || cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the process ended with %v, want SIGKILL", err)
	}
	os.Stdout.WriteString("signalled under " + name + "\n")
}

// Where a seccomp profile refuses pidfd_open (a container runtime older than the call), Signal
// still stops the process it names, by the start-time check and kill(2) as on a kernel without
// pidfds, and still spares a process with another start time. pidfd_open itself never fails
// with EPERM, so that errno, like ENOSYS, can only mean the call is not let through.
func TestSignalWherePidfdOpenIsRefused(t *testing.T) {
	for _, name := range []string{"EPERM", "ENOSYS"} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSignalUnderSeccompChild$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), seccompErrnoEnv+"="+name)
			out, err := cmd.CombinedOutput()
			if err == nil && strings.Contains(string(out), noSeccomp) {
				t.Skipf("%s\n%s", noSeccomp, out)
			}
			if err != nil || !strings.Contains(string(out), "signalled under "+name) {
				t.Fatalf("child with pidfd_open refused by %s: %v\n%s", name, err, out)
			}
		})
	}
}
