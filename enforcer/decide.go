package enforcer

import (
	"fmt"
	"maps"
	"slices"
	"syscall"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// The watchdog's decision, apart from its effects: decide reads one GPU's sample and what
// earlier passes left (memory) and returns what to do, in order. It reads no clock, file or
// GPU and signals nothing; the shell (watchdog.go) samples, applies the actions and reports how
// a signal went.

// Violation actions (ledger.Violation.Action).
const (
	ActionOOMInProcess = "oom-in-process"
	ActionSIGINT       = "sigint"
	ActionSIGKILL      = "sigkill"
	ActionReported     = "reported"
)

// nearFraction: under MPS a task seen within 5% of its cap whose processes then leave the GPU
// without a stop from the watchdog is recorded as having failed at its pinned limit.
const nearFraction = 0.95

// unmanagedRound is the step unmanaged use is rounded up to before it is written to the ledger,
// so small wobbles in NVML readings do not cost a commit each.
const unmanagedRound = 64 * size.MiB

// rules are the settings decide applies.
type rules struct {
	allowance     size.Bytes    // per CUDA process, on top of a task's cap
	stopGrace     time.Duration // between SIGINT and SIGKILL under MPS
	stopUnmanaged bool          // policy unmanaged = "stop"
}

// seenProc is one GPU process of a sample, attributed.
type seenProc struct {
	ProcUsage
	// known: the process table answered for it this pass. A process that vanished meanwhile
	// still counts as unmanaged use but is neither reported nor signalled.
	known bool
	start uint64
	task  ledger.Task // the names its environment carries
	// pinned is the MPS pinned limit its environment sets for this GPU (pinnedOK: one applies).
	pinned   size.Bytes
	pinnedOK bool
	// mpsClient: its environment names an MPS pipe directory.
	mpsClient bool
	// note says why it is not attributed to a task, for the unmanaged report.
	note string
}

// observation is one GPU at one pass.
type observation struct {
	gpu          string
	now          time.Time
	mode         policy.Mode
	reservations []ledger.Reservation
	// unmanagedBytes is the GPU's unmanaged use as the ledger holds it.
	unmanagedBytes size.Bytes
	procs          []seenProc
	// fenced: the fence's table was read after the GPU (snap); pre is the table just before
	// the GPU was read, so what a borrower held is known on both sides of the reading.
	fenced    bool
	pre, snap fence.Snapshot
}

// memory is what the watchdog carries from one pass to the next, over every GPU. Only the
// loop that owns the passes touches it.
type memory struct {
	tracks map[string]*track
	near   map[string]*nearCap
	// lent is the most the fence let each borrowing task hold past its cap within lentHold: the
	// table drops a process's bytes as it exits, the driver (and NVML) some time later.
	lent map[string]heldBytes
	// owedSince is when an owner began to wait for borrowers to give back its guarantee, per GPU.
	owedSince map[string]time.Time
	unmanaged map[procKey]*unmanagedProc
	// refused is what the fence had refused per token at the last look, to tell a new refusal.
	refused map[string]gpuCount
}

func newMemory() *memory {
	return &memory{tracks: map[string]*track{}, near: map[string]*nearCap{}, lent: map[string]heldBytes{},
		owedSince: map[string]time.Time{}, unmanaged: map[procKey]*unmanagedProc{}, refused: map[string]gpuCount{}}
}

type heldBytes struct {
	gpu   string
	bytes size.Bytes
	at    time.Time // the last pass the table showed at least bytes
}

// lentHold is how long a borrower is credited with what the fence let it hold after the table
// shows less: a process's fence accounting ends when it exits or frees, the driver's hold on the
// memory (what NVML shows) up to a teardown later, and an honest borrower judged in between was
// killed at its exit (seed 2 on the H200, 2026-12-03: exit status 0, "borrowed 0B"). It is
// bounded because a task writes its own table: a lie about what it freed buys this much time
// on memory the fence had granted it, no more.
const lentHold = 2 * time.Second

type gpuCount struct {
	gpu string
	n   uint64
}

// track is one violation in progress.
type track struct {
	gpu       string
	task      ledger.Task
	mode      policy.Mode
	capBytes  size.Bytes
	crossedAt time.Time
	peak      size.Bytes
	sigintAt  time.Time
	action    string
	forced    bool
	detail    string
	fence     string // what the allocation fence saw of the task
	reclaimed bool   // stopped because an owner needed back what it borrowed
}

// nearCap remembers a task that met its cap at allocation time, to record a violation when it
// leaves the GPU: an MPS task close to its cap (its pinned limit), or one the fence refused.
type nearCap struct {
	gpu      string
	task     ledger.Task
	mode     policy.Mode
	capBytes size.Bytes
	since    time.Time
	peak     size.Bytes
	fenced   bool       // the allocation fence refused it: no guess involved
	refused  uint64     // allocations the fence refused
	asked    size.Bytes // the most a refused allocation would have taken it to
}

type procKey struct {
	pid   int
	start uint64
}

type unmanagedProc struct {
	sigintAt time.Time
	killed   bool
}

// An action is one thing decide wants done.
type action interface{ isAction() }

// emitEvent publishes an event.
type emitEvent struct{ ev Event }

// stopTask signals every process of a violating task. A process that cannot be signalled
// turns the violation's action into "reported" (the shell says so in memory).
type stopTask struct {
	gpu, token string
	procs      []procKey // by PID
	sig        syscall.Signal
}

// stopProc signals an unmanaged process; a SIGKILL that lands marks it killed.
type stopProc struct {
	key procKey
	sig syscall.Signal
}

// recordViolation writes a contained violation to the ledger and reports it.
type recordViolation struct{ v ledger.Violation }

// markUnhealthy drains a GPU for reason; heal clears the mark when it is one of reasons.
type markUnhealthy struct{ gpu, reason string }

type heal struct {
	gpu     string
	reasons []string
}

// setUnmanaged records a GPU's unmanaged use in the ledger.
type setUnmanaged struct {
	gpu   string
	bytes size.Bytes
}

// evictBorrower says which borrower this pass stops for an owner that waits, and why.
type evictBorrower struct {
	gpu, token string
	owner      string // the task whose wait it is stopped for
	borrowed   size.Bytes
	owedFor    time.Duration
}

func (emitEvent) isAction()       {}
func (stopTask) isAction()        {}
func (stopProc) isAction()        {}
func (recordViolation) isAction() {}
func (markUnhealthy) isAction()   {}
func (heal) isAction()            {}
func (setUnmanaged) isAction()    {}
func (evictBorrower) isAction()   {}

// pass is the state of one decision: it lives as long as one call of decide.
type pass struct {
	rules
	m   *memory
	o   observation
	out []action
	// res are the GPU's reservations by token; byToken its tasks' processes.
	res     map[string]ledger.Reservation
	byToken map[string][]seenProc
	// lent is what each borrowing task may hold past its cap this pass; evicting is the
	// borrower stopped for a waiting owner, if any.
	lent     map[string]size.Bytes
	evicting string
}

func (p *pass) do(a action) { p.out = append(p.out, a) }

// decide is one watchdog pass over one GPU.
func decide(r rules, m *memory, o observation) []action {
	p := &pass{rules: r, m: m, o: o, res: map[string]ledger.Reservation{}, byToken: byToken(o.procs), lent: map[string]size.Bytes{}}
	for _, res := range o.reservations {
		p.res[res.Token] = res
	}
	clients := 0
	var unmanaged []seenProc
	var unmanagedBytes size.Bytes
	for _, sp := range o.procs {
		if sp.MPSServer {
			continue
		}
		clients++
		if sp.Token == "" {
			unmanaged = append(unmanaged, sp)
			unmanagedBytes += sp.Bytes
			p.noteUnmanaged(sp)
		}
	}
	if o.fenced {
		p.fence()
	}
	for _, tok := range slices.Sorted(maps.Keys(p.byToken)) {
		p.check(p.res[tok], p.byToken[tok])
	}
	p.settle()
	p.stopStrays(unmanaged)
	if rounded := (unmanagedBytes + unmanagedRound - 1) / unmanagedRound * unmanagedRound; rounded != o.unmanagedBytes {
		p.do(setUnmanaged{gpu: o.gpu, bytes: rounded})
	}
	if clients == 0 {
		p.do(heal{gpu: o.gpu, reasons: []string{reasonForced, reasonStopped}}) // every client of the faulted MPS server is gone
	}
	return p.out
}

// byToken groups a sample's task processes by reservation.
func byToken(procs []seenProc) map[string][]seenProc {
	out := map[string][]seenProc{}
	for _, sp := range procs {
		if !sp.MPSServer && sp.Token != "" {
			out[sp.Token] = append(out[sp.Token], sp)
		}
	}
	return out
}

// fence notes the tasks the fence refused at their cap (such a task failed inside its own
// process: a violation is recorded when it leaves the GPU, no signal sent, as under MPS), what
// borrowers may hold, and which borrower an owner that waits gets its guarantee back from.
func (p *pass) fence() {
	o, m := p.o, p.m
	for _, r := range o.reservations {
		u, seen := o.snap.Task(r.Token)
		if !seen {
			continue
		}
		fresh := u.Refused - min(m.refused[r.Token].n, u.Refused)
		m.refused[r.Token] = gpuCount{gpu: o.gpu, n: u.Refused}
		if fresh == 0 || m.tracks[r.Token] != nil {
			continue
		}
		n := m.near[r.Token]
		if n == nil {
			n = &nearCap{gpu: o.gpu, task: r.Task, capBytes: r.CapBytes, since: o.now, mode: o.mode}
			m.near[r.Token] = n
		}
		n.fenced = true
		n.peak = max(n.peak, u.Peak)
		n.refused = u.Refused
		n.asked = max(n.asked, u.Asked)
		why := fmt.Sprintf("past the cap (%s of %s held at most)", u.Peak, r.CapBytes)
		switch {
		case r.LimitBytes > r.CapBytes && u.Asked > r.LimitBytes:
			// A borrower alone, or with room to spare, meets its own limit.
			why = fmt.Sprintf("past its %s limit (%s held at most, %s asked)", r.LimitBytes, u.Peak, u.Asked)
		case r.LimitBytes > r.CapBytes:
			// Below its limit a borrower is refused only where the memory left is neighbours'
			// guarantees; "past the cap" would read as a broken cap.
			why = fmt.Sprintf("past its %s guarantee: only other tasks' guarantees were left (%s held at most, limit %s)", r.CapBytes, u.Peak, r.LimitBytes)
		}
		p.do(emitEvent{Event{Kind: EventViolation, Stage: StageFenced, GPU: o.gpu, Token: r.Token, Task: r.Task, Bytes: u.Peak,
			Message: "the allocation fence refused an allocation " + why + "; it fails inside itself, no signal sent"}})
	}
	for tok, c := range m.refused {
		if _, ok := p.res[tok]; !ok && c.gpu == o.gpu {
			delete(m.refused, tok)
		}
	}
	for tok, tr := range m.tracks {
		if tr.gpu == o.gpu {
			u, seen := o.snap.Task(tok)
			tr.fence = fenceNote(u, seen)
		}
	}
	for tok, l := range m.lent {
		if _, ok := p.res[tok]; !ok && l.gpu == o.gpu {
			delete(m.lent, tok) // its reservation ended
		}
	}
	for _, r := range o.reservations {
		u, seen := o.snap.Task(r.Token)
		if !seen || r.LimitBytes <= r.CapBytes {
			delete(m.lent, r.Token)
			continue
		}
		before, _ := o.pre.Task(r.Token)
		shown := max(u.Borrowed(), before.Borrowed())
		if h := m.lent[r.Token]; shown >= h.bytes || o.now.Sub(h.at) >= lentHold || h.gpu != o.gpu {
			m.lent[r.Token] = heldBytes{gpu: o.gpu, bytes: shown, at: o.now}
		}
		// The table is the tasks' to write: what it says a task borrowed is believed up to the
		// limit its reservation holds, never past it.
		p.lent[r.Token] = min(m.lent[r.Token].bytes, r.LimitBytes-r.CapBytes)
	}
	if tok := p.reclaim(); tok != "" {
		p.lent[tok] = 0 // it is stopped below, whatever it holds
	}
}

// reclaimGrace is how long an owner may wait for its guarantee before the watchdog stops a
// borrower that holds on to it: long enough for a borrower whose next allocation the fence
// refused to fail and exit by itself, short against the owner's bounded wait.
const reclaimGrace = time.Second

// reclaim picks the borrower to stop on a GPU where an owner has waited reclaimGrace for the
// guarantee borrowers took while it was not yet allocating: the one that borrowed most, one a
// pass, until the owner is served. A borrower's loss is its own (it outgrew its guarantee);
// the owner's wait ends without harm.
func (p *pass) reclaim() string {
	o, m := p.o, p.m
	owner := p.owedOwner()
	if owner == "" {
		delete(m.owedSince, o.gpu)
		return ""
	}
	since, ok := m.owedSince[o.gpu]
	if !ok {
		m.owedSince[o.gpu] = o.now
		return ""
	}
	if o.now.Sub(since) < reclaimGrace {
		return ""
	}
	var most fence.TaskUse
	for _, u := range o.snap.Tasks {
		// A task writes its own accounting: one with no process on the GPU holds nothing a stop
		// could free, and picked it would be picked every pass in place of one that does.
		if len(p.byToken[u.Token]) == 0 {
			continue
		}
		if u.Borrowed() > most.Borrowed() {
			most = u
		}
	}
	if most.Borrowed() == 0 {
		return ""
	}
	p.evicting = most.Token
	p.do(evictBorrower{gpu: o.gpu, token: most.Token, owner: owner, borrowed: most.Borrowed(), owedFor: o.now.Sub(since)})
	return most.Token
}

// owedOwner is the first task of the table (in its order) whose owed wait is believed: a task
// writes its own flags, and one that says it waits for its guarantee would otherwise have the
// largest borrower stopped every second, with nothing of its own on the GPU. Its wait is
// believed where the fence's own rule for an allocation within a guarantee (judge, charge.c)
// finds it owed on what the enforcer can check: the task has a process on the GPU; one of its
// processes waits for an allocation that fits within its guarantee beside what NVML shows the
// task hold (and a context per process, the watchdog's allowance); and that allocation, with
// what the task holds (what NVML shows, or its file's use up to its guarantee where that is
// more: the fence counted that) and its keep, its whole guarantee at most, does not fit the
// budget beside what the other tasks take (short). A task that says so gets no more than an
// honest one with its guarantee, holding as much, gets by asking as much. The rule is the
// fence's, not whether NVML shows the allocation's bytes free: the fence finds an owner owed its
// whole guarantee where none is lent, and its ask and keep where they are, and an owner it finds
// owed that no pass believed waited out its owed wait and was refused inside its guarantee.
// "" where none is believed.
func (p *pass) owedOwner() string {
	o := p.o
	if o.snap.Budget == 0 {
		return ""
	}
	for _, u := range o.snap.Tasks {
		ps := p.byToken[u.Token]
		if !u.HeededOwed() || len(ps) == 0 {
			continue
		}
		held, room := sum(ps), u.Cap+p.allowance*size.Bytes(len(ps))
		for _, q := range o.snap.Procs {
			// An ask past room is refused first, so the sums below cannot wrap.
			if q.Token != u.Token || !q.Owed || q.Asking == 0 || q.Asking > room || held > room-q.Asking {
				continue
			}
			if p.short(u, max(held, min(u.Used, u.Cap))+q.Asking) {
				return u.Token
			}
		}
	}
	return ""
}

// short says whether owner, reaching want, is owed by the fence's rule: the other tasks, each
// taking its use and its keep at most (its guarantee or its use, whichever is more, where its
// keep is all of it), and owner's want and keep, at most its guarantee, fill more than the
// budget. Whether a task is armed, by its own word or the enforcer's seal, counts for nothing
// here, as in the fence's rule for an allocation within a guarantee (judge, charge.c): a seal
// keeps borrowers out of a guarantee, while an owner is checked against what the others take
// now. Counted whole, a sealed guarantee that borrowers had taken before the seal made an owed
// flag believed where the fence serves an owner asking as much at once, and a borrower was
// stopped for a lie (TestAnOwnerBesideASealedGuaranteeCountsWhatItsTaskTakes). A task's use
// is what its file says, believed up to its limit (as the fence does) and past its guarantee
// only up to what NVML shows its processes hold: a task with none on the GPU borrows nothing
// there, whatever it wrote. What an honest owner's process summed when the fence made it wait is no more: NVML
// shows a borrower at least what the fence counts of it, and borrowers take nothing more while
// an owner waits.
func (p *pass) short(owner fence.TaskUse, want size.Bytes) bool {
	all := min(want+min(owner.Keep, owner.Cap), owner.Cap)
	for _, u := range p.o.snap.Tasks {
		if u.Token == owner.Token {
			continue
		}
		used := min(u.Used, max(u.Limit, u.Cap), max(sum(p.byToken[u.Token]), u.Cap))
		all += min(max(used, u.Cap), used+min(u.Keep, u.Cap))
	}
	return all > p.o.snap.Budget
}

// check compares one task with its cap plus the per-process allowance plus what the fence lent
// it past its cap (a borrower's allocations, each one admitted by the fence against every other
// task's guarantee), and runs the mode's stop protocol on a violator.
func (p *pass) check(r ledger.Reservation, ps []seenProc) {
	o, m := p.o, p.m
	used := sum(ps)
	lent := p.lent[r.Token]
	limit := r.CapBytes + lent + p.allowance*size.Bytes(len(ps))
	if n := m.near[r.Token]; n != nil && n.fenced {
		n.peak = max(n.peak, used) // NVML's view, context included
		if n.task == (ledger.Task{}) {
			n.task = taskOf(ps)
		}
	}
	tr := m.tracks[r.Token]
	if tr == nil {
		// The pinned limit is the cap, or for a borrower under MPS what it may borrow up to (its
		// cap is the fence's): near that, a task that leaves most likely failed at it.
		if pinned := r.Limit(); o.mode == policy.ModeMPS && float64(used) >= nearFraction*float64(pinned) {
			n := m.near[r.Token]
			if n == nil {
				n = &nearCap{gpu: o.gpu, task: r.Task, mode: o.mode, capBytes: pinned, since: o.now}
				m.near[r.Token] = n
			}
			n.peak = max(n.peak, used)
		} else if n := m.near[r.Token]; n != nil && !n.fenced {
			delete(m.near, r.Token) // fell back from the cap while alive: it did not die at it
		}
		// The borrower an owner waits for is stopped whatever NVML shows: what it borrowed may
		// be less than the allowance its contexts leave unused, and judged by its guarantee
		// alone it would be picked again every pass while the owner's wait ran out.
		evicted := p.evicting == r.Token
		if !evicted && (used <= limit || driverBounds(o.mode, r.CapBytes, ps)) {
			return
		}
		delete(m.near, r.Token)
		task := r.Task
		if task == (ledger.Task{}) {
			// Before the first token scan the ledger knows no names: read them off the processes,
			// so a task that breaks its cap in its first second is still attributed.
			task = taskOf(ps)
		}
		tr = &track{gpu: o.gpu, task: task, mode: o.mode, capBytes: r.CapBytes, crossedAt: o.now}
		m.tracks[r.Token] = tr
		msg := fmt.Sprintf("task passed its cap: %s used, cap %s + borrowed %s + allowance %s x %d processes", used, r.CapBytes, lent, p.allowance, len(ps))
		if evicted {
			msg = fmt.Sprintf("task holds borrowed memory that a neighbour's guarantee needs back: %s used, cap %s, %d processes", used, r.CapBytes, len(ps))
		}
		p.do(emitEvent{Event{Kind: EventViolation, Stage: StageCrossed, GPU: o.gpu, Token: r.Token, Task: task, PIDs: pids(ps), Bytes: used,
			Message: msg}})
	}
	tr.peak = max(tr.peak, used)
	// The token scan may learn the task's names after the crossing (a restarted enforcer can
	// cross on its first sample, before any scan): record the violation under the latest ones.
	if r.Task != (ledger.Task{}) {
		tr.task = r.Task
	}
	stop := func(sig syscall.Signal) { p.do(stopTask{gpu: o.gpu, token: r.Token, procs: keys(ps), sig: sig}) }
	// A violator is stopped whole: once over, every process of the task goes, even if its sum
	// dips back under the cap while it is being stopped.
	switch {
	case o.mode != policy.ModeMPS:
		tr.action = ActionSIGKILL
		tr.detail = "SIGKILL at once (isolated mode: separate CUDA contexts, a kill harms no neighbour)"
		// A pass after the eviction's (the borrower has not died yet) must not restate its
		// stop as a plain crossing: the owner's wait that caused it is over by then.
		if p.evicting == r.Token || tr.reclaimed {
			tr.reclaimed = true
			tr.detail = "SIGKILL at once: it held borrowed memory that a neighbour's guarantee needed back " +
				"(isolated mode: separate CUDA contexts, a kill harms no neighbour)"
		}
		stop(syscall.SIGKILL)
	case tr.sigintAt.IsZero():
		// SIGINT is the gentlest stop there is, yet on the H200 a neighbour of a busy MPS task
		// stopped this way failed with an illegal address (docs/benchmarks.md): no stop of a
		// running MPS client is known to be safe, so every one is a GPU-wide event. The GPU
		// takes no new work until its clients are gone, and whoever runs them is told.
		tr.sigintAt, tr.action = o.now, ActionSIGINT
		tr.detail = "SIGINT under MPS: a GPU-wide event (stopping a busy MPS client can fault the other clients)"
		stop(syscall.SIGINT)
		p.do(emitEvent{Event{Kind: EventViolation, Stage: StageStopping, GPU: o.gpu, Token: r.Token, Task: r.Task, PIDs: pids(ps), Bytes: used,
			Message: fmt.Sprintf("SIGINT sent under MPS, other clients of this GPU may fault; forced stop after %s", p.stopGrace)}})
		p.do(markUnhealthy{gpu: o.gpu, reason: reasonStopped})
	case o.now.Sub(tr.sigintAt) >= p.stopGrace:
		first := !tr.forced
		if first {
			tr.forced, tr.action = true, ActionSIGKILL
			tr.detail = fmt.Sprintf("SIGINT, then SIGKILL after %s grace under MPS: a GPU-wide event", p.stopGrace)
		}
		stop(syscall.SIGKILL)
		if first {
			p.do(emitEvent{Event{Kind: EventViolation, Stage: StageForced, GPU: o.gpu, Token: r.Token, Task: r.Task, PIDs: pids(ps), Bytes: used,
				Message: "task did not leave within the grace: SIGKILL under MPS, other clients of this GPU may fault"}})
			p.do(markUnhealthy{gpu: o.gpu, reason: reasonForced})
		}
	}
}

// driverBounds says whether, under MPS, the driver already holds this task to its cap: a single
// client process whose pinned limit (read from its environment) is at most the cap fails inside
// itself at the limit, and NVML's reading above the cap is its context, which the limit does not
// count. The watchdog then only watches; stopping a busy MPS client by force can fault its
// neighbours (docs/enforcement.md). Several processes, or a limit raised past the cap, it must stop.
func driverBounds(mode policy.Mode, capBytes size.Bytes, ps []seenProc) bool {
	return mode == policy.ModeMPS && len(ps) == 1 && ps[0].pinnedOK && ps[0].pinned <= capBytes
}

// settle closes violations whose task holds no GPU memory any more, and recognises tasks that
// left at their cap (an MPS pinned limit, or the fence's refusal).
func (p *pass) settle() {
	o := p.o
	settleGone(p, p.m.tracks, func(tr *track) string { return tr.gpu }, func(tok string, tr *track) {
		detail := tr.detail
		if tr.fence != "" {
			detail += "; " + tr.fence
		}
		p.do(recordViolation{ledger.Violation{Token: tok, GPU: o.gpu, Task: tr.task, Mode: tr.mode, CapBytes: tr.capBytes, PeakBytes: tr.peak,
			Action: tr.action, CrossedAt: tr.crossedAt, ContainedAt: o.now, Reclaimed: tr.reclaimed, Detail: detail}})
	})
	settleGone(p, p.m.near, func(n *nearCap) string { return n.gpu }, func(tok string, n *nearCap) {
		held := ledger.HeldByMPSLimit
		detail := fmt.Sprintf("left the GPU at %.0f%% of its cap without a stop from the watchdog; the MPS pinned limit fails "+
			"an allocation past the cap inside the process, so this is most likely its out-of-memory exit "+
			"(the watchdog cannot see exit statuses)", 100*float64(n.peak)/float64(n.capBytes))
		if n.fenced {
			held = ledger.HeldByFence
			asked := ""
			if n.asked > n.peak {
				asked = fmt.Sprintf("; the largest refused allocation would have taken it to %s", n.asked)
			}
			detail = fmt.Sprintf("the allocation fence refused %d allocations past the cap (the task held %s of %s%s), then the task "+
				"left the GPU, no signal sent: it failed inside its own process, or its framework asked again and it finished "+
				"(its exit status says which)", n.refused, n.peak, n.capBytes, asked)
		}
		p.do(recordViolation{ledger.Violation{Token: tok, GPU: o.gpu, Task: n.task, Mode: n.mode, CapBytes: n.capBytes, PeakBytes: n.peak,
			AskedBytes: n.asked, Action: ActionOOMInProcess, HeldBy: held, CrossedAt: n.since, ContainedAt: o.now, Detail: detail}})
	})
}

// settleGone removes from m, in token order, each entry on this pass's GPU whose task holds no
// GPU memory any more, and hands it to fn.
func settleGone[T any](p *pass, m map[string]T, gpu func(T) string, fn func(tok string, v T)) {
	for _, tok := range slices.Sorted(maps.Keys(m)) {
		v := m[tok]
		if gpu(v) != p.o.gpu || len(p.byToken[tok]) > 0 {
			continue
		}
		delete(m, tok)
		fn(tok, v)
	}
}

// noteUnmanaged reports each unmanaged process once.
func (p *pass) noteUnmanaged(sp seenProc) {
	if !sp.known {
		return
	}
	k := procKey{sp.PID, sp.start}
	if _, seen := p.m.unmanaged[k]; seen {
		return
	}
	p.m.unmanaged[k] = &unmanagedProc{}
	msg := "GPU process without a reservation"
	if sp.note != "" {
		msg += " (" + sp.note + ")"
	}
	p.do(emitEvent{Event{Kind: EventUnmanaged, Stage: StageSeen, GPU: p.o.gpu, PIDs: []int{sp.PID}, Bytes: sp.Bytes, Message: msg}})
}

// stopStrays applies policy unmanaged = "stop" to unmanaged processes: at once where a kill is
// safe, SIGINT first for MPS clients of this GPU's daemon.
func (p *pass) stopStrays(ps []seenProc) {
	if !p.rules.stopUnmanaged {
		return
	}
	for _, sp := range ps {
		if !sp.known {
			continue
		}
		k := procKey{sp.PID, sp.start}
		u := p.m.unmanaged[k]
		if u == nil || u.killed {
			continue
		}
		mpsClient := p.o.mode == policy.ModeMPS && sp.mpsClient
		switch {
		case !mpsClient || (!u.sigintAt.IsZero() && p.o.now.Sub(u.sigintAt) >= p.stopGrace):
			p.do(stopProc{key: k, sig: syscall.SIGKILL})
			p.do(emitEvent{Event{Kind: EventUnmanaged, Stage: StageStopped, GPU: p.o.gpu, PIDs: []int{sp.PID}, Bytes: sp.Bytes,
				Message: "unmanaged GPU process stopped (SIGKILL) by policy unmanaged = stop"}})
		case u.sigintAt.IsZero():
			p.do(stopProc{key: k, sig: syscall.SIGINT})
			u.sigintAt = p.o.now
		}
	}
}

// taskOf is the task identity its processes' environments carry.
func taskOf(ps []seenProc) ledger.Task {
	var t ledger.Task
	for _, sp := range ps {
		if !sp.known {
			continue
		}
		fillTask(&t, sp.task)
	}
	return t
}

func sum(ps []seenProc) size.Bytes {
	var b size.Bytes
	for _, p := range ps {
		b += p.Bytes
	}
	return b
}

// keys names each of ps by PID and start time (0 where its stat could not be read), by PID.
func keys(ps []seenProc) []procKey {
	out := make([]procKey, 0, len(ps))
	for _, p := range ps {
		out = append(out, procKey{p.PID, p.start})
	}
	slices.SortFunc(out, func(a, b procKey) int { return a.pid - b.pid })
	return out
}

func pids(ps []seenProc) []int {
	out := make([]int, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.PID)
	}
	slices.Sort(out)
	return out
}
