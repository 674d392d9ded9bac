//go:build !linux

package simjob

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
