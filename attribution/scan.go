package attribution

// Scan is what a token scan read.
type Scan struct {
	// Live is every process the table listed, for the caller to forget what it keeps of the
	// others.
	Live map[int]bool
	// Carriers are the readable processes that carry each token, in the order the table listed
	// them.
	Carriers map[string][]Identity
}

// Scan is the token scan: it reads every live process in a fresh pass and forgets the ones that
// have gone. The cgroup rule ties a process to a task only through the cgroups of that task's
// token carriers, and a carrier that holds no GPU memory (the launcher of a scrubbed worker)
// is read by nothing but the scan: every reader that attributes as the enforcer does (its
// watchdog, gpufrac status) scans before it calls Split, or a process that only its cgroup ties
// to its task reads as unmanaged. Scan reads the process table and writes nothing else: what a
// carrier means to the ledger is the caller's to record, and a read-only caller records nothing.
func (a *Attributor) Scan() (Scan, error) {
	pids, err := a.src.PIDs()
	if err != nil {
		return Scan{}, err
	}
	a.NewPass()
	s := Scan{Live: make(map[int]bool, len(pids)), Carriers: map[string][]Identity{}}
	for _, pid := range pids {
		s.Live[pid] = true
		id, err := a.Identity(pid)
		if err != nil {
			continue
		}
		for _, tok := range id.Tokens() {
			s.Carriers[tok] = append(s.Carriers[tok], id)
		}
	}
	a.Prune(s.Live)
	return s, nil
}
