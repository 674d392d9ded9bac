package attribution

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/procfs"
	"github.com/gpufrac/gpufrac/taskenv"
)

// Environment names a process is read for: the task environment's (taskenv, which
// enforcer.TaskEnv writes) and Nomad's.
const (
	EnvNomadAlloc = "NOMAD_ALLOC_ID"
	EnvNomadJob   = "NOMAD_JOB_NAME"
	EnvNomadTask  = "NOMAD_TASK_NAME"
	EnvNomadNS    = "NOMAD_NAMESPACE"
)

// mpsServerName is the MPS server's executable; it holds a little GPU memory of its own and is
// never a task nor unmanaged use.
const mpsServerName = "nvidia-cuda-mps-server"

// maxAncestors bounds the walk up the process tree (and any cycle a bad Source could show).
const maxAncestors = 32

var allocIDRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// Identity is what one process says about its task. Environ and cgroup are read once per
// process (the initial environment never changes) and cached under the PID and start time.
type Identity struct {
	PID   int
	Start uint64
	PPID  int
	PGRP  int
	// Token is GPUFRAC_RESERVATION; GPUTokens are the values of GPUFRAC_RESERVATION_<uuid>, one
	// per GPU the task holds.
	Token     string
	GPUTokens []string
	// Task is the task's names as its environment carries them (Nomad's, GPUFRAC_TEMPLATE).
	Task ledger.Task
	// AllocID is the Nomad allocation ID found in the cgroup, Cgroup the cgroup file.
	AllocID  string
	Cgroup   string
	Argv     []string
	PipeDir  string // CUDA_MPS_PIPE_DIRECTORY
	MPSLimit string // CUDA_MPS_PINNED_DEVICE_MEM_LIMIT as set
	// EnvErr is why the environment could not be read (another user's process, without root).
	EnvErr    error
	MPSServer bool

	// ancestors are the process's ancestors, nearest first, read once: environs never change,
	// and a process reparented after its parent died still belongs to that task.
	ancestors []ancestor
	walked    bool
}

type ancestor struct {
	pid    int
	tokens []string
}

// Tokens are the reservation tokens the process carries, GPUFRAC_RESERVATION first.
func (id Identity) Tokens() []string {
	var out []string
	if id.Token != "" {
		out = append(out, id.Token)
	}
	for _, t := range id.GPUTokens {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// Attributor reads processes through a procfs.Source and says which task each belongs to. Safe
// for concurrent use.
type Attributor struct {
	src procfs.Source
	mu  sync.Mutex
	m   map[int]Identity
	// pass holds what was read since NewPass: one stat read per process per pass, as stat is
	// what most of a pass costs.
	pass map[int]passEntry
}

type passEntry struct {
	id  Identity
	err error
}

// New reads processes from src.
func New(src procfs.Source) *Attributor {
	return &Attributor{src: src, m: map[int]Identity{}, pass: map[int]passEntry{}}
}

// NewPass forgets the per-pass reads: the next Identity of each process checks its start time
// again. A sampler calls it once per sample.
func (a *Attributor) NewPass() {
	a.mu.Lock()
	clear(a.pass)
	a.mu.Unlock()
}

// Identity is pid's; err only when the process is gone or its stat is unreadable.
func (a *Attributor) Identity(pid int) (Identity, error) {
	a.mu.Lock()
	p, ok := a.pass[pid]
	a.mu.Unlock()
	if ok {
		return p.id, p.err
	}
	id, err := a.read(pid)
	a.mu.Lock()
	a.pass[pid] = passEntry{id, err}
	a.mu.Unlock()
	return id, err
}

// Fresh is pid's identity read now, past this pass's reads (Identity): for a caller outside the
// sampler's passes, which must not take a process read before its exec, in the pass still
// running, for what it is now.
func (a *Attributor) Fresh(pid int) (Identity, error) {
	return a.read(pid)
}

// Prune forgets processes that are no longer alive.
func (a *Attributor) Prune(live map[int]bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for pid := range a.m {
		if !live[pid] {
			delete(a.m, pid)
		}
	}
}

// sameArgv says whether a process still runs the program it was first read with. A process read
// between its fork and its exec carries its parent's environment, without the task's token:
// once it has exec'd (its command line changed) it must be read again, or a task started at the
// moment of a token scan would stay unmanaged for good. Identities with a token stay cached:
// the token cannot have been the parent's.
func (a *Attributor) sameArgv(pid int, argv []string) bool {
	now, err := a.src.Cmdline(pid)
	return err == nil && slices.Equal(now, argv)
}

func (a *Attributor) read(pid int) (Identity, error) {
	st, err := a.src.Stat(pid)
	if err != nil {
		a.mu.Lock()
		delete(a.m, pid)
		a.mu.Unlock()
		return Identity{}, err
	}
	a.mu.Lock()
	id, ok := a.m[pid]
	a.mu.Unlock()
	if ok && id.Start == st.StartTicks && (len(id.Tokens()) > 0 || a.sameArgv(pid, id.Argv)) {
		return id, nil
	}
	id = Identity{PID: pid, Start: st.StartTicks, PPID: st.PPID, PGRP: st.PGRP}
	// The command line is read on both sides of the environment: an exec between the two
	// reads would pair the parent's environment with the new program, which sameArgv would then
	// keep for good. A process that execs again and again is taken as last read.
	argv, argvErr := a.src.Cmdline(pid)
	env, envErr := a.src.Environ(pid)
	for i := 0; argvErr == nil && i < 3; i++ {
		again, err := a.src.Cmdline(pid)
		if err != nil || slices.Equal(again, argv) {
			break
		}
		argv = again
		env, envErr = a.src.Environ(pid)
	}
	if envErr != nil {
		id.EnvErr = envErr
	} else {
		id.readEnv(env)
	}
	if cg, err := a.src.Cgroup(pid); err == nil {
		id.Cgroup = cg
		id.AllocID = allocIDRE.FindString(cg)
	}
	if argvErr == nil {
		id.Argv = argv
		// The server is started by the MPS control daemon, which gpufrac starts without any
		// task's token: a process that carries one is that task's, however it named itself
		// (Split ties the rest first; a server's name kept a task's memory out of every sum).
		id.MPSServer = len(argv) > 0 && filepath.Base(argv[0]) == mpsServerName && len(id.Tokens()) == 0
	}
	a.mu.Lock()
	a.m[pid] = id
	a.mu.Unlock()
	return id, nil
}

func (id *Identity) readEnv(env []string) {
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, taskenv.ReservationPrefix) && v != "" {
			id.GPUTokens = append(id.GPUTokens, v)
			continue
		}
		switch k {
		case taskenv.Reservation:
			id.Token = v
		// The task sets its own environment: its names may be any bytes, and they go into
		// the ledger, the metrics' labels and the stats Nomad reads, which all want text.
		case EnvNomadAlloc:
			id.Task.AllocID = ledger.ValidText(v)
		case EnvNomadJob:
			id.Task.JobName = ledger.ValidText(v)
		case EnvNomadTask:
			id.Task.TaskName = ledger.ValidText(v)
		case EnvNomadNS:
			id.Task.Namespace = ledger.ValidText(v)
		case taskenv.Template:
			id.Task.Template = ledger.ValidText(v)
		case taskenv.MPSPipeDir:
			id.PipeDir = v
		case taskenv.MPSMemLimit:
			id.MPSLimit = v
		}
	}
}

// lineage is id's ancestors, nearest first, read at the first need and kept with the identity.
func (a *Attributor) lineage(id Identity) []ancestor {
	if id.walked {
		return id.ancestors
	}
	var up []ancestor
	cur := id
	for range maxAncestors {
		if cur.PPID <= 1 {
			break
		}
		p, err := a.Identity(cur.PPID)
		// The parent is the one cur was first read with; a process that started after cur
		// took its PID since, and may be any task's.
		if err != nil || p.Start > cur.Start {
			break
		}
		up = append(up, ancestor{pid: p.PID, tokens: p.Tokens()})
		cur = p
	}
	id.ancestors, id.walked = up, true
	a.mu.Lock()
	if cur, ok := a.m[id.PID]; ok && cur.Start == id.Start {
		a.m[id.PID] = id
	}
	if p, ok := a.pass[id.PID]; ok && p.err == nil && p.id.Start == id.Start {
		a.pass[id.PID] = passEntry{id: id}
	}
	a.mu.Unlock()
	return up
}
