package enforcer

import (
	"fmt"
	"slices"
)

// Holders lists the live processes that carry token, read from the process table now rather
// than from the last token scan: the plugin asks before it ends a reservation whose instance IDs
// a new Reserve names, and a scan up to ScanInterval old could still list a task that has exited.
func (e *Enforcer) Holders(token string) ([]int, error) {
	pids, err := e.cfg.Procs.PIDs()
	if err != nil {
		return nil, fmt.Errorf("enforcer: listing processes: %w", err)
	}
	var out []int
	for _, pid := range pids {
		id, err := e.procs.Fresh(pid) // not this pass's read: it may predate the task's exec
		if err != nil {
			continue // exited while we looked, or not readable: it cannot be shown to hold it
		}
		if slices.Contains(id.Tokens(), token) {
			out = append(out, pid)
		}
	}
	return out, nil
}
