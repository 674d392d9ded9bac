package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// Admission refusals that are not the ledger's, matched with errors.Is.
var (
	// ErrBorrowed: tasks borrowing past their guarantees hold the memory the cap stands for
	// (the ledger counted it, or the fence's table had no room for the guarantee).
	ErrBorrowed = errors.New("memory held by borrowing tasks")
	// ErrUnavailable: the GPU is not fully managed now: it could not be readied for its mode
	// (the MPS control daemon), so no cap could be enforced.
	ErrUnavailable = errors.New("GPU not fully managed")
	// ErrFence: the fence's table could not take the task's cap (with ErrBorrowed when it had
	// no room for it).
	ErrFence = errors.New("the allocation fence could not take the task's cap")
)

// Enforcer is what admission needs of the enforcer (*enforcer.Enforcer); tests fake it.
type Enforcer interface {
	PrepareGPU(ctx context.Context, uuid string) error
	EnvOptions(uuid string) enforcer.EnvOptions
	SyncFence(st ledger.GPUState) error
	SyncFenceOr(st ledger.GPUState, undo func(error) error) error
	FenceUse(uuid string) (size.Bytes, bool)
	FenceWaiters(uuid string) (waiting, staged []string)
	Fenced() bool
}

// Config is how a node admits.
type Config struct {
	Logger hclog.Logger
	// Borrow is the borrowing rule PlanBorrowing decided (BorrowOff, BorrowNow, BorrowWait,
	// BorrowLend); "" = off.
	Borrow string
	// BorrowMPS lets tasks on mps-mode GPUs borrow too (Borrowing.MPS: asked for by name).
	BorrowMPS bool
	// NoMPSDaemon readies no MPS daemon: simulated GPUs, whose jobs apply the pinned limit from
	// their environment themselves, as MPS clients do.
	NoMPSDaemon bool
	// ReadyAtOpen: the GPUs were readied once, by Prepare, when the node opened (gpufrac run,
	// whose GPUs keep their mode for the run, and whose enforcer's health check marks a GPU whose
	// daemon died): admission does not ready them again. The plugin's GPUs change mode with
	// policies, so each admission readies its GPU.
	ReadyAtOpen bool
	// DockerRuntime adds NVIDIA_VISIBLE_DEVICES to tasks' environments (the plugin's docker_runtime).
	DockerRuntime bool
	// OnPrepared hears, for each admission on an mps-mode GPU, whether its daemon could be
	// readied (the plugin shows the GPU's free units unhealthy while it cannot).
	OnPrepared func(uuid string, err error)
}

// Node admits tasks onto one machine's GPUs. Its methods are safe for concurrent use as far as
// the ledger's and the enforcer's are.
type Node struct {
	nodeRun
	cfg Config
	log hclog.Logger
	led *ledger.Ledger
	enf Enforcer // nil: nothing is capped (the benchmark's arms without caps)
}

// New joins an open ledger and an enforcer (nil: none) into a node. It owns neither: Close
// leaves them open.
func New(led *ledger.Ledger, enf Enforcer, cfg Config) *Node {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Borrow == "" {
		cfg.Borrow = BorrowOff
	}
	return &Node{cfg: cfg, log: cfg.Logger.Named("node"), led: led, enf: enf}
}

// Ledger is the node's ledger.
func (n *Node) Ledger() *ledger.Ledger { return n.led }

// Enforcer is the enforcer Open built, or nil.
func (n *Node) Enforcer() *enforcer.Enforcer { return n.own }

// Borrows says whether tasks on this node may borrow past their caps.
func (n *Node) Borrows() bool { return n.cfg.Borrow != BorrowOff && n.fenced() }

func (n *Node) fenced() bool { return n.enf != nil && n.enf.Fenced() }

// Fenced says whether the allocation fence holds tasks' allocations here: what staging needs.
func (n *Node) Fenced() bool { return n.fenced() }

// Request is one task to admit: Nomad's instance IDs, or a cap in bytes on a GPU.
type Request struct {
	// IDs are the instance IDs Nomad's scheduler assigned (the plugin); else GPU and Cap.
	IDs []string
	GPU string
	Cap size.Bytes
	// Task names the task in the ledger.
	Task ledger.Task
	// Borrow lets the task borrow past its cap where the node's rule and the GPU allow.
	Borrow bool
	// Alone: the task has the GPU to itself (a probe): no daemon is readied and its
	// environment has no MPS client settings.
	Alone bool
	// Unfenced leaves the fence out of the environment (an attempt that holds no cap).
	Unfenced bool
	// Stage, above Cap, starts the task staged (ledger.WithStage): it holds Cap until Grant
	// raises it to Stage. Only where the fence holds its allocations: elsewhere nothing would.
	Stage size.Bytes
	// EnvLater leaves Admission.Env, Mounts and GPU empty: the caller builds the environment
	// when the task starts (Env), as gpufrac run does for the attempts a round admits.
	EnvLater bool
}

// Mount is a host directory a task needs at the same path.
type Mount struct {
	TaskPath, HostPath string
	ReadOnly           bool
}

// Admission is an admitted task: its reservation, its GPU's state with it, and what the task
// needs.
type Admission struct {
	Reservation ledger.Reservation
	GPU         ledger.GPUState
	Env         map[string]string
	Mounts      []Mount
}

// Admit is the one admission transaction of both front ends: what borrowers hold is brought up
// to date in the ledger, the ledger reserves (with the GPU's budget as the limit where the task
// may borrow), the GPU is readied for its mode and the fence's table takes the task's cap, and
// the environment is built. A step that fails gives the reservation back: nothing stays
// admitted, and the error says which step (ledger.ErrDenied, ErrBorrowed, ErrUnavailable, or the
// fence's).
func (n *Node) Admit(ctx context.Context, req Request) (Admission, error) {
	uuid := req.GPU
	if len(req.IDs) > 0 {
		uuid, _, _ = ledger.ParseInstanceID(req.IDs[0]) // a malformed ID: the ledger names it
	}
	n.RefreshBorrowing(uuid)
	opts := n.limit(uuid, req.Borrow)
	if req.Stage > 0 {
		if !n.fenced() {
			return Admission{}, fmt.Errorf("%w: staging a task needs the allocation fence, which is off", ErrUnavailable)
		}
		opts = append(opts, ledger.WithStage(req.Stage))
	}
	var res ledger.Reservation
	var err error
	if len(req.IDs) > 0 {
		res, err = n.led.ReserveIDs(req.IDs, req.Task, opts...)
	} else {
		res, err = n.led.ReserveBytes(req.GPU, req.Cap, req.Task, opts...)
	}
	if err != nil {
		var d *ledger.DeniedError
		if errors.As(err, &d) && d.Reason == ledger.ReasonBorrowed {
			err = fmt.Errorf("%w: %w", ErrBorrowed, err)
		}
		return Admission{}, err
	}
	if n.enf == nil && req.EnvLater {
		return Admission{Reservation: res}, nil // nothing to ready, no table to write
	}
	st, err := n.led.State(res.GPU)
	if err != nil {
		return Admission{}, n.undo(res, fmt.Errorf("reservation on GPU %s: %w", res.GPU, err))
	}
	if !req.Alone && !n.cfg.ReadyAtOpen {
		if err := n.prepare(ctx, res.GPU); err != nil {
			return Admission{}, n.undo(res, err)
		}
	}
	if n.enf != nil {
		// The task's first allocation must find its cap in the fence's table. Where the table
		// cannot take it, the reservation is given back before any other write of the table:
		// the watchdog's, between the two, would place the guarantee of a task that never
		// starts, against which borrowers are refused until its next pass.
		release := func(why error) error {
			return n.led.Release(res.Token, "admission failed: "+fenceRefused(why).Error())
		}
		if err := n.enf.SyncFenceOr(st, release); err != nil {
			return Admission{}, fenceRefused(err)
		}
	}
	a := Admission{Reservation: res}
	if !req.EnvLater {
		a.GPU = st
		a.Env, a.Mounts = n.task(res, st, req)
	}
	return a, nil
}

// fenceRefused is the fence's table's refusal of a cap, as admission and grants report it.
func fenceRefused(err error) error {
	if errors.Is(err, fence.ErrNoRoom) {
		// Borrowers took the memory since the ledger last heard: it comes back when they give
		// it back.
		err = fmt.Errorf("%w: %w", ErrBorrowed, err)
	}
	return fmt.Errorf("%w: %w", ErrFence, err)
}

// limit is the reservation option that lets a task borrow: up to the GPU's budget, where the
// rule is on, the fence holds caps and the GPU is isolated, or in mps mode where borrowing there
// was asked for (a client's pinned limit is fixed when it starts: it is then the budget).
func (n *Node) limit(uuid string, borrow bool) []ledger.ReserveOption {
	if !borrow || !n.Borrows() {
		return nil
	}
	st, err := n.led.State(uuid)
	if err != nil || (st.Mode != policy.ModeIsolated && !(st.Mode == policy.ModeMPS && n.cfg.BorrowMPS)) {
		return nil
	}
	return []ledger.ReserveOption{ledger.WithLimit(st.BudgetBytes)}
}

// RefreshBorrowing brings the ledger's record of what borrowers hold on GPU uuid ("" = every
// GPU) up to date from the fence's table: the watchdog does on every pass, admission once more
// before it decides.
func (n *Node) RefreshBorrowing(uuid string) {
	if !n.fenced() {
		return
	}
	gpus := []string{uuid}
	if uuid == "" {
		gpus = gpus[:0]
		for _, st := range n.led.States() {
			gpus = append(gpus, st.UUID)
		}
	}
	for _, g := range gpus {
		b, waiting := n.enf.FenceUse(g)
		if err := n.led.SetBorrowed(g, b, waiting); err != nil && !errors.Is(err, ledger.ErrUnknownGPU) {
			n.log.Warn("cannot record what borrowers hold", "gpu", g, "error", err)
		}
	}
}

// prepare readies a GPU for its mode: under mps its control daemon runs.
func (n *Node) prepare(ctx context.Context, uuid string) error {
	if n.enf == nil {
		return nil
	}
	st, err := n.led.State(uuid)
	if err != nil {
		return err
	}
	if st.Mode != policy.ModeMPS || n.cfg.NoMPSDaemon {
		return nil
	}
	err = n.enf.PrepareGPU(ctx, uuid)
	if n.cfg.OnPrepared != nil {
		n.cfg.OnPrepared(uuid, err)
	}
	if err != nil {
		return fmt.Errorf("preparing GPU %s (%s mode) for the task: %w: %w", uuid, st.Mode, ErrUnavailable, err)
	}
	return nil
}

// undo gives back a reservation whose task cannot start, so its units return to the pool.
func (n *Node) undo(res ledger.Reservation, err error) error {
	if rerr := n.led.Release(res.Token, "admission failed: "+err.Error()); rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// Release ends a reservation and writes its GPU's fence table at once, so a borrower waiting
// for memory gets the guarantee that ended now, not at the watchdog's next pass.
func (n *Node) Release(token, reason string) error {
	res, ok := n.led.Reservation(token)
	if err := n.led.Release(token, reason); err != nil {
		return err
	}
	if ok {
		// The watchdog's next pass writes it too, should this fail.
		_ = n.SyncFence(res.GPU)
	}
	return nil
}

// SyncFence writes a GPU's fence table from the ledger now (a lowered cap, an ended task).
func (n *Node) SyncFence(uuid string) error {
	if n.enf == nil {
		return nil
	}
	st, err := n.led.State(uuid)
	if err != nil {
		return err
	}
	return n.enf.SyncFence(st)
}

// task is a task's environment and mounts: enforcer.TaskEnv with the node's options, and the
// MPS pipe (mps mode) and what the fence decides a task needs (fence.TaskMounts) at the paths
// the environment names.
func (n *Node) task(res ledger.Reservation, st ledger.GPUState, req Request) (map[string]string, []Mount) {
	var o enforcer.EnvOptions
	if n.enf != nil {
		o = n.enf.EnvOptions(st.UUID)
	}
	if req.Unfenced {
		o.FenceDir, o.FenceLibrary = "", ""
	}
	if req.Alone {
		st.Mode = policy.ModeIsolated
	}
	o.DockerRuntime = n.cfg.DockerRuntime
	var m []Mount
	if st.Mode == policy.ModeMPS && o.MPSPipeDir != "" {
		m = append(m, Mount{TaskPath: o.MPSPipeDir, HostPath: o.MPSPipeDir})
	}
	if o.FenceDir != "" {
		for _, f := range fence.TaskMounts(o.FenceDir, o.FenceLibrary, res.Token) {
			m = append(m, Mount{TaskPath: f.Path, HostPath: f.Path, ReadOnly: f.ReadOnly})
		}
	}
	return enforcer.TaskEnv(res, st, o), m
}

// Env is the environment of a task holding res now (its GPU's state read from the ledger):
// what `gpufrac run` hands an attempt at its start. unfenced leaves the fence out.
func (n *Node) Env(res ledger.Reservation, unfenced bool) (map[string]string, error) {
	st, err := n.led.State(res.GPU)
	env, _ := n.task(res, st, Request{Unfenced: unfenced})
	return env, err
}
