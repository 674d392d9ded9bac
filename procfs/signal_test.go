//go:build linux

package procfs

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
)

// startSleeper starts a child that lives until signalled and returns it with its start time.
func startSleeper(t *testing.T) (*exec.Cmd, uint64) {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	st, err := Linux("").Stat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, st.StartTicks
}

// A signal meant for a process that started at another time is a signal for a process that is
// gone: the PID's current holder is left alone and the caller reads ESRCH.
func TestSignalSparesAProcessThatReusedThePID(t *testing.T) {
	cmd, start := startSleeper(t)
	if err := Signal(cmd.Process.Pid, start+1, syscall.SIGKILL); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("signal with another start time: %v, want ESRCH", err)
	}
	if !Same(Linux(""), cmd.Process.Pid, start) {
		t.Fatal("the process with another start time was signalled")
	}
	if err := Signal(cmd.Process.Pid, start, syscall.SIGKILL); err != nil {
		t.Fatalf("signal with its own start time: %v", err)
	}
	if err := cmd.Wait(); err == nil || cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the process ended with %v, want SIGKILL", err)
	}
}

func TestSignalCases(t *testing.T) {
	cmd, _ := startSleeper(t)
	if err := Signal(cmd.Process.Pid, 0, syscall.SIGTERM); err != nil {
		t.Fatalf("signal with an unknown start time: %v", err)
	}
	if err := cmd.Wait(); err == nil || cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("the process ended with %v, want SIGTERM", err)
	}
	// Reaped: the PID names nothing (until reused, which the start time guards).
	if err := Signal(cmd.Process.Pid, 0, syscall.SIGKILL); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("signal to a reaped process: %v, want ESRCH", err)
	}
	for _, pid := range []int{0, -1} {
		if err := Signal(pid, 0, syscall.SIGKILL); err == nil {
			t.Fatalf("signal to pid %d: no error; a group or broadcast must never be signalled", pid)
		}
	}
}
