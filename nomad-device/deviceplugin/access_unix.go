//go:build unix

package deviceplugin

import "golang.org/x/sys/unix"

// canWrite asks the kernel whether this process may create entries in dir: permissions, ACLs
// and a read-only mount all count. It asks for the effective user, the one that will write
// (access(2) asks for the real one, which differs in a plugin started setuid or by a wrapper
// that changed only its effective ID).
func canWrite(dir string) error {
	return unix.Faccessat(unix.AT_FDCWD, dir, unix.W_OK|unix.X_OK, unix.AT_EACCESS)
}
