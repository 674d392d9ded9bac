package fence

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrNoLibrary is returned when the preload library is not where it was looked for.
var ErrNoLibrary = errors.New("fence library not found")

// LibraryDir is where the library for the tasks that use the fence directory dir is installed:
// a directory of its own beside dir, so that a task can be given the library read-only (a
// tenant that could rewrite it would run its code in every other tenant's processes) and the
// tables, which its processes write, through another mount.
func LibraryDir(dir string) string { return filepath.Clean(dir) + "-lib" }

// ControlDir holds the GPUs' control copies for the fence directory dir: what only the enforcer
// writes (guarantees, limits, token hashes, the budget), which every process reads before the
// fence's rules do. Tasks get it through a read-only mount; control.c names it the same way.
func ControlDir(dir string) string { return filepath.Clean(dir) + "-caps" }

// ControlPath is GPU uuid's control copy.
func ControlPath(dir, uuid string) string { return filepath.Join(ControlDir(dir), uuid+".fence") }

// AccountDir holds the accounting files of the task whose reservation token is token, one per
// GPU (AccountPath), named by the token's SHA-256 so that no token lies where other tasks can
// read it; control.c names it the same way. Only that task's mount may write it.
func AccountDir(dir, token string) string {
	h := tokenHashOf(token)
	return filepath.Join(filepath.Clean(dir), hex.EncodeToString(h[:]))
}

// AccountPath is the accounting file of token's task on GPU uuid.
func AccountPath(dir, token, uuid string) string {
	return filepath.Join(AccountDir(dir, token), uuid+".fence")
}

// LiveRoot holds every task's LiveDir. No task is given it: each gets its own LiveDir alone.
func LiveRoot(dir string) string { return filepath.Clean(dir) + "-live" }

// LiveDir holds the lock files of the task whose reservation token is token (LivePath): the
// bytes its processes lock to say they are alive. They are not in its accounting files because
// every task may open those read-only, and a read-only descriptor may still take read locks:
// a neighbour could lock every free byte and keep the task's processes from attaching. Only
// that task's mount reaches this directory; state.h names it the same way.
func LiveDir(dir, token string) string {
	h := tokenHashOf(token)
	return filepath.Join(LiveRoot(dir), hex.EncodeToString(h[:]))
}

// LivePath is the lock file of token's task on GPU uuid, as placed now. It is named for the
// inode of the accounting file it pairs with (liveName), so it is found through that file: a
// process that opened an earlier placement's accounting file never locks a later one's bytes.
func LivePath(dir, token, uuid string) (string, error) {
	fi, err := os.Stat(AccountPath(dir, token, uuid))
	if err != nil {
		return "", fmt.Errorf("fence: the lock file is named for its accounting file: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", fmt.Errorf("fence: no inode for %s", AccountPath(dir, token, uuid))
	}
	return liveName(dir, token, uuid, st.Ino), nil
}

// liveName is "<uuid>.<inode>.live" in the task's LiveDir, as control.c names it.
func liveName(dir, token, uuid string, ino uint64) string {
	return filepath.Join(LiveDir(dir, token), fmt.Sprintf("%s.%d.live", uuid, ino))
}

// EnforcerDir holds the files whose locks are the enforcer's claim on each GPU: a second
// enforcer is refused. No task is given it, so no task can hold a lock there that refuses the
// next enforcer (the control copies, which every task reads, once held that lock).
func EnforcerDir(dir string) string { return filepath.Clean(dir) + "-enforcer" }

// EnsureDir creates dir. shared makes it traversable by every user (0755), for tasks that
// run as other users than the enforcer (Nomad's exec driver runs them as nobody); the
// accounting files in it are 0666 either way (a task's own mount is what lets it write its
// own), so a private dir (0700) is what keeps other users out.
func EnsureDir(dir string, shared bool) error {
	mode := fs.FileMode(0o700)
	if shared {
		mode = 0o755
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return fmt.Errorf("fence: create directory %s: %w", dir, err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		return fmt.Errorf("fence: set mode of %s: %w", dir, err)
	}
	return nil
}

// FindLibrary returns explicit when set, else the library beside the running executable or in
// ../lib/gpufrac from it (where make build and the release layout put it).
func FindLibrary(explicit string) (string, error) {
	var look []string
	if explicit != "" {
		look = []string{explicit}
	} else if exe, err := os.Executable(); err == nil {
		d := filepath.Dir(exe)
		look = []string{filepath.Join(d, LibraryName), filepath.Join(d, "..", "lib", "gpufrac", LibraryName)}
	}
	for _, p := range look {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return filepath.Abs(p)
		}
	}
	return "", fmt.Errorf("%w: looked at %s (build it with make build, or set its path)", ErrNoLibrary, strings.Join(look, ", "))
}

// InstallLibrary copies the library into dir (LibraryDir of the fence directory) and returns
// its path there, read-only to everyone. The copy is renamed into place: a library that running
// tasks have mapped is never rewritten under them.
func InstallLibrary(src, dir string) (string, error) {
	want, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("fence: read library: %w", err)
	}
	dst := filepath.Join(dir, LibraryName)
	if have, err := os.ReadFile(dst); err == nil && bytes.Equal(have, want) {
		return dst, nil
	}
	tmp, err := os.CreateTemp(dir, LibraryName+".new.*")
	if err != nil {
		return "", fmt.Errorf("fence: install library: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(want); err != nil {
		tmp.Close()
		return "", fmt.Errorf("fence: install library: %w", err)
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return "", fmt.Errorf("fence: install library: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("fence: install library: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("fence: install library: %w", err)
	}
	return dst, nil
}

// Mount is a host path a task is given at the same path inside it.
type Mount struct {
	Path     string
	ReadOnly bool
}

// TaskMounts is every path a task under the fence directory dir needs, and whether it may write
// there: the one place that decides (docs/enforcement.md, "Threat model"). The fence directory,
// where every task's accounting files lie, read-only: a task reads the others' to borrow and may
// write none of them; on top of it, writable, the accounting directory of the task's own
// reservation (token; "" for none: nothing writable), and its own lock directory (LiveDir),
// nothing else of LiveRoot. The control copies, which only the enforcer writes, and the library
// (at library, empty for none), which every task's processes run, read-only. Never EnforcerDir.
// Separate mounts at the paths the environment names, parents before what lies in them;
// raw_exec tasks and gpufrac run's jobs see the host's paths anyway.
func TaskMounts(dir, library, token string) []Mount {
	dir = filepath.Clean(dir)
	m := []Mount{{Path: dir, ReadOnly: true}}
	if token != "" {
		m = append(m, Mount{Path: AccountDir(dir, token)}, Mount{Path: LiveDir(dir, token)})
	}
	m = append(m, Mount{Path: ControlDir(dir), ReadOnly: true})
	if library != "" {
		m = append(m, Mount{Path: filepath.Dir(library), ReadOnly: true})
	}
	return m
}

// tokenHashOf is SHA-256, as the C side hashes tokens (TestTokenHashIsSHA256 holds them equal).
func tokenHashOf(token string) [sha256.Size]byte { return sha256.Sum256([]byte(token)) }
