//go:build !linux

package probe

import "syscall"

// diesWithParent has no portable equivalent outside Linux: a job there outlives a runner killed
// outright, and its reservation ends by the ledger's grace.
func diesWithParent(*syscall.SysProcAttr) {}
