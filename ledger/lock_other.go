//go:build !unix

package ledger

import (
	"errors"
	"fmt"
	"os"
)

// ErrLocked is wrapped when another process already writes the ledger.
var ErrLocked = errors.New("ledger is locked by another writer")

func lockDir(path string) (*os.File, error) {
	return nil, fmt.Errorf("ledger: lock %s: file locking is only implemented on unix systems", path)
}

func unlockDir(f *os.File) error { return f.Close() }
