//go:build linux

package gpu

import (
	"errors"
	"io/fs"

	"github.com/gpufrac/gpufrac/procfs"
)

var hostProcs = procfs.Linux("")

// readProcStat reads the process through procfs. A zombie counts as dead: a killed child whose
// parent has not reaped it yet holds no GPU memory, and tests kill children before waiting for
// them.
func readProcStat(pid int) (procStat, error) {
	st, err := hostProcs.Stat(pid)
	if errors.Is(err, fs.ErrNotExist) {
		return procStat{}, nil
	}
	if err != nil {
		return procStat{}, err
	}
	if st.Dead() {
		return procStat{}, nil
	}
	return procStat{alive: true, start: st.StartTicks}, nil
}
