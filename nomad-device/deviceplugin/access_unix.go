//go:build unix

package deviceplugin

import "syscall"

// canWrite asks the kernel whether this process may create entries in dir: permissions, ACLs
// and a read-only mount all count.
func canWrite(dir string) error {
	const wOK, xOK = 2, 1
	return syscall.Access(dir, wOK|xOK)
}
