package enforcer

import "github.com/gpufrac/gpufrac/procfs"

// ProcSource is the watchdog's view of the host's processes (procfs.Source). PIDs are host PIDs,
// as NVML reports. The plugin needs the host PID namespace and the right to read other users'
// environ (root).
type ProcSource = procfs.Source

// LinuxProcs reads a procfs mounted at root ("" means /proc).
func LinuxProcs(root string) ProcSource { return procfs.Linux(root) }
