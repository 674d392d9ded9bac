package simjob

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// MPS faults, simulated. On the H200 a neighbour of a busy MPS client that was stopped (even by
// SIGINT) failed with cudaErrorIllegalAddress while another neighbour lived
// (docs/benchmarks.md). The simulated backend has no MPS server to fault, so simjob models the
// two halves of that observation itself:
//
//   - every simulated MPS client (a job with a pinned limit in its environment) that is stopped
//     by SIGINT or SIGTERM leaves a note in <dir>/<gpu>/mps-fault: "the server saw a client
//     stopped at this time" (a SIGKILL cannot be caught, so a forced stop is not modelled);
//   - a client started with --mps-fault is one that faults: when such a note appears after it
//     started, naming another process, it exits 1 with CUDA's illegal-address message. Clients
//     without the flag are unharmed, like the neighbour that lived.

// MPSFaultFile is the note's name inside a simulated GPU's directory.
const MPSFaultFile = "mps-fault"

// IllegalAddress is the start of the message a faulted client prints, as CUDA runtime errors read.
const IllegalAddress = "CUDA error: an illegal memory access was encountered (cudaErrorIllegalAddress)"

type mpsFault struct {
	at  time.Time
	pid int
	sig string
}

func faultPath(dir, uuid string) string { return filepath.Join(dir, uuid, MPSFaultFile) }

// noteStopped records that MPS client pid was stopped by sig.
func noteStopped(dir, uuid string, pid int, sig os.Signal) error {
	path := faultPath(dir, uuid)
	tmp := fmt.Sprintf("%s.%d.tmp", path, pid)
	line := fmt.Sprintf("%d %d %s\n", time.Now().UnixNano(), pid, strings.ReplaceAll(sig.String(), " ", "-"))
	if err := os.WriteFile(tmp, []byte(line), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readFault reads the note; ok is false when there is none (or it cannot be read yet).
func readFault(dir, uuid string) (mpsFault, bool) {
	data, err := os.ReadFile(faultPath(dir, uuid))
	if err != nil {
		return mpsFault{}, false
	}
	f := strings.Fields(string(data))
	if len(f) != 3 {
		return mpsFault{}, false
	}
	ns, err1 := strconv.ParseInt(f[0], 10, 64)
	pid, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return mpsFault{}, false
	}
	return mpsFault{at: time.Unix(0, ns), pid: pid, sig: f[2]}, true
}

// faulted says whether this --mps-fault client has been hit: a note newer than its start that
// names neither it nor one of its own processes.
func (j *job) faulted(start time.Time) (mpsFault, bool) {
	if !j.c.mpsFault || !j.limited {
		return mpsFault{}, false
	}
	f, ok := readFault(j.c.dir, j.c.gpu)
	if !ok || !f.at.After(start) || f.pid == j.pid {
		return mpsFault{}, false
	}
	for _, c := range j.children {
		if c.Process != nil && c.Process.Pid == f.pid {
			return mpsFault{}, false
		}
	}
	return f, true
}
