//go:build linux

package simjob

import "syscall"

// childAttr makes extra processes die with their parent, as the workers of a crashed CUDA job do,
// so a SIGKILLed job leaves no orphan holding simulated memory.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
