//go:build linux

package gpu

import "github.com/gpufrac/gpufrac/procfs"

var hostProcs = procfs.Linux("")

// readProcStat reads the process through procfs. A zombie counts as dead: a killed child whose
// parent has not reaped it yet holds no GPU memory, and tests kill children before waiting for
// them.
func readProcStat(pid int) (procStat, error) {
	st, running, err := procfs.Running(hostProcs, pid)
	if !running {
		return procStat{}, err
	}
	return procStat{alive: true, start: st.StartTicks}, nil
}
