package enforcer

import (
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/taskenv"
)

// Environment variables the watchdog reads from a process to learn its task.
const (
	envNomadAlloc = "NOMAD_ALLOC_ID"
	envNomadJob   = "NOMAD_JOB_NAME"
	envNomadTask  = "NOMAD_TASK_NAME"
	EnvTemplate   = taskenv.Template
)

// mpsServerName is the MPS server's executable; it holds a little GPU memory of its own and is
// never a task nor unmanaged use.
const mpsServerName = "nvidia-cuda-mps-server"

// How a process was tied to a reservation.
const (
	viaEnviron = "environ"
	viaCgroup  = "cgroup"
	viaParent  = "parent"
)

// maxAncestors bounds the walk up the process tree (and any cycle a bad ProcSource could show).
const maxAncestors = 32

var allocIDRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// identity is what one process says about its task. Environ and cgroup are read once per process
// (the initial environment never changes) and cached under the PID and start time.
type identity struct {
	start     uint64
	ppid      int
	token     string
	gpuTokens []string // the values of GPUFRAC_RESERVATION_<uuid>: one per GPU the task holds
	task      ledger.Task
	allocID   string
	cgroup    string
	argv      []string
	pipeDir   string
	mpsLimit  string // CUDA_MPS_PINNED_DEVICE_MEM_LIMIT as set
	envErr    error
	mpsServer bool
	// ancestors are the tokens of the process's ancestors, nearest first, read once: environs
	// never change, and a process reparented after its parent died still belongs to that task.
	ancestors []string
	walked    bool
}

type procCache struct {
	src ProcSource
	mu  sync.Mutex
	m   map[int]identity
	// pass holds what was read since newPass: one stat read per process per watchdog pass, as
	// stat is what most of a pass costs.
	pass map[int]passEntry
}

type passEntry struct {
	id  identity
	err error
}

func newProcCache(src ProcSource) *procCache {
	return &procCache{src: src, m: map[int]identity{}, pass: map[int]passEntry{}}
}

// newPass forgets the per-pass reads: the next get of each process checks its start time again.
func (c *procCache) newPass() {
	c.mu.Lock()
	clear(c.pass)
	c.mu.Unlock()
}

// get returns pid's identity; err only when the process is gone or its stat is unreadable.
func (c *procCache) get(pid int) (identity, error) {
	c.mu.Lock()
	p, ok := c.pass[pid]
	c.mu.Unlock()
	if ok {
		return p.id, p.err
	}
	id, err := c.read(pid)
	c.mu.Lock()
	c.pass[pid] = passEntry{id, err}
	c.mu.Unlock()
	return id, err
}

// sameArgv says whether a process still runs the program it was first read with. A process read
// between its fork and its exec carries its parent's environment, without the task's token:
// once it has exec'd (its command line changed) it must be read again, or a task started at the
// moment of a token scan would stay unmanaged for good. Identities with a token stay cached:
// the token cannot have been the parent's.
func (c *procCache) sameArgv(pid int, argv []string) bool {
	now, err := c.src.Cmdline(pid)
	return err == nil && slices.Equal(now, argv)
}

func (c *procCache) read(pid int) (identity, error) {
	st, err := c.src.Stat(pid)
	if err != nil {
		c.mu.Lock()
		delete(c.m, pid)
		c.mu.Unlock()
		return identity{}, err
	}
	c.mu.Lock()
	id, ok := c.m[pid]
	c.mu.Unlock()
	if ok && id.start == st.StartTicks && (len(id.tokens()) > 0 || c.sameArgv(pid, id.argv)) {
		return id, nil
	}
	id = identity{start: st.StartTicks, ppid: st.PPID}
	if env, err := c.src.Environ(pid); err != nil {
		id.envErr = err
	} else {
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			if strings.HasPrefix(k, EnvReservation+"_") && v != "" {
				id.gpuTokens = append(id.gpuTokens, v)
				continue
			}
			switch k {
			case EnvReservation:
				id.token = v
			case envNomadAlloc:
				id.task.AllocID = v
			case envNomadJob:
				id.task.JobName = v
			case envNomadTask:
				id.task.TaskName = v
			case EnvTemplate:
				id.task.Template = v
			case EnvMPSPipeDir:
				id.pipeDir = v
			case EnvMPSMemLimit:
				id.mpsLimit = v
			}
		}
	}
	if cg, err := c.src.Cgroup(pid); err == nil {
		id.cgroup = cg
		id.allocID = allocIDRE.FindString(cg)
	}
	if argv, err := c.src.Cmdline(pid); err == nil {
		id.argv = argv
		id.mpsServer = len(argv) > 0 && filepath.Base(argv[0]) == mpsServerName
	}
	c.mu.Lock()
	c.m[pid] = id
	c.mu.Unlock()
	return id, nil
}

// prune forgets processes that are no longer alive.
func (c *procCache) prune(live map[int]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pid := range c.m {
		if !live[pid] {
			delete(c.m, pid)
		}
	}
}

// attribute ties a GPU process on GPU gpuUUID to a reservation token: through the token in its
// environment, else through a Nomad alloc ID in its cgroup that a sighted task of that GPU carries,
// else through the nearest ancestor that carries a token. via says which; "" with a note when none.
func (c *procCache) attribute(pid int, gpuUUID string, res map[string]ledger.Reservation) (token, via, note string) {
	id, err := c.get(pid)
	if err != nil {
		return "", "", "process vanished"
	}
	if r, ok := res[id.token]; ok && id.token != "" {
		if r.GPU == gpuUUID {
			return id.token, viaEnviron, ""
		}
		note = "token of a reservation on GPU " + r.GPU
	} else if id.token != "" {
		note = "token " + ledger.RedactToken(id.token) + " matches no reservation"
	}
	// A task of several device requests carries the last one's GPUFRAC_RESERVATION; its
	// reservation on this GPU is in a per-GPU key.
	for _, tok := range id.gpuTokens {
		if r, ok := res[tok]; ok && r.GPU == gpuUUID {
			return tok, viaEnviron, ""
		}
	}
	if id.allocID != "" {
		if tok := byAlloc(id, gpuUUID, res); tok != "" {
			return tok, viaCgroup, ""
		}
	}
	if !id.walked {
		id.ancestors, id.walked = c.walk(id), true
		c.mu.Lock()
		if cur, ok := c.m[pid]; ok && cur.start == id.start {
			c.m[pid] = id
		}
		c.mu.Unlock()
	}
	for _, tok := range id.ancestors {
		if r, ok := res[tok]; ok && r.GPU == gpuUUID {
			return tok, viaParent, ""
		}
	}
	if note == "" && id.envErr != nil {
		note = "environ unreadable: " + id.envErr.Error()
	}
	return "", "", note
}

// tokens are the reservation tokens the process carries, GPUFRAC_RESERVATION first.
func (id identity) tokens() []string {
	var out []string
	if id.token != "" {
		out = append(out, id.token)
	}
	for _, t := range id.gpuTokens {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// walk lists the tokens carried by id's ancestors, nearest first.
func (c *procCache) walk(id identity) []string {
	var toks []string
	cur := id
	for range maxAncestors {
		if cur.ppid <= 1 {
			break
		}
		up, err := c.get(cur.ppid)
		if err != nil {
			break
		}
		toks = append(toks, up.tokens()...)
		cur = up
	}
	return toks
}

// byAlloc finds the one reservation on this GPU held by the process's Nomad allocation. With
// several tasks of one allocation on the GPU, the task name in the cgroup path decides.
func byAlloc(id identity, gpuUUID string, res map[string]ledger.Reservation) string {
	var cands []string
	for tok, r := range res {
		if r.GPU == gpuUUID && r.Task.AllocID == id.allocID {
			cands = append(cands, tok)
		}
	}
	if len(cands) == 1 {
		return cands[0]
	}
	var named []string
	for _, tok := range cands {
		if t := res[tok].Task.TaskName; t != "" && strings.Contains(id.cgroup, id.allocID+"."+t) {
			named = append(named, tok)
		}
	}
	if len(named) == 1 {
		return named[0]
	}
	return ""
}
