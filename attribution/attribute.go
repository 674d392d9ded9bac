package attribution

import (
	"strings"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/size"
)

// How a process was tied to its task (Proc.Via).
const (
	ViaRoot    = "root"    // the task's root process
	ViaEnviron = "environ" // a token in its own environment
	ViaCgroup  = "cgroup"  // the Nomad allocation ID in its cgroup
	ViaGroup   = "group"   // the process group its task's root leads
	ViaParent  = "parent"  // its nearest ancestor that is a root or carries a token
)

// Task is one live task that GPU processes may belong to.
type Task struct {
	// Token is the task's reservation token; it names the task in a Sample. "" only for a task
	// known by its root alone (a job probed without a reservation).
	Token string
	// GPU is the UUID of the GPU the reservation is on; "" matches every GPU.
	GPU string
	// AllocID and TaskName are the task's Nomad allocation and task, for the cgroup rule.
	AllocID, TaskName string
	// Root is the PID of the task's first process, leader of its own process group; 0 when not
	// known (a Nomad task: the plugin never sees its processes start).
	Root int
}

// Tasks are the live tasks of one sample, looked up by token and by root.
type Tasks struct {
	byToken map[string]Task
	byRoot  map[int]Task
}

// NewTasks indexes ts. A later task of the same token replaces an earlier one.
func NewTasks(ts ...Task) Tasks {
	t := Tasks{byToken: make(map[string]Task, len(ts)), byRoot: map[int]Task{}}
	for _, x := range ts {
		t.byToken[x.Token] = x
		if x.Root > 0 {
			t.byRoot[x.Root] = x
		}
	}
	return t
}

// Reserved are the tasks of a GPU's reservations, as the ledger records them.
func Reserved(rs []ledger.Reservation) Tasks {
	ts := make([]Task, 0, len(rs))
	for _, r := range rs {
		ts = append(ts, Task{Token: r.Token, GPU: r.GPU, AllocID: r.Task.AllocID, TaskName: r.Task.TaskName})
	}
	return NewTasks(ts...)
}

func (t Task) on(gpuUUID string) bool { return t.GPU == "" || t.GPU == gpuUUID }

// token is the task carrying tok on gpuUUID.
func (ts Tasks) token(tok, gpuUUID string) (Task, bool) {
	if tok == "" {
		return Task{}, false
	}
	t, ok := ts.byToken[tok]
	return t, ok && t.on(gpuUUID)
}

func (ts Tasks) root(pid int, gpuUUID string) (Task, bool) {
	t, ok := ts.byRoot[pid]
	return t, ok && t.on(gpuUUID)
}

// Owner is the answer for one process: its task's token and how it was tied (Via), or Via ""
// when unmanaged, with a Note saying why when there is a reason to give.
type Owner struct {
	Token, Via, Note string
}

// Managed says whether the process belongs to a task.
func (o Owner) Managed() bool { return o.Via != "" }

// Attribute ties process pid, on GPU gpuUUID, to one of ts by the rules in the package comment.
// A process that cannot be read (it has ended since the GPU listed it) is no task's: the
// watchdog must never signal a PID it cannot tie to a live process, which may be another's by now.
func (a *Attributor) Attribute(pid int, gpuUUID string, ts Tasks) Owner {
	if t, ok := ts.root(pid, gpuUUID); ok {
		return Owner{Token: t.Token, Via: ViaRoot}
	}
	id, err := a.Identity(pid)
	if err != nil {
		return Owner{Note: "process vanished"}
	}
	return a.owner(id, gpuUUID, ts)
}

// owner applies the rules to a process that is alive, its root excepted.
func (a *Attributor) owner(id Identity, gpuUUID string, ts Tasks) Owner {
	var note string
	if t, ok := ts.byToken[id.Token]; ok && id.Token != "" {
		if t.on(gpuUUID) {
			return Owner{Token: id.Token, Via: ViaEnviron}
		}
		note = "token of a reservation on GPU " + t.GPU
	} else if id.Token != "" {
		note = "token " + ledger.RedactToken(id.Token) + " matches no reservation"
	}
	// A task of several device requests carries the last one's GPUFRAC_RESERVATION; its
	// reservation on this GPU is in a per-GPU key.
	for _, tok := range id.GPUTokens {
		if _, ok := ts.token(tok, gpuUUID); ok {
			return Owner{Token: tok, Via: ViaEnviron}
		}
	}
	if id.AllocID != "" {
		if tok, ok := a.byAlloc(id, gpuUUID, ts); ok {
			return Owner{Token: tok, Via: ViaCgroup}
		}
	}
	if t, ok := ts.root(id.PGRP, gpuUUID); ok {
		return Owner{Token: t.Token, Via: ViaGroup}
	}
	for _, up := range a.lineage(id) {
		if t, ok := ts.root(up.pid, gpuUUID); ok {
			return Owner{Token: t.Token, Via: ViaParent}
		}
		for _, tok := range up.tokens {
			if _, ok := ts.token(tok, gpuUUID); ok {
				return Owner{Token: tok, Via: ViaParent}
			}
		}
	}
	if note == "" && id.EnvErr != nil {
		note = "environ unreadable: " + id.EnvErr.Error()
	}
	return Owner{Note: note}
}

// byAlloc finds the one task on this GPU of the process's Nomad allocation. With several tasks
// of one allocation on the GPU, the task name in the cgroup path decides. A task may create
// cgroups below its own and name them as it likes, and the allocation a reservation is known by
// comes from its processes' environments, which they write: so a task is a candidate only where
// a process that carries its token lives at or above the process's cgroup (carriedAbove), and
// no name a tenant chose ties its process to a neighbour.
func (a *Attributor) byAlloc(id Identity, gpuUUID string, ts Tasks) (string, bool) {
	var cands []Task
	for _, t := range ts.byToken {
		if t.on(gpuUUID) && t.AllocID == id.AllocID && a.carriedAbove(t.Token, id.Cgroup) {
			cands = append(cands, t)
		}
	}
	if len(cands) == 1 {
		return cands[0].Token, true
	}
	var named []string
	for _, t := range cands {
		if t.TaskName != "" && strings.Contains(id.Cgroup, id.AllocID+"."+t.TaskName) {
			named = append(named, t.Token)
		}
	}
	if len(named) == 1 {
		return named[0], true
	}
	return "", false
}

// Proc is one GPU process in a Sample.
type Proc struct {
	PID   int
	Bytes size.Bytes
	// Token is the task the process counts against ("" with Via "" = unmanaged). Secret.
	Token string
	// Via says how it was attributed (ViaEnviron, ...); "" when unmanaged.
	Via string
	// Note says why an unmanaged process is not a task's, when there is a reason to give.
	Note string
	// MPSServer marks the MPS server process, which is neither a task nor unmanaged.
	MPSServer bool
}

// Managed says whether the process counts against a task.
func (p Proc) Managed() bool { return p.Via != "" }

// Sample is one GPU's processes, each with its task.
type Sample struct {
	GPU   string
	Procs []Proc
	// Unmanaged is the memory of the processes no task holds (the MPS server excepted).
	Unmanaged size.Bytes
}

// Use is the memory the processes of the task of token hold; false when none is on the GPU.
func (s Sample) Use(token string) (size.Bytes, bool) {
	var b size.Bytes
	found := false
	for _, p := range s.Procs {
		if p.Managed() && p.Token == token {
			b += p.Bytes
			found = true
		}
	}
	return b, found
}

// ByTask groups the managed processes by their task's token.
func (s Sample) ByTask() map[string][]Proc {
	out := map[string][]Proc{}
	for _, p := range s.Procs {
		if p.Managed() {
			out[p.Token] = append(out[p.Token], p)
		}
	}
	return out
}

// Split attributes each process gpu listed on GPU gpuUUID to one of ts. Call NewPass before it
// for a fresh reading of the process table, and Scan before that when ts may be tied by their
// cgroups (tasks with an AllocID), or a process that only its cgroup ties reads as unmanaged.
func (a *Attributor) Split(gpuUUID string, procs []gpu.Process, ts Tasks) Sample {
	s := Sample{GPU: gpuUUID, Procs: make([]Proc, 0, len(procs))}
	for _, gp := range procs {
		p := Proc{PID: gp.PID, Bytes: gp.UsedBytes}
		// A task names its processes as it likes: one it ties to a task is that task's
		// whatever it is called, and only a process no task claims may be the server.
		o := a.Attribute(gp.PID, gpuUUID, ts)
		p.Token, p.Via, p.Note = o.Token, o.Via, o.Note
		if id, err := a.Identity(gp.PID); !p.Managed() && err == nil && id.MPSServer {
			p.MPSServer, p.Note = true, ""
		} else if !p.Managed() {
			s.Unmanaged += p.Bytes
		}
		s.Procs = append(s.Procs, p)
	}
	return s
}
