package enforcer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/size"
)

// FenceConfig turns the allocation fence on (docs/enforcement.md): every task process loads
// libgpufrac-fence.so, which refuses an allocation that would take its task past its cap.
type FenceConfig struct {
	// Dir holds the per-GPU tables; empty = no fence.
	Dir string
	// Library is the built libgpufrac-fence.so, copied into fence.LibraryDir(Dir).
	Library string
	// Shared lets tasks that run as other users than the enforcer reach Dir (Nomad's exec
	// driver runs tasks as nobody); gpufrac run keeps it private to its user.
	Shared bool
	// BorrowWait is how long an allocation of a task with a limit above its cap may wait for
	// borrowable memory to come free; 0 = it fails at once.
	BorrowWait time.Duration
	// LendKeep, when set, lends borrowers the guarantee of a starting task (its first seconds
	// are CPU start-up) but for what it uses and this much, which covers its CUDA contexts and
	// first small blocks, until its use passes this. When it needs what they took, borrowers
	// give it back: the fence refuses them more and the watchdog stops one that holds on
	// (reclaim). 0 = a guarantee is never lent.
	LendKeep size.Bytes
	// LendGrace is how long that task's allocation waits quietly before the reclaim: a borrower
	// that ends within it keeps its run (fence.Task.Grace). 0 = reclaim at once.
	LendGrace time.Duration
	// Context is what a borrower leaves free for each process's CUDA context on top of its
	// task's guarantee (fence.Table.SetContext); New sets the watchdog's allowance, the same
	// per-process memory no fenced call shows.
	Context size.Bytes
}

// BorrowRule is how far past its guarantee (its cap) a task may allocate, where the fence holds
// caps in isolated mode (docs/enforcement.md). The runner and the plugin share the rules.
type BorrowRule string

// Borrowing rules.
const (
	// BorrowOff: a cap is a task's guarantee and the most it may use.
	BorrowOff BorrowRule = "off"
	// BorrowNow: past its cap a task may borrow memory no other task's guarantee covers, up to
	// the GPU's budget; an allocation that finds none free fails inside the task at once.
	BorrowNow BorrowRule = "now"
	// BorrowWait is BorrowNow where that allocation waits (up to FenceConfig.BorrowWait) for
	// memory to come free while no new guarantee is placed on its GPU.
	BorrowWait BorrowRule = "wait"
	// BorrowLend is BorrowWait where a borrower may also use the guarantee of a task that has
	// not allocated yet (its CPU start-up) but for DefaultLendKeep; when that task allocates and
	// borrowers hold what it needs, it waits DefaultLendGrace for them to end on their own, then
	// they give it back (FenceConfig.LendKeep and LendGrace say how).
	BorrowLend BorrowRule = "lend"
)

// borrowRules are the rules there are, in the order a message lists them.
var borrowRules = []BorrowRule{BorrowOff, BorrowNow, BorrowWait, BorrowLend}

// Check is the one check of a borrowing rule: an error names the bad value and the rules.
func (r BorrowRule) Check() error {
	if slices.Contains(borrowRules, r) {
		return nil
	}
	return fmt.Errorf("borrow %q: want %s, %s, %s or %s", string(r), BorrowOff, BorrowNow, BorrowWait, BorrowLend)
}

// DefaultBorrowWait bounds one allocation's wait for borrowable memory. A wait only runs while
// other tasks that could free memory run (otherwise the allocation fails at once), and new
// guarantees on the GPU pause for at most the hold's 30 s at a time, so a long bound holds up
// only the borrower, which would otherwise fail and lose its work: long enough for a wave of
// GPU-busy jobs beside it to end (on the H200's busy queue the leaker waited 105 s for its first
// wave, served only because PyTorch asks again after a refusal; a simulated borrower with 60 s
// failed twice and ran last, 1.254x against 1.390x with 5 min, 2026-12-04), short enough that
// one outlived by long neighbours climbs the ladder within minutes.
const DefaultBorrowWait = 5 * time.Minute

// DefaultLendKeep is what a starting task's guarantee keeps from borrowers beside what it uses:
// the CUDA contexts it makes first, which the fence does not see (the watchdog's per-process
// allowance is the same measure). A task arms, and lends nothing more, once its use passes it:
// the workloads' first block (torch.zeros(1), 2 MiB) comes seconds before their model.
const DefaultLendKeep = DefaultAllowance

// DefaultLendGrace is how long a task's allocation waits for borrowers that hold its lent
// guarantee to end before they must give it back (policy.DefaultHold's Bound, tested equal): the bound of the borrower hold, which is what
// the same task would have waited to be admitted under BorrowWait. A borrower that fills the GPU
// (the benchmark's leaker) loses its whole run to a reclaim, so the owner's bounded wait is the
// cheaper loss.
const DefaultLendGrace = 30 * time.Second

// Borrow sets the fence's side of rule: how long a borrower's allocation waits (wait, 0 =
// DefaultBorrowWait, for BorrowWait and BorrowLend) and what of a starting task's guarantee is
// lent (BorrowLend). Which tasks may borrow is their reservations' limits.
func (c *FenceConfig) Borrow(rule BorrowRule, wait time.Duration) {
	c.BorrowWait, c.LendKeep, c.LendGrace = 0, 0, 0
	if rule != BorrowWait && rule != BorrowLend {
		return
	}
	c.BorrowWait = wait
	if c.BorrowWait <= 0 {
		c.BorrowWait = DefaultBorrowWait
	}
	if rule == BorrowLend {
		c.LendKeep, c.LendGrace = DefaultLendKeep, DefaultLendGrace
	}
}

// FenceMode is how a command asks for the fence.
type FenceMode string

// Fence modes; "" is FenceAuto.
const (
	// FenceAuto fences when it can: simulated GPUs always, real ones when the library is found.
	FenceAuto FenceMode = "auto"
	FenceOn   FenceMode = "on"
	FenceOff  FenceMode = "off"
)

// Check is the one rule for a fence setting: FenceAuto, FenceOn, FenceOff, or "" (auto); an
// error names the bad value.
func (m FenceMode) Check() error {
	switch m {
	case "", FenceAuto, FenceOn, FenceOff:
		return nil
	}
	return fmt.Errorf("fence %q: want %s, %s or %s", string(m), FenceAuto, FenceOn, FenceOff)
}

// ResolveFence turns a command's fence setting (FenceAuto, FenceOn, FenceOff; "" = auto) and
// library path ("" = beside the executable) into a FenceConfig with its tables in dir, and a
// line for the user that says what was decided and why.
func ResolveFence(mode FenceMode, library, dir string, simulated bool) (FenceConfig, string, error) {
	off := func(why string) (FenceConfig, string, error) {
		return FenceConfig{}, "fence: off (" + why + "): the watchdog alone holds the caps", nil
	}
	if err := mode.Check(); err != nil {
		return FenceConfig{}, "", err
	}
	if mode == FenceOff {
		return off("asked for")
	}
	if !fence.Available {
		if mode == FenceOn {
			return FenceConfig{}, "", errors.New("fence: this gpufrac was built without cgo, which the fence needs")
		}
		return off("this gpufrac was built without cgo")
	}
	lib, err := fence.FindLibrary(library)
	if err != nil && simulated && library == "" {
		// Simulated jobs make no driver calls: they charge the tables themselves. Where the
		// library is there they get LD_PRELOAD too, as on a real node, so the demo and the
		// tests run every task process under it.
		return FenceConfig{Dir: dir}, "fence: on (simulated jobs charge the fence tables in " + dir + ")", nil
	}
	if err != nil {
		if mode == FenceOn || library != "" {
			return FenceConfig{}, "", err
		}
		return off(err.Error())
	}
	return FenceConfig{Dir: dir, Library: lib}, "fence: on (" + lib + ")", nil
}

// fences is the enforcer's side of the fence: per GPU a control copy and the tasks' accounting
// files (fence.Table), kept in step with the ledger.
type fences struct {
	cfg FenceConfig
	lib string // the library's path inside Dir: what LD_PRELOAD names
	log hclog.Logger

	mu     sync.Mutex
	tables map[string]*fence.Table
	synced map[string]string // GPU -> what its table was last set to
	// seen is, by GPU and token, how many processes of each task the watchdog's last pass saw
	// on the GPU (fence.Task.Seen): the fence counts their contexts, not what a task writes.
	seen map[string]map[string]int
	// claims is, by GPU and token, each task's waiting flag as the watchdog's passes saw it
	// (heed): whether the fence still heeds it.
	claims map[string]map[string]*claim
}

func newFences(cfg FenceConfig, log hclog.Logger) (*fences, error) {
	if cfg.Dir == "" {
		return nil, nil
	}
	if !fence.Available {
		return nil, errors.New("enforcer: the allocation fence needs a gpufrac built with cgo")
	}
	if err := fence.EnsureDir(cfg.Dir, cfg.Shared); err != nil {
		return nil, fmt.Errorf("enforcer: %w", err)
	}
	// Tasks read the control copies (0644) whatever user they run as.
	if err := fence.EnsureDir(fence.ControlDir(cfg.Dir), true); err != nil {
		return nil, fmt.Errorf("enforcer: %w", err)
	}
	// Each task reaches its own lock directory, through its mount or, run as another user
	// without one, through this; the enforcer's claims on the GPUs are its alone.
	if err := fence.EnsureDir(fence.LiveRoot(cfg.Dir), cfg.Shared); err != nil {
		return nil, fmt.Errorf("enforcer: %w", err)
	}
	if err := fence.EnsureDir(fence.EnforcerDir(cfg.Dir), false); err != nil {
		return nil, fmt.Errorf("enforcer: %w", err)
	}
	// Without a library (simulated GPUs, whose jobs charge the tables themselves) tasks get
	// the tables' directory alone. The library goes into a directory of its own, which tasks
	// get read-only; a copy that earlier versions put beside the tables, where tasks could
	// rewrite it, is removed (running tasks keep what they mapped).
	lib := ""
	if cfg.Library != "" {
		libDir := fence.LibraryDir(cfg.Dir)
		if err := fence.EnsureDir(libDir, true); err != nil {
			return nil, fmt.Errorf("enforcer: %w", err)
		}
		var err error
		if lib, err = fence.InstallLibrary(cfg.Library, libDir); err != nil {
			return nil, fmt.Errorf("enforcer: %w", err)
		}
		if err := os.Remove(filepath.Join(cfg.Dir, fence.LibraryName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("enforcer: remove the library from the tables' directory: %w", err)
		}
	}
	return &fences{cfg: cfg, lib: lib, log: log.Named("fence"), tables: map[string]*fence.Table{},
		synced: map[string]string{}, seen: map[string]map[string]int{}, claims: map[string]map[string]*claim{}}, nil
}

// table opens a GPU's fence files. A control copy that cannot be read is moved aside (processes
// keep the copy they mapped) and a fresh one made, so one bad file never leaves a GPU unfenced
// for good.
func (f *fences) table(st ledger.GPUState) (*fence.Table, error) {
	if t := f.tables[st.UUID]; t != nil {
		return t, nil
	}
	t, err := fence.Create(f.cfg.Dir, st.UUID, st.TotalBytes, st.BudgetBytes)
	if errors.Is(err, fence.ErrCorrupt) {
		bad := fence.ControlPath(f.cfg.Dir, st.UUID)
		aside := fmt.Sprintf("%s.corrupt-%s", bad, time.Now().UTC().Format("20060102T150405"))
		if rerr := os.Rename(bad, aside); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		f.log.Warn("fence table unreadable: moved aside, a new one made", "gpu", st.UUID, "error", err, "moved_to", aside)
		t, err = fence.Create(f.cfg.Dir, st.UUID, st.TotalBytes, st.BudgetBytes)
	}
	if err != nil {
		return nil, err
	}
	t.SetWait(f.cfg.BorrowWait)
	f.tables[st.UUID] = t
	return t, nil
}

// stagedFirst is what a staged task's allocations may always reach before its grant: a PyTorch
// job's first block (torch.zeros(1) on the device) is 2 MiB, and it must not wait, or the job's
// CPU start-up, which staging overlaps, waits with it.
const stagedFirst = 64 * size.MiB

// stagedCap is the fence's guarantee for a staged reservation of held bytes: a staged
// reservation holds its process's CUDA context and first small blocks (sched.StageBytes), and
// the fence counts each process's context (ctx) on top of a guarantee, so the context is taken
// off. Counted twice, the staged jobs beside a waiting leaker kept it waiting 12.9 s instead of
// 2.1 s, and two were stopped for it (the simulator's cold seed 3, 2026-12-05). A reservation too
// small to leave stagedFirst stays whole.
func stagedCap(held, ctx size.Bytes) size.Bytes {
	if held >= ctx+stagedFirst {
		return held - ctx
	}
	return held
}

// sync makes a GPU's table hold exactly its reservations' caps, as the ledger has them when the
// table is written (fresh): a caller's state may be older (a watchdog pass reads every GPU's
// state first), and written as it is it would drop a task admitted since, whose process then
// finds no task in the table and runs under the watchdog alone. Every writer takes f.mu, so the
// last one writes the ledger's latest state.
func (f *fences) sync(st ledger.GPUState, fresh func(string) (ledger.GPUState, error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.syncLocked(st, fresh)
}

// syncOr is sync for a change in the ledger that the caller takes back (undo) when the table
// cannot take it; undo runs, and the table is written again from the ledger after it, before
// any other writer's turn. Every writer writes the ledger's latest state, so between a failed
// write and its undo the next one (a watchdog pass, once the memory came free) wrote the change
// that was being taken back, and the task it raised went on at the raise.
func (f *fences) syncOr(st ledger.GPUState, fresh func(string) (ledger.GPUState, error), undo func(error) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err := f.syncLocked(st, fresh)
	if err == nil {
		return nil
	}
	if uerr := undo(err); uerr != nil {
		return errors.Join(err, uerr)
	}
	// The ledger as it stands after the undo: the watchdog's next pass writes it too, should this fail.
	_ = f.syncLocked(st, fresh)
	return err
}

// syncLocked is sync with f.mu held.
func (f *fences) syncLocked(st ledger.GPUState, fresh func(string) (ledger.GPUState, error)) error {
	if cur, err := fresh(st.UUID); err == nil {
		st = cur
	}
	tasks := make([]fence.Task, 0, len(st.Reservations))
	// What the GPU holds past the budget is its headroom, where the contexts on top of the
	// guarantees go (a budget floored at nothing borrows nothing, whatever the spare).
	spare := st.HeadroomBytes
	var sig strings.Builder
	fmt.Fprintf(&sig, "%d/%d/%d", st.BudgetBytes, f.cfg.Context, spare)
	for _, r := range st.Reservations {
		k := fence.Task{Token: r.Token, Cap: r.CapBytes, Limit: r.Limit(), Keep: f.cfg.LendKeep, Grace: f.cfg.LendGrace}
		if r.StagedFor > r.CapBytes || r.Withdrawn {
			// Staged: it holds its small cap whole, borrows nothing, and waits past it.
			// Withdrawn: the same cap, and nothing to wait for (ledger.Withdraw): a cap raised
			// to the whole unit now would be a new guarantee, which the table refuses while a
			// borrower waits, the very moment a staged job is withdrawn.
			c := stagedCap(r.CapBytes, f.cfg.Context)
			k = fence.Task{Token: r.Token, Cap: c, Limit: c, Stage: r.StagedFor}
		}
		k.Seen = f.seen[st.UUID][r.Token]
		c := f.claimOf(st.UUID, r.Token)
		k.Unheeded, k.Sealed, k.Unseen = c.unheeded, c.sealed, c.unseen
		tasks = append(tasks, k)
		fmt.Fprintf(&sig, ",%s=%d/%d/%d/%d/%t/%t/%d", r.Token, k.Cap, k.Limit, k.Stage, k.Seen, k.Unheeded, k.Sealed, k.Unseen)
	}
	if f.synced[st.UUID] == sig.String() {
		return nil
	}
	t, err := f.table(st)
	if err == nil {
		t.SetContext(f.cfg.Context, spare)
		err = t.SetTasks(tasks, st.BudgetBytes)
	}
	if err != nil {
		delete(f.synced, st.UUID)
		return fmt.Errorf("enforcer: fence table of GPU %s: %w", st.UUID, err)
	}
	f.synced[st.UUID] = sig.String()
	return nil
}

// opened is GPU uuid's fence table; nil when none is open.
func (f *fences) opened(uuid string) *fence.Table {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tables[uuid]
}

// view is a GPU's table as it is now, without reaping: what admission reads.
func (f *fences) view(uuid string) (fence.Snapshot, bool) {
	t := f.opened(uuid)
	if t == nil {
		return fence.Snapshot{}, false
	}
	s, err := t.Snapshot()
	return s, err == nil
}

// settled is view for admission: a wait it shows may be a dead process's (killed while its
// allocation waited, its slot not reaped yet), and a wait freezes the GPU, so then the dead are
// reaped and the table read again. Only then: a reap costs a system call a live slot.
func (f *fences) settled(uuid string) (fence.Snapshot, bool) {
	s, ok := f.view(uuid)
	if !ok || !s.Waiting() {
		return s, ok
	}
	t := f.opened(uuid)
	if t == nil || t.Reap() == 0 {
		return s, ok
	}
	f.log.Debug("gave back the fence slots of dead processes", "gpu", uuid, "why", "a wait")
	return f.view(uuid)
}

// look reaps the slots of dead processes and returns the GPU's table as the fence sees it.
func (f *fences) look(uuid string) (fence.Snapshot, bool) {
	t := f.opened(uuid)
	if t == nil {
		return fence.Snapshot{}, false
	}
	if n := t.Reap(); n > 0 {
		f.log.Debug("gave back the fence slots of dead processes", "gpu", uuid, "slots", n)
	}
	// Under gpufrac run every job can write the control copy and every task's accounting: what
	// only the enforcer writes is checked on every pass and written again, and a sum that is not
	// its processes' rebuilt (docs/enforcement.md, "Threat model").
	if diffs, err := t.Verify(); len(diffs) > 0 || err != nil {
		f.log.Warn("fence table differs from what the enforcer wrote: restored what can be, named the rest", "gpu", uuid, "differences", diffs, "error", err)
	}
	s, err := t.Snapshot()
	return s, err == nil
}

func (f *fences) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for uuid, t := range f.tables {
		_ = t.Close()
		delete(f.tables, uuid)
	}
	clear(f.synced)
	clear(f.seen)
	clear(f.claims)
}

// saw keeps how many processes of each task a pass saw on GPU uuid, for the next sync.
func (f *fences) saw(uuid string, byToken map[string][]seenProc) {
	n := make(map[string]int, len(byToken))
	for tok, ps := range byToken {
		n[tok] = len(ps)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen[uuid] = n
}

// SyncFence writes a GPU's reservations into its fence table. Callers that just reserved call it
// before the task starts, so the task's first allocation finds its cap; the watchdog calls it on
// every pass for the rest (ends, expiries, lowered caps). A no-op without a fence.
func (e *Enforcer) SyncFence(st ledger.GPUState) error {
	if e.fence == nil {
		return nil
	}
	return e.fence.sync(st, e.cfg.Ledger.State)
}

// SyncFenceOr is SyncFence for a change the caller takes back when the table cannot take it
// (node.Grant: a grant the table has no room for; node.Admit: a reservation): undo runs with the
// write's error, and the table is written from the ledger after it, before any other write of
// the table, so the change the table refused is never written, not even by a watchdog pass that
// finds the memory come free before the undo. It returns the write's error (joined with undo's).
// A no-op without a fence.
func (e *Enforcer) SyncFenceOr(st ledger.GPUState, undo func(error) error) error {
	if e.fence == nil {
		return nil
	}
	return e.fence.syncOr(st, e.cfg.Ledger.State, undo)
}

// Fenced says whether this enforcer runs the allocation fence.
func (e *Enforcer) Fenced() bool { return e.fence != nil }

// FenceUse is what borrowing takes on one GPU now: the bytes tasks hold past their guarantees,
// which admission counts as taken, and whether an allocation waits for memory to come free,
// while which nothing new should be admitted there (the fence would refuse its guarantee).
func (e *Enforcer) FenceUse(uuid string) (borrowed size.Bytes, waiting bool) {
	if e.fence == nil {
		return 0, false
	}
	s, ok := e.fence.settled(uuid)
	if !ok {
		return 0, false
	}
	return s.Borrowed(), s.Waiting()
}

// FenceWaiters are the tokens of GPU uuid's tasks one of whose allocations waits for memory
// other tasks hold (while the fence heeds their waits), and of its staged tasks one of whose
// allocations waits for their own grant: gpufrac run stops a staged job that is all that stands
// between the first and the memory they wait for, and under MPS only one of the second (it is
// blocked in its allocation, no kernel in flight).
func (e *Enforcer) FenceWaiters(uuid string) (waiting, staged []string) {
	if e.fence == nil {
		return nil, nil
	}
	s, ok := e.fence.settled(uuid)
	if !ok {
		return nil, nil
	}
	for _, t := range s.Tasks {
		switch {
		case t.Token == "":
		case t.HeededWait():
			waiting = append(waiting, t.Token)
		case t.StageWaiting:
			staged = append(staged, t.Token)
		}
	}
	return waiting, staged
}

// fenceNote is what the fence saw of a task, for a violation's detail.
func fenceNote(u fence.TaskUse, seen bool) string {
	if !seen || u.Procs == 0 && u.Peak == 0 {
		return "the allocation fence saw no allocation of this task (LD_PRELOAD unset, a static binary, or the fence off)"
	}
	return fmt.Sprintf("the allocation fence saw %s at most of its %s cap and refused %d allocations", u.Peak, u.Cap, u.Refused)
}

// watchFence keeps one GPU's table in step with the ledger and with the task processes the pass
// saw there (tasks, by token; named: every process there is a task's, none the MPS server's),
// and reads it as the fence sees it, for the watchdog's pass: false without a fence or when the
// table cannot be read.
func (e *Enforcer) watchFence(st ledger.GPUState, tasks map[string][]seenProc, named bool) (fence.Snapshot, bool) {
	if e.fence == nil {
		return fence.Snapshot{}, false
	}
	e.fence.saw(st.UUID, tasks)
	if err := e.fence.sync(st, e.cfg.Ledger.State); err != nil {
		e.sayOnce(st.UUID, "fence", err)
	}
	snap, ok := e.fence.look(st.UUID)
	if !ok {
		return snap, false
	}
	// A task's flag it stopped (or began again) to heed, a seal and an unseen borrow go into the
	// control copy at once, so the fence's rules, admission and this pass all count the same.
	if e.fence.heed(st.UUID, snap, st.Reservations, tasks, named, e.now()) {
		if err := e.fence.sync(st, e.cfg.Ledger.State); err != nil {
			e.sayOnce(st.UUID, "fence", err)
		}
		if snap, ok = e.fence.view(st.UUID); !ok {
			return snap, false
		}
	}
	// Admission and the units a plugin advertises follow what borrowers hold through the ledger.
	if err := e.cfg.Ledger.SetBorrowed(st.UUID, borrowedSeen(snap, tasks), snap.Waiting()); err != nil {
		e.sayOnce(st.UUID, "borrowed", err)
	}
	return snap, true
}

// borrowedSeen is what tasks hold past their guarantees on one GPU, for admission. The table
// counts nothing of a task whose accounting file it cannot read (the task cut it short, or this
// enforcer, restarted, could not open it yet): for such a task what NVML sees its processes hold
// past its guarantee counts instead, unclamped by its limit, as no task wrote it. Counted as
// nothing, it would let admission promise a newcomer memory the task holds, for a pass.
func borrowedSeen(snap fence.Snapshot, tasks map[string][]seenProc) size.Bytes {
	b := snap.Borrowed()
	for _, u := range snap.Tasks {
		if u.Token == "" || !u.Unreadable && !u.Unopened {
			continue
		}
		var held size.Bytes
		for _, p := range tasks[u.Token] {
			held += p.Bytes
		}
		if held > u.Cap {
			b += held - u.Cap
		}
	}
	return b
}

// sayOnce logs an error once until it changes.
func (e *Enforcer) sayOnce(uuid, what string, err error) {
	key := uuid + "/" + what
	if msg := err.Error(); e.lastErr[key] != msg {
		e.lastErr[key] = msg
		e.log.Error("enforcer step failed", "gpu", uuid, "step", what, "error", err)
	}
}
