package gpu

// ProcPath lets the external tests check that a dead process's entry is removed from disk, not
// only left out of Processes.
var ProcPath = (*Simulated).procPath
