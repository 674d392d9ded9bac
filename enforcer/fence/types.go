// Package fence is the enforcer's side of the allocation fence. libgpufrac-fence.so, loaded into
// every process of a task with LD_PRELOAD (its source is lib/), charges every device allocation
// to its task's accounting file on that GPU (AccountPath: one per task, which only that task may
// write) and refuses, with CUDA_ERROR_OUT_OF_MEMORY inside the process, one that would take the
// task past its cap. The enforcer writes each task's cap into the GPU's control copy
// (ControlPath, which tasks read only) and creates each task's accounting file (SetTasks), and
// reads what the fence saw as one table merged from all of them (Snapshot). The layout and rules
// are one C implementation (state.h), compiled into the library and, through cgo, into this
// package, so the two sides cannot drift apart.
package fence

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/gpufrac/gpufrac/size"
	"github.com/gpufrac/gpufrac/taskenv"
)

// LibraryName is the file name of the preload library.
const LibraryName = "libgpufrac-fence.so"

// Environment variables the fence reads in a task (the token and GPU come from enforcer.TaskEnv).
const (
	EnvDir     = taskenv.FenceDir
	EnvLibrary = taskenv.FenceLibrary
	EnvPreload = taskenv.Preload
)

// Errors callers can match with errors.Is.
var (
	ErrCorrupt = errors.New("fence state is not a usable table")
	ErrBusy    = errors.New("fence state is managed by another gpufrac process")
	ErrFull    = errors.New("fence table has no free task slot")
	// ErrNoFile: a task's accounting or lock file could not be made (a full or read-only
	// disk, wrapped); the task runs under the watchdog alone until a later write makes it.
	ErrNoFile   = errors.New("a task's fence files could not be made")
	ErrBadInput = errors.New("invalid fence input")
	ErrClosed   = errors.New("fence table is closed")
	// ErrLocked: a live process kept a task's lock past its bound (a stopped or hostile one),
	// or the control copy stayed mid-write that long; it could not be read or written this time.
	ErrLocked = errors.New("fence table is locked by a process that does not let go")
	// ErrNoRoom: borrowers hold what a new guarantee would cover (see NoRoomError).
	ErrNoRoom = errors.New("fence table has no room for the guarantee")
)

// MaxTasks is how many tasks one GPU's table holds.
const MaxTasks = 64 // GF_TASKS in state.h; a test keeps them equal

// MaxProcs is how many processes of a GPU's tasks the fence counts.
const MaxProcs = 512 // GF_PROCS in state.h; a test keeps them equal

// NewProcs is how many processes a task may have started since the enforcer last saw its
// processes on the GPU: its file's count is believed up to that many past Task.Seen.
const NewProcs = 4 // GF_NEW_PROCS in state.h; the build keeps them equal

// OwedWait is how long an allocation within its task's guarantee waits for borrowers to give it
// back before it is refused: the longest an honest owner's wait lasts past its grace.
const OwedWait = 120 * time.Second // GF_OWED_WAIT_NS in state.h; the build keeps them equal

// contexts is how many processes' contexts a task is counted for (gf_counted): what its file
// says, at least what the enforcer saw, at most NewProcs more, at most MaxProcs, and one for a
// task with none yet (gf_whole).
func (u TaskUse) contexts() size.Bytes {
	n := max(u.Procs, u.Seen)
	if u.Procs > u.Seen+NewProcs {
		n = u.Seen + NewProcs
	}
	return size.Bytes(max(min(n, MaxProcs), 1))
}

// Path names GPU uuid for the fence directory dir, as the C side does: its control copy and each
// task's accounting file are that name in ControlDir(dir) and in AccountDir(dir, token). No file
// lies at Path itself.
func Path(dir, uuid string) string { return filepath.Join(dir, uuid+".fence") }

// Task is what the enforcer declares for one reservation.
type Task struct {
	Token string
	// Cap is the task's guarantee: its allocations may always reach it.
	Cap size.Bytes
	// Limit is the most it may reach by borrowing memory no other task's guarantee covers;
	// below Cap means Cap (no borrowing).
	Limit size.Bytes
	// Keep is what of its guarantee borrowers may not use before the task's first allocation
	// (what its CUDA contexts take unseen by the fence); 0 or Cap and above = all of it, so
	// nothing is lent. Once it allocates, its whole guarantee is its own, and borrowers give
	// back what they took of it: at once, or after Grace.
	Keep size.Bytes
	// Grace, where something is lent (Keep below Cap), is how long an allocation of the task
	// waits quietly when borrowers hold what it needs of its guarantee (once in a process's
	// life): they keep it, and one that ends meanwhile loses nothing; past Grace, or a second
	// after nothing that could free memory still runs, they must give it back. 0 = at once.
	Grace time.Duration
	// Stage, above Cap, marks a task started early (staged): Cap is what it may hold until
	// admission grants it Stage, and an allocation past Cap waits for that grant (no borrowing,
	// no refusal) instead of failing; memory-info calls report Stage. 0 = placed in full.
	Stage size.Bytes
	// Seen is how many of the task's processes the enforcer saw on the GPU at its last look
	// (NVML). The fence counts a context for each of them whatever the task's own file says, and
	// believes the file for NewProcs more: a task writes its own file.
	Seen int
	// Unheeded: the enforcer no longer believes the task's waits (they lasted past any bound an
	// honest wait keeps): no other task's allocation, and no new guarantee, waits for them.
	Unheeded bool
	// Sealed: the enforcer knows the task armed (its file said so, NVML showed it hold past its
	// keep, or a borrower was stopped for its owed wait), so no rule lends its guarantee again,
	// whatever its own file says from now on. The enforcer sets it on every write for the rest
	// of the placement: the control copy holds what the last SetTasks said, as for every field.
	Sealed bool
	// Unseen, where not 0: an owner waits for its guarantee while this task says it borrows
	// past what NVML showed its processes hold (nothing where none is on the GPU) at two looks
	// in a row that could name every process there: the other tasks' rules believe its use up
	// to this only, its guarantee or what NVML showed, whichever is more, and only while some
	// task is owed. The enforcer sets it only while an owner waits, when no task may borrow more.
	Unseen size.Bytes
}

// TaskUse is one task as the fence saw it.
type TaskUse struct {
	Token      string
	Cap, Limit size.Bytes
	Used, Peak size.Bytes
	Refused    uint64
	// Asked is the most a refused allocation would have taken the task to: its use then plus
	// the bytes asked for (what a re-run needs; its use reached less).
	Asked size.Bytes
	// Procs is how many processes its file says it has; Seen what the enforcer set (Task.Seen).
	Procs, Seen int
	// Waiting: an allocation of one of its processes waits for borrowable memory to come free,
	// or (Owed too) for borrowers to give back its guarantee; Waits and OwedWaits count the
	// allocations that ever waited so. Its file says so in its processes' slots or in its sums,
	// either of which the task may write.
	Waiting bool
	Owed    bool
	// Grace: one waits quietly for borrowers to end before they must give its guarantee back.
	Grace bool
	// Asking is what its waiting allocations ask for, those that wait to borrow or out a
	// grace: what the fence sets aside for them first.
	Asking    size.Bytes
	Waits     uint64
	OwedWaits uint64
	// Keep is what borrowers may not use of its guarantee while it is not Armed (it has not
	// allocated yet), as its file says; Sealed is what the table keeps (Task.Sealed), and every
	// rule reads a sealed task as armed.
	Keep   size.Bytes
	Armed  bool
	Sealed bool
	// Unseen is what the enforcer last set (Task.Unseen).
	Unseen size.Bytes
	// Stage is the guarantee a staged task is promised (Task.Stage), and StageWaiting whether
	// an allocation of it waits for that grant (not Waiting: it waits for no other task).
	Stage        size.Bytes
	StageWaiting bool
	// Unlocked: its task kept its lock past the enforcer's bound, and its file was read without
	// it: its sums may be mid-update.
	Unlocked bool
	// Unreadable: its task cut its accounting file short or wrote over its header, so nothing
	// of it is counted (Used 0, no processes); Unlocked too. What it uses is NVML's to judge.
	Unreadable bool
	// Unheeded is what the enforcer last set (Task.Unheeded): Waiting and Owed are what the
	// task's file says, and the Snapshot's Waiting and Owed leave them out.
	Unheeded bool
	// Unopened: this enforcer could not open its accounting file (an error other than the file
	// being gone or not a table): nothing of it is counted until it can (admission counts what
	// NVML sees it hold past its guarantee meanwhile), and the file stays as it is, for its
	// processes charge it; Unlocked too. Verify opens it again.
	Unopened bool
}

// Borrowed is what the task holds past its guarantee, at most what its limit lets it borrow:
// a task writes its own accounting file, and a use written past the limit is a lie the fence
// never granted; at most what the enforcer believes of it where it marked it (Unseen).
func (u TaskUse) Borrowed() size.Bytes {
	used := min(u.Used, u.Limit)
	if u.Unseen != 0 {
		used = min(used, max(u.Unseen, u.Cap))
	}
	if used <= u.Cap || u.Limit <= u.Cap {
		return 0
	}
	return used - u.Cap
}

// ProcUse is one attached process.
type ProcUse struct {
	Token string
	// PID is in the process's own PID namespace (a container's differ from the host's).
	PID        int
	Used, Peak size.Bytes
	Allocs     uint64
	Refused    uint64
	// Waiting for memory to borrow, or Owed: waiting for borrowers to give back its guarantee,
	// or Grace: waiting quietly for them to end first (lend's grace); Staged: its task is
	// staged and it waits for the task's guarantee (not Waiting).
	Waiting bool
	Owed    bool
	Grace   bool
	Staged  bool
	// Asking is what its waiting allocation asks for (Waiting), as its task's file says.
	Asking size.Bytes
}

// Snapshot is one GPU's control copy and its tasks' accounting files, merged; each file is
// consistent in itself (read under its task's lock, but where the task kept it past the
// enforcer's short bound).
type Snapshot struct {
	UUID          string
	Total, Budget size.Bytes
	Tasks         []TaskUse
	Procs         []ProcUse
	// Recoveries counts locks taken over from a process that died holding one; Underflows
	// frees of more than was charged; Reaped slots given back for dead processes.
	Recoveries, Underflows, Reaped uint64
	// Wait is how long an allocation may wait for borrowable memory.
	Wait time.Duration
	// Context is what each attached process's CUDA context is taken to hold, and Spare what
	// the GPU holds past the budget (Table.SetContext).
	Context, Spare size.Bytes
}

// Borrowed is what admission must count as taken: what every task holds past its guarantee
// and, while any does, the contexts past the spare of every task's processes (one for a task
// with none yet) and of the next task's first, as the fence places a guarantee only where all
// of them fit beside the borrowers. Where nobody borrows, guarantees' contexts are the headroom
// policy's.
func (s Snapshot) Borrowed() size.Bytes {
	var b, contexts size.Bytes
	for _, t := range s.Tasks {
		b += t.Borrowed()
		contexts += s.Context * t.contexts()
	}
	if b == 0 {
		return 0
	}
	return b + max(contexts+s.Context, s.Spare) - s.Spare
}

// HeededWait says whether the task waits and the enforcer still heeds its waits: a task writes
// its own flags, and one the enforcer stopped heeding holds nobody up.
func (t TaskUse) HeededWait() bool { return t.Waiting && !t.Unheeded }

// HeededOwed is HeededWait for an owner's wait for its guarantee.
func (t TaskUse) HeededOwed() bool { return t.Owed && !t.Unheeded }

// Waiting says whether an allocation waits for borrowable memory: no new guarantee is placed
// on the GPU until it is served or gives up. The waits of a task the enforcer no longer heeds
// do not count: the fence counts them for nothing either.
func (s Snapshot) Waiting() bool {
	for _, t := range s.Tasks {
		if t.HeededWait() {
			return true
		}
	}
	return false
}

// Owed says whether an owner waits for borrowers to give back its guarantee: they must, at once.
// A task the enforcer no longer heeds is left out, as in Waiting.
func (s Snapshot) Owed() bool {
	for _, t := range s.Tasks {
		if t.HeededOwed() {
			return true
		}
	}
	return false
}

// NoRoomError is a SetTasks whose new or raised guarantees would cover memory that borrowers
// hold, or that came while an allocation waits for memory: those tasks were left out.
type NoRoomError struct {
	Path     string
	Tokens   []string
	Borrowed size.Bytes
	Waiting  bool
}

func (e *NoRoomError) Error() string {
	why := fmt.Sprintf("tasks borrow past their guarantees: with the CUDA contexts the headroom does not hold beside them, %s", e.Borrowed)
	if e.Waiting {
		why = "an allocation waits for borrowed memory to come free"
	}
	return fmt.Sprintf("fence table %s has no room for %d new guarantee(s): %s", e.Path, len(e.Tokens), why)
}

// Is makes errors.Is(err, ErrNoRoom) true.
func (e *NoRoomError) Is(target error) bool { return target == ErrNoRoom }

// differs names what of s the enforcer did not write as it is: set is the table right after its
// last SetTasks, and only SetTasks changes guarantees, limits, keeps, tasks and the header.
func (s Snapshot) differs(set Snapshot) []string {
	var d []string
	if s.Total != set.Total || s.Budget != set.Budget || s.Wait != set.Wait || s.Context != set.Context || s.Spare != set.Spare {
		d = append(d, fmt.Sprintf("header total %s budget %s wait %s context %s spare %s, set %s %s %s %s %s", s.Total, s.Budget, s.Wait,
			s.Context, s.Spare, set.Total, set.Budget, set.Wait, set.Context, set.Spare))
	}
	for _, u := range s.Tasks {
		w, ok := set.Task(u.Token)
		switch {
		case u.Token == "" || !ok:
			d = append(d, "a task the enforcer did not set")
		case u.Cap != w.Cap || u.Limit != w.Limit || u.Keep != w.Keep || u.Stage != w.Stage || u.Seen != w.Seen || u.Unheeded != w.Unheeded || u.Sealed != w.Sealed || u.Unseen != w.Unseen:
			d = append(d, fmt.Sprintf("task %s: guarantee %s limit %s keep %s stage %s processes seen %d unheeded %t sealed %t unseen %s, set %s %s %s %s %d %t %t %s",
				short(u.Token), u.Cap, u.Limit, u.Keep, u.Stage, u.Seen, u.Unheeded, u.Sealed, u.Unseen, w.Cap, w.Limit, w.Keep, w.Stage, w.Seen, w.Unheeded, w.Sealed, w.Unseen))
		}
	}
	for _, w := range set.Tasks {
		if _, ok := s.Task(w.Token); !ok {
			d = append(d, fmt.Sprintf("task %s is gone", short(w.Token)))
		}
	}
	return d
}

// unsummed names the tasks whose use is not what their processes hold: every change of a use
// moves both under the lock, so only a write around the fence's API parts them. A file read
// without its lock may be mid-update, and is left for a later pass.
func (s Snapshot) unsummed() []string {
	held := map[string]size.Bytes{}
	for _, p := range s.Procs {
		if p.Token != "" {
			held[p.Token] += p.Used
		}
	}
	var d []string
	for _, u := range s.Tasks {
		if u.Token != "" && !u.Unlocked && u.Used != held[u.Token] {
			d = append(d, fmt.Sprintf("task %s: use %s, its processes hold %s", short(u.Token), u.Used, held[u.Token]))
		}
	}
	return d
}

// unreadable names the tasks whose accounting file could not be read: their own doing (a
// task may write only its own file), and their own loss: the fence counts nothing of them. And
// the tasks whose file this enforcer could not open: named until it can.
func (s Snapshot) unreadable() []string {
	var d []string
	for _, u := range s.Tasks {
		switch {
		case u.Unreadable:
			d = append(d, fmt.Sprintf("task %s: its accounting file is cut short or not a fence table", short(u.Token)))
		case u.Unopened:
			d = append(d, fmt.Sprintf("task %s: its accounting file could not be opened: left as it is, opened again", short(u.Token)))
		}
	}
	return d
}

// short is enough of a token to tell tasks apart in a message, not enough to use it.
func short(token string) string { return token[:min(4, len(token))] + "…" }

// Task returns the use of one token's task.
func (s Snapshot) Task(token string) (TaskUse, bool) {
	for _, t := range s.Tasks {
		if t.Token == token {
			return t, true
		}
	}
	return TaskUse{}, false
}
