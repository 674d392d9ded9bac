package enforcer

import (
	"slices"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/size"
)

// A task's waiting and owed flags are its own to write (docs/enforcement.md, "Threat model"):
// while one is up, no new guarantee is placed on its GPU, and while an owed one is up every
// borrowing allocation there is refused. An honest wait ends within the fence's own bounds, so
// a task's flag counts only for as long as one could last; past that the enforcer stops heeding
// it (fence.Task.Unheeded), in the ledger, in admission and in the fence's rules alike.

// claimMargin is what a task's flag may outlast the fence's bounds by before it stops counting:
// the watchdog sees a flag only at its passes, a few of them apart at worst on a loaded node,
// and an allocation that started waiting between two passes is seen from the second.
const claimMargin = 30 * time.Second

// claimBound is the longest an honest task's flag stays up at a stretch, margin included: one
// allocation may wait out its grace (LendGrace), then for borrowable memory (BorrowWait) or
// for borrowers to give its guarantee back (fence.OwedWait), and is refused at the end.
func claimBound(c FenceConfig) time.Duration {
	return c.LendGrace + max(c.BorrowWait, fence.OwedWait) + claimMargin
}

// claim is one task's flag as the watchdog's passes saw it.
//
// left is a budget of flagged time that drains while the flag is up and refills, to at most the
// bound, as fast while it is down. Without it a task could drop its flag for a single pass just
// before the bound and raise it again, starting a fresh bound each time, and hold the GPU for
// all but a pass of every bound. With it no stretch of a task's flags counts for longer than the
// bound, and over time they count for at most half the time; an honest task pays only where its
// waits (one process's or several's) follow one another for longer than the bound, and then
// only in that they hold nobody else up: the waits themselves go on in its processes.
type claim struct {
	at       time.Time     // the pass that last looked
	up       bool          // the flag was up at that pass
	left     time.Duration // how much longer the flag may count
	unheeded bool          // left ran out while the flag was up: not heeded until it is down
	warned   bool          // the warning was logged for this task
	sealed   bool          // the task is known armed (sealedBy): its guarantee is lent no more
	waited   int           // passes in a row that saw an owner wait and could name (and read) every process
	held     size.Bytes    // what NVML showed its processes hold at the last pass
	unseen   size.Bytes    // the most its use is believed at while an owner waits (fence.Task.Unseen)
}

// heed carries the flags of GPU uuid's tasks (snap, as the fence read it) to now, seals the
// tasks it now knows armed (procs: the pass's processes by token, sealedBy), marks the borrows
// no process on the GPU holds (named: every process the pass saw on the GPU is a task's, none
// the MPS server's; unseenNow), and says whether any of that changed: the control copy must
// then be written again. res names the tasks for the log.
func (f *fences) heed(uuid string, snap fence.Snapshot, res []ledger.Reservation, procs map[string][]seenProc, named bool, now time.Time) bool {
	bound := claimBound(f.cfg)
	f.mu.Lock()
	defer f.mu.Unlock()
	claims := f.claims[uuid]
	if claims == nil {
		claims = map[string]*claim{}
		f.claims[uuid] = claims
	}
	seen := map[string]bool{}
	changed, owed := false, snap.Owed()
	for _, u := range snap.Tasks {
		if u.Token == "" {
			continue
		}
		seen[u.Token] = true
		c := claims[u.Token]
		if c == nil {
			c = &claim{at: now, left: bound}
			claims[u.Token] = c
		}
		if d := max(now.Sub(c.at), 0); c.up {
			c.left = max(c.left-d, 0) // time flagged but no longer heeded is not owed back
		} else {
			c.left = min(c.left+d, bound)
		}
		c.at, c.up = now, u.Waiting
		if why := sealedBy(u, procs[u.Token], f.cfg.Context); why != "" && !c.sealed {
			c.sealed, changed = true, true
			f.log.Debug("a task's guarantee is lent no more", "gpu", uuid, "token", ledger.RedactToken(u.Token), "why", why)
		}
		// Only a pass that saw an owner wait counts: until a wait begins any task may borrow, and
		// a process that made its context after one pass's NVML read and borrowed before a wait
		// began in that pass is on no list yet. The second pass of the wait read NVML after the
		// first saw it, so after every borrow that could come before it.
		// NVML says 0 for a process whose memory it cannot attribute (some virtualised setups):
		// a pass that cannot read what the task's processes hold shows nothing of it.
		blind := slices.ContainsFunc(procs[u.Token], func(p seenProc) bool { return p.Bytes == 0 })
		if named && owed && !blind {
			c.waited++
		} else {
			c.waited = 0
		}
		// What this pass and the one before showed, whichever is more: a process one of them
		// missed (made after its NVML read, or gone a moment early) is on the other's list.
		held := sum(procs[u.Token])
		shown := max(c.held, held)
		c.held = held
		if unseen := unseenNow(u, c.waited, shown); unseen != c.unseen {
			c.unseen, changed = unseen, true
			f.log.Debug("while an owner waits, a task's borrowing is believed only as far as NVML shows its processes hold it",
				"gpu", uuid, "token", ledger.RedactToken(u.Token), "believed", unseen.String())
		}
		was := c.unheeded
		c.unheeded = u.Waiting && (c.unheeded || c.left <= 0)
		if c.unheeded == was {
			continue
		}
		changed = true
		if !c.unheeded {
			f.log.Debug("a task's waits count again: its flag is down", "gpu", uuid, "token", ledger.RedactToken(u.Token))
			continue
		}
		task := ""
		for _, r := range res {
			if r.Token == u.Token {
				task = r.Task.String()
			}
		}
		if c.warned {
			f.log.Debug("a task's waits no longer count: its flags outlasted the bound again", "gpu", uuid,
				"token", ledger.RedactToken(u.Token), "task", task)
			continue
		}
		c.warned = true
		f.log.Warn("a task says it waits for longer than any honest wait lasts: its waits no longer hold up new guarantees or borrowers on the GPU until it stops",
			"gpu", uuid, "token", ledger.RedactToken(u.Token), "task", task, "owed", u.Owed, "bound", bound.String())
	}
	for tok := range claims {
		if !seen[tok] {
			delete(claims, tok) // its reservation ended, and its slot in the control copy with it
		}
	}
	return changed
}

// Whether a task is armed (past its start-up, so borrowers may no longer use its guarantee) is
// its own file's word, and a task that never said so would have its guarantee lent again and
// again, each time claiming it back by having the largest borrower stopped (reclaim). An honest
// task lends it once, in its start-up: the fence arms it at its first allocation past its keep
// and never disarms it but within that one charge. So the enforcer seals a task (fence.Task.Sealed)
// once it knows it armed, for as long as its reservation lasts. Only from what it saw itself:
// under gpufrac run a task can write the control copy, and a seal read back from there could be
// a tenant's (Verify writes back what the enforcer set). An enforcer started again learns the
// seals again, as it learns the claims.

// sealedBy says why the pass knows task u armed, or "": its file said so where it was read
// whole (a charge may arm it for a moment, under the lock, and take that back), or NVML shows
// its processes (ps) hold past its keep and a context of ctx each, which an honest task holds
// only armed. Where nothing of its guarantee is lent there is nothing to seal.
func sealedBy(u fence.TaskUse, ps []seenProc, ctx size.Bytes) string {
	switch {
	case u.Keep >= u.Cap:
		return ""
	case u.Armed && !u.Unlocked:
		return "its accounting says it armed"
	case sum(ps) > u.Keep+ctx*size.Bytes(len(ps)):
		return "NVML shows it hold past its keep"
	}
	return ""
}

// A task may write that it borrows memory it holds nowhere. An owner then finds its guarantee
// short by the fence's rule and waits, while the watchdog, which believes a borrow only as far
// as NVML shows the task's processes hold it (short), finds the owner's wait a lie and stops
// nobody (reclaim), and the owner would be refused inside its guarantee once its owed wait ran
// out. So while an owner waits the enforcer marks such a task unseen (fence.Task.Unseen), and
// the rules believe its use only as far as the watchdog does: its guarantee, or what NVML
// shows its processes hold where that is more (nothing past its guarantee where none is on the
// GPU). Before, only a task with no process on the GPU was marked, and a liar that kept one
// small process there had every owner beside it refused inside its guarantee.

// unseenAfter is how many passes in a row, each seeing an owner wait (and naming every process
// on the GPU), must go by before a task's borrowing is believed only as far as NVML shows it: a
// process the pass before had not seen yet (it made its CUDA context after NVML was read, and
// borrowed before the wait began) is on the GPU at the next.
const unseenAfter = 2

// unseenNow is the most task u's use is believed at, or 0 for its file's word: waited passes
// in a row saw an owner wait (when no task may borrow more, so no new process of u's borrows
// past what they read) and could name every process on the GPU (one they could not might be
// u's), NVML showed u's processes hold shown at the last two, and u says it borrows past that
// and its guarantee. A dead process's borrow its task has not given back yet is no memory
// either: the driver freed it.
func unseenNow(u fence.TaskUse, waited int, shown size.Bytes) size.Bytes {
	b := max(u.Cap, shown)
	if waited < unseenAfter || u.Limit <= u.Cap || u.Used <= b {
		return 0
	}
	return b
}

// seal marks GPU uuid's task token sealed: a borrower was stopped for its owed wait, which an
// honest task waits armed. The next write of the control copy carries it.
func (f *fences) seal(uuid, token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.claims[uuid][token]; c != nil {
		c.sealed = true
	}
}

// claimOf is what the passes carried for GPU uuid's task token (its flags heeded or not, its
// seal, its borrow unseen), a zero claim for a task no pass has seen yet. Called with f.mu held.
func (f *fences) claimOf(uuid, token string) claim {
	if c := f.claims[uuid][token]; c != nil {
		return *c
	}
	return claim{}
}
