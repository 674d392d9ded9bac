package enforcer

import (
	"github.com/gpufrac/gpufrac/attribution"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/taskenv"
)

// EnvTemplate is the template name gpufrac run gives its jobs; the watchdog reads it back.
const EnvTemplate = taskenv.Template

// viaEnviron is ProcUsage.Via of a process tied by the token in its own environment.
const viaEnviron = attribution.ViaEnviron

// procCache is the watchdog's attributor: every decision about a process is attribution's, and
// the enforcer reads the facts it acts on (a task's names, an MPS client's pipe and pinned limit,
// the MPS server) from the same cached reading.
type procCache struct {
	*attribution.Attributor
	src ProcSource
}

func newProcCache(src ProcSource) *procCache {
	return &procCache{Attributor: attribution.New(src), src: src}
}

// identity is what the enforcer uses of one process's attribution.Identity.
type identity struct {
	start     uint64
	task      ledger.Task
	argv      []string
	pipeDir   string
	mpsLimit  string
	mpsServer bool
	toks      []string
}

func (id identity) tokens() []string { return id.toks }

func (c *procCache) newPass() { c.NewPass() }

func (c *procCache) prune(live map[int]bool) { c.Prune(live) }

// get returns pid's identity; err only when the process is gone or its stat is unreadable.
func (c *procCache) get(pid int) (identity, error) {
	id, err := c.Identity(pid)
	if err != nil {
		return identity{}, err
	}
	return identity{start: id.Start, task: id.Task, argv: id.Argv, pipeDir: id.PipeDir, mpsLimit: id.MPSLimit,
		mpsServer: id.MPSServer, toks: id.Tokens()}, nil
}

// attribute ties a GPU process on GPU gpuUUID to one of the reservations res: its token, how it
// was tied (ProcUsage.Via), and a note when it is unmanaged and there is a reason to give.
func (c *procCache) attribute(pid int, gpuUUID string, res map[string]ledger.Reservation) (token, via, note string) {
	rs := make([]ledger.Reservation, 0, len(res))
	for _, r := range res {
		rs = append(rs, r)
	}
	o := c.Attribute(pid, gpuUUID, attribution.Reserved(rs))
	return o.Token, o.Via, o.Note
}
