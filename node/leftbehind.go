package node

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/gpufrac/gpufrac/attribution"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/procfs"
)

// StopLeftBehind stops the processes that the jobs of gone, reservations released because their
// gpufrac run or probe is gone, left running. The parent-death signal ends a job's first
// process with its run, but not what that process started (a shell's child, a launcher's
// workers): those ran on with their GPU memory, no watchdog and, once the reservation was
// released, no room of their own. Each carries its reservation's token in its environment,
// which names it for certain (a token is 128 random bits); it is SIGKILLed with its process
// group, the job's, as the parent-death signal does to the first process. It returns the PIDs
// it stopped, by token.
func StopLeftBehind(gone []ledger.Reservation) map[string][]int {
	return stopLeftBehind(procfs.Linux(""), gone, killGroup)
}

func stopLeftBehind(src procfs.Source, gone []ledger.Reservation, kill func(id attribution.Identity)) map[string][]int {
	if len(gone) == 0 {
		return nil
	}
	pids, err := src.PIDs()
	if err != nil {
		return nil // nothing to read them by: they end when they end, counted as unmanaged use
	}
	a := attribution.New(src)
	stopped := map[string][]int{}
	for _, pid := range pids {
		if pid == os.Getpid() {
			continue
		}
		id, err := a.Identity(pid)
		if err != nil {
			continue // gone meanwhile
		}
		for _, tok := range id.Tokens() {
			if slices.ContainsFunc(gone, func(r ledger.Reservation) bool { return r.Token == tok }) {
				kill(id)
				stopped[tok] = append(stopped[tok], pid)
				break
			}
		}
	}
	return stopped
}

// killGroup SIGKILLs the process id names (never a later one reusing its PID) and its process
// group, never this process's own group.
func killGroup(id attribution.Identity) {
	_ = procfs.Signal(id.PID, id.Start, syscall.SIGKILL)
	if id.PGRP > 1 && id.PGRP != syscall.Getpgrp() {
		_ = syscall.Kill(-id.PGRP, syscall.SIGKILL)
	}
}

// LeftBehindNote says, after the release of a reservation, which processes its job had left
// running and were stopped; empty when none.
func LeftBehindNote(pids []int) string {
	if len(pids) == 0 {
		return ""
	}
	return fmt.Sprintf("; stopped the %d process(es) its job left running without it (pid %s)", len(pids),
		strings.Trim(fmt.Sprint(pids), "[]"))
}
