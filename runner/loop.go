package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/probe"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/sched"
	"github.com/gpufrac/gpufrac/size"
)

// stuckAfter is how long the runner waits with nothing running and nothing admissible before
// it gives up on the jobs left (another process holds the budget). It outlasts the ledger's
// grace, so reservations left by a crashed process have expired by then (the watchdog expires
// them in the packed and static arms).
const stuckAfter = ledger.DefaultGrace + 30*time.Second

// active is an attempt in flight.
type active struct {
	l     sched.Launch
	a     record.Attempt
	token string
	proc  *probe.Proc
	logf  *os.File
	tail  *probe.Tail
	stop  chan struct{}
	// set by the attempt's goroutine before it reports on run.done
	exit          int
	signal        syscall.Signal // what ended the root, if a signal did: 137 alone says too little
	leftBehind    []int          // processes out of its group, carrying its token, stopped at its end
	exitedAt      time.Time      // when the runner saw the process end
	windowStopped bool
	stopped       bool
	// windowPeak: the footprint an in-place probe showed when its window ended while it
	// borrowed (recapProbe), which its template keeps (settle).
	windowPeak size.Bytes
	// unstaged: the job was stopped while staged, for a borrower (sched.Unstage); set by the
	// main loop, under r.mu, before it closes stop.
	unstaged  bool
	closeStop sync.Once
	violation *ledger.Violation
	// resultBefore is the job's result file as the attempt found it (nil: none): a file it left
	// unchanged is not its result (an earlier run's, in a results directory used again).
	resultBefore os.FileInfo
	// sm meters the GPU's SM activity while the attempt runs alone (probe.Shares); smPct is
	// what it measured, set before the attempt reports on run.done.
	sm    *probe.SMMeter
	smPct *float64

	// onGPU closes at the first sample with GPU memory: a probe's window starts there.
	onGPU chan struct{}
	// grant closes when a staged probe is granted its guarantee (nil for any other attempt):
	// its window starts at the later of the two, not in its wait.
	grant chan struct{}
	// contained closes when the enforcer reports a violation of the attempt's reservation
	// contained (its event, onEvent); reported is the latest such violation.
	contained chan struct{}

	mu   sync.Mutex
	peak size.Bytes
	// level is the use the attempt rose to last (more than levelSlack above the one before);
	// held is how long it has stayed at it since, in samples where none of its allocations
	// waited in the fence (heldFootprint).
	level size.Bytes
	held  time.Duration
	// holds are the levels it rose past before level, each with how long it held it (rising,
	// so in increasing order): what a probe that rose at its end held before (heldBeforeRise).
	holds []levelHold
	now   size.Bytes // the latest sample
	lastT float64
	snaps []record.MemSample
	// wait is how long an allocation of the job waited for memory to borrow, in samples that
	// found it waiting; waitAt the first such sample, in seconds since the run started.
	wait   time.Duration
	waitAt float64
	// owed is the same for an allocation within its guarantee that waited for borrowers to
	// give it back (lend), owedAt its first sample.
	owed     time.Duration
	owedAt   float64
	reported *ledger.Violation
}

// contain notes the violation the enforcer reported for the attempt.
func (a *active) contain(v ledger.Violation) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reported == nil {
		close(a.contained)
	}
	a.reported = &v
}

// heldAtLevel is how long the attempt has held the level it rose to last, running.
func (a *active) heldAtLevel() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.held
}

// levelHold is a level an attempt rose to and how long it held it, running.
type levelHold struct {
	level size.Bytes
	held  time.Duration
}

// levelHeldFor is the highest level the attempt held, running, for at least d; 0 if none.
func (a *active) levelHeldFor(d time.Duration) size.Bytes {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.held >= d {
		return a.level
	}
	for i := len(a.holds) - 1; i >= 0; i-- {
		if a.holds[i].held >= d {
			return a.holds[i].level
		}
	}
	return 0
}

// waited notes a sample, at t, that found one of the attempt's allocations waiting: for memory
// to borrow, or (owed) for borrowers to give back its guarantee.
func (a *active) waited(d time.Duration, t float64, owed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sum, at := &a.wait, &a.waitAt
	if owed {
		sum, at = &a.owed, &a.owedAt
	}
	if *sum == 0 {
		*at = t
	}
	*sum += d
}

// record notes a sample at t of what the attempt holds (b), d after the GPU's previous one;
// waiting says whether one of its allocations was found waiting in the fence.
func (a *active) record(b size.Bytes, t float64, d time.Duration, waiting bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b > 0 && a.peak == 0 {
		close(a.onGPU)
	}
	a.now = b
	if b > a.peak {
		a.peak = b
	}
	switch {
	case b > a.level+a.level/levelSlack:
		if a.held > 0 {
			a.holds = append(a.holds, levelHold{a.level, a.held})
		}
		a.level, a.held = b, 0
	case b >= a.level-a.level/levelSlack && !waiting:
		a.held += d
	}
	// Keep about 10 points a second for the report; the peak above keeps the full rate.
	if len(a.snaps) == 0 || t-a.lastT >= 0.1 {
		a.snaps = append(a.snaps, record.MemSample{T: t, Bytes: b})
		a.lastT = t
	}
}

func (r *run) loop(ctx context.Context) (*record.Result, error) {
	r.start = r.o.Now()
	bctx, cancel := context.WithCancel(context.Background())
	r.stopBusy = cancel
	r.sample(bctx)
	r.wg.Add(1)
	go r.sampleBusy(bctx)
	r.prog.Begin(r.header())
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	stopping, givingUp := false, false
	giveUpWhy := "" // what the jobs left fail with once the run gives up
	idleSince := time.Time{}
	var runErr error
	for {
		r.retryReleases()
		if !stopping && !givingUp {
			r.stageRound()
			for _, l := range r.s.Next() {
				r.launch(l)
			}
		}
		n, staged := r.activeCount()
		// Staged jobs wait for memory; while nothing else of the run holds any, the run is as
		// stuck as with nothing running.
		if n == staged {
			if n == 0 && (stopping || r.allDone()) {
				break
			}
			// A GPU an event took out stays out until gpufrac restarts: waiting for it
			// would only end in the give-up below, minutes later.
			if why := r.outOfService(); why != "" && !stopping && !givingUp {
				givingUp, giveUpWhy = true, why
				r.stopStaged()
			}
			if n == 0 && givingUp {
				r.giveUp(giveUpWhy)
				break
			}
			if idleSince.IsZero() {
				idleSince = r.o.Now()
				r.prog.Line("%-8s %s", "waiting", r.s.Waiting(idleSince.Add(stuckAfter)))
			} else if r.o.Now().Sub(idleSince) > stuckAfter && !givingUp {
				givingUp, giveUpWhy = true, r.s.Stuck(stuckAfter)
				if n == 0 {
					r.giveUp(giveUpWhy)
					break
				}
				r.stopStaged() // they come back queued; then the run gives up on them
			}
		} else {
			idleSince = time.Time{}
		}
		select {
		case a := <-r.done:
			r.finish(a)
		case a := <-r.recap:
			r.recapProbe(a)
		case <-tick.C:
			r.status()
		case <-ctx.Done():
			if !stopping {
				stopping = true
				runErr = ctx.Err()
				r.prog.Line("interrupted: stopping %d running job(s)", n)
				r.mu.Lock()
				for a := range r.active {
					a.halt()
				}
				r.mu.Unlock()
			}
		}
	}
	r.prog.End()
	return r.result(), runErr
}

func (r *run) allDone() bool {
	for _, j := range r.s.Jobs() {
		if !j.Done {
			return false
		}
	}
	return true
}

// giveUp fails the jobs that can never be admitted, naming why (detail).
func (r *run) giveUp(detail string) {
	for _, j := range r.s.Jobs() {
		if j.Done {
			continue
		}
		j.Done, j.Final = true, record.OutcomeFailed
		now := r.o.Now()
		r.attempts = append(r.attempts, record.Attempt{Job: j.Name, Template: j.Template, Number: j.Attempts + 1,
			Start: now, End: now, ExitCode: -1, Outcome: record.OutcomeFailed, Detail: detail})
		r.prog.Line("%-9s %-20s %s", "FAILED", j.Name, detail)
	}
}

func (r *run) launch(l sched.Launch) {
	j := l.Job
	j.Attempts++
	token := l.Res.Token
	if token == "" {
		token = newToken()
	}
	a := &active{l: l, token: token, stop: make(chan struct{}), onGPU: make(chan struct{}), contained: make(chan struct{}),
		tail: probe.NewTail(8192)}
	if l.Staged && l.Probe {
		a.grant = make(chan struct{})
	}
	a.a = record.Attempt{Job: j.Name, Template: j.Template, Number: j.Attempts, GPU: l.GPU, GPUIndex: r.gpus[l.GPU].Index,
		Capped: l.Capped, WholeGPU: l.Whole, Probe: l.Probe, Result: r.resultPath(j)}
	if l.Capped {
		a.a.CapBytes = l.Res.CapBytes
	}
	logName := fmt.Sprintf("%s.%d.log", j.Name, j.Attempts)
	a.a.Log = filepath.Join("logs", logName)
	var out io.Writer = io.Discard
	if f, err := os.Create(filepath.Join(r.o.OutDir, "logs", logName)); err == nil {
		a.logf = f
		out = f
	} else {
		r.log.Warn("cannot create the job's log", "job", j.Name, "error", err)
	}
	if p := r.resultPath(j); p != "" {
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		a.resultBefore, _ = os.Stat(p)
	}
	env := r.env(l, token, j)
	a.a.Start = r.o.Now()
	proc, err := probe.Start(probe.Spec{Command: r.command(j.Command, env), Env: probe.Environ(env),
		Dir: j.Dir, Stdout: out, Stderr: io.MultiWriter(out, a.tail)})
	if err == nil {
		a.proc = proc
	}
	r.mu.Lock()
	alone := true
	for o := range r.active {
		if o.l.GPU == l.GPU {
			alone = false
			o.sm.Share() // GPM would count a's work with o's
		}
	}
	r.active[a] = true
	r.mu.Unlock()
	if err != nil {
		a.exit = -1
		a.a.Detail = err.Error()
		// Reported as an attempt's end always is, from its own goroutine: the main loop, which
		// launches, is the only reader of r.done, and a round of more failed starts than the
		// channel holds blocked it for good (a mistyped program in a large queue).
		go func() { r.done <- a }()
		return
	}
	if alone {
		_, known := r.s.SMDemand(j.Template)
		a.sm = r.shares.Open(l.GPU, l.Res.Token, l.Probe || !known, r.log.With("job", j.Name))
	}
	r.started(a)
	go r.wait(a)
}

// wait follows one attempt to its end and reports it on r.done.
func (r *run) wait(a *active) {
	// A probe's window opens at the job's first GPU memory, not at its launch: what a job does
	// before it touches the GPU (imports, reading data; a slow start on a loaded machine) says
	// nothing about its footprint, and a window spent there measured nothing. A staged probe's
	// opens no earlier than its grant: before it, its allocations past the stage wait.
	var onGPU <-chan struct{}
	grant := a.grant
	if a.l.Window > 0 {
		onGPU = a.onGPU
	}
	var window <-chan time.Time
	var timer *time.Timer
	openWindow := func() {
		timer = time.NewTimer(a.l.Window)
		window = timer.C
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	smTick, smStop := a.sm.Ticks(r.o.GPMInterval) // never ticks for an attempt not metered
	defer smStop()
wait:
	for {
		select {
		case <-a.proc.Done():
			break wait
		case <-smTick:
			a.sm.Read(context.Background())
		case <-onGPU:
			onGPU = nil
			if grant == nil {
				openWindow()
			}
		case <-grant:
			grant = nil
			if onGPU == nil && a.l.Window > 0 {
				openWindow()
			}
		case <-window:
			window = nil
			if a.l.InPlace {
				// The main loop lowers the cap; the job runs on.
				r.recap <- a
				continue
			}
			// A job whose exit is already in when its window ends has exited: its own
			// status counts (a failure is not a probe's footprint), as in probe.Run.
			if a.proc.Exited() {
				break wait
			}
			a.windowStopped = true
			a.proc.Stop(r.o.StopGrace)
			break wait
		case <-a.stop:
			a.stopped = true
			grace := r.o.StopGrace
			if a.unstaged && r.o.modeOf() != policy.ModeMPS {
				grace = unstageGrace
			}
			a.proc.Stop(grace)
			break wait
		}
	}
	a.exitedAt = r.o.Now()
	if a.sm != nil {
		a.smPct = a.sm.Close(context.Background())
	}
	n := r.sampleCount(a.l.GPU)
	a.exit = a.proc.ExitCode()
	a.signal, _ = a.proc.Signaled()
	a.proc.Reap()
	// What the job started out of its process group (setsid, a daemon) outlives Reap; once the
	// reservation is released it would hold GPU memory with no room of its own and no watchdog,
	// and only a run killed outright had such processes stopped, by the next run. Each carries
	// the attempt's token, which names it for certain.
	a.leftBehind = node.StopLeftBehind([]ledger.Reservation{{Token: a.token}})[a.token]
	// The wall clock, not r.o.Now: the samplers pace themselves by it.
	r.sampleAfter(a.l.GPU, n, time.Second+3*r.o.Policy.WatchdogInterval)
	if a.l.Capped && r.guard != nil && a.exit != 0 && !a.windowStopped {
		// The watchdog contains a violation once the task's memory is gone, which can be a
		// sample or two after the root process exits, and says so in an event (onEvent).
		// The wall clock, not r.o.Now: this waits on the watchdog, which samples in real time.
		t := time.NewTimer(3*r.o.Policy.WatchdogInterval + 300*time.Millisecond)
		select {
		case <-a.contained:
		case <-t.C:
		}
		t.Stop()
		a.violation = r.violationOf(a)
	}
	r.done <- a
}

// violationOf is the violation the enforcer reported for the attempt, else (an event a lagging
// subscription missed) the latest the ledger holds for its reservation. An "oom-in-process"
// record only says the task left the GPU near its cap, which a job that exited 0 also does: it
// counts only for a job that failed. Nor does a SIGKILL that found the job exiting 0: a killed
// process cannot exit 0, so its work was done and the memory judged was its teardown's.
func (r *run) violationOf(a *active) *ledger.Violation {
	a.mu.Lock()
	v := a.reported
	a.mu.Unlock()
	if v == nil {
		vs := r.led.Violations()
		for i := len(vs) - 1; i >= 0 && v == nil; i-- {
			if vs[i].Token == a.token {
				v = &vs[i]
			}
		}
	}
	if v == nil || a.exit == 0 && (v.Action == enforcer.ActionOOMInProcess || v.Action == enforcer.ActionSIGKILL) {
		return nil
	}
	return v
}

// onEvent turns the enforcer's events about this run's jobs into progress lines. An event
// without a time is stamped with the run's clock as it arrives: a collateral failure is decided
// by comparing the event's window with the attempts' times, which the run's clock gives.
func (r *run) onEvent(ev enforcer.Event) {
	if ev.Time.IsZero() {
		ev.Time = r.o.Now()
	}
	switch ev.Kind {
	case enforcer.EventViolation:
		if g, ok := r.gpus[ev.GPU]; ok && r.o.modeOf() != policy.ModeMPS && (ev.Stage == enforcer.StageCrossed || ev.Stage == enforcer.StageContained) {
			r.wide.OverCap(ev, g.Index, ev.Task.JobName)
		}
		if ev.Stage == enforcer.StageContained {
			// The attempt's end reports it. The watchdog stopped the GPU processes; a wrapper
			// around them (a shell, a launcher that retries) must not keep the job alive.
			if ev.Violation == nil {
				return
			}
			r.mu.Lock()
			for a := range r.active {
				if a.token != ev.Token {
					continue
				}
				a.contain(*ev.Violation)
				if a.proc != nil && ev.Violation.Action != enforcer.ActionOOMInProcess {
					go func(p *probe.Proc) {
						select {
						case <-p.Done():
						case <-time.After(2 * time.Second):
							p.Stop(r.o.StopGrace)
						}
					}(a.proc)
				}
			}
			r.mu.Unlock()
			return
		}
		name, idx := "?", -1
		r.mu.Lock()
		for a := range r.active {
			if a.token == ev.Token && !a.unstaged {
				name, idx = a.l.Job.Name, a.a.GPUIndex
			}
		}
		r.mu.Unlock()
		if idx < 0 {
			return // not a job of this run, or one unstaged under MPS, refused by design
		}
		r.prog.Line("%-8s %-20s GPU%d  %s", "CAP!", name, idx, ev.Message)
	case enforcer.EventGPUHealth:
		g, ok := r.gpus[ev.GPU]
		if !ok {
			return // not a GPU of this run
		}
		r.wide.Note(ev, g.Index)
		r.healthLine(g.Index, ev.Stage, ev.Message)
	case enforcer.EventMPS:
		if g, ok := r.gpus[ev.GPU]; ok {
			r.prog.Line("%-8s GPU%d  %s", ev.Kind, g.Index, ev.Message)
			return
		}
		r.prog.Line("%-8s %s", ev.Kind, ev.Message)
	}
}

// finish turns an ended attempt into an outcome and decides what happens to its job.
func (r *run) finish(a *active) {
	r.mu.Lock()
	delete(r.active, a)
	r.mu.Unlock()
	if a.logf != nil {
		_ = a.logf.Close()
	}
	j := a.l.Job
	at := a.a
	at.End = r.o.Now()
	at.ExitCode = a.exit
	a.mu.Lock()
	at.PeakBytes, at.Samples = a.peak, a.snaps
	at.BorrowWait, at.BorrowWaitAt = a.wait, a.waitAt
	at.GuaranteeWait, at.GuaranteeWaitAt = a.owed, a.owedAt
	a.mu.Unlock()
	if a.violation == nil && a.l.Capped && r.guard != nil {
		a.violation = r.violationOf(a)
	}
	at.Violation = a.violation
	if at.Result != "" && !wrote(a.resultBefore, at.Result) {
		at.Result = ""
	}
	if v := a.violation; v != nil && v.PeakBytes > at.PeakBytes {
		// One figure per fact: the watchdog's sample (or the fence's refused total) was higher
		// than the runner's own; the detail, the CSV and the report all say this one.
		at.PeakBytes = v.PeakBytes
	}
	borrowedAt(&at, a.l.Res, a.l.Borrowing)
	oom := a.tail.OutOfMemory()
	switch {
	case a.unstaged:
		at.Outcome = record.OutcomeUnstaged
		at.Detail = "stopped while staged: only staged jobs held the GPU, and a borrower or the first staged job waited for their memory; queued again"
		if r.o.modeOf() == policy.ModeMPS {
			at.Detail += " (under MPS its promise was withdrawn, and the fence refused its waiting allocation inside it: no forced stop)"
		}
	case a.stopped:
		at.Outcome = record.OutcomeCanceled
	case a.windowStopped:
		at.Outcome = record.OutcomeProbe
		at.Detail = fmt.Sprintf("probe window of %s over", a.l.Window)
	case a.violation != nil:
		at.Outcome = record.OutcomeCapViolation
		at.Detail = fmt.Sprintf("%s at %s over %s cap", a.violation.Action, at.PeakBytes, a.violation.CapBytes.A())
	case a.exit != 0 && a.l.Capped && oom && r.ownOOM(a, &at):
		at.Outcome = record.OutcomeCapViolation
		at.Detail = "out of memory inside the job near its cap"
	case a.exit == 0:
		at.Outcome = record.OutcomeOK
	default:
		at.Outcome = record.OutcomeFailed
		if at.Detail == "" {
			at.Detail = a.tail.LastLine()
			if a.signal != 0 {
				at.Detail = strings.TrimSuffix(fmt.Sprintf("killed by signal %d (%s): %s", int(a.signal), a.signal, at.Detail), ": ")
			}
		}
		if a.proc != nil {
			// A GPU-wide event, or a neighbour over its cap, may explain it: then it runs again.
			r.lookAtFailure()
			if r.wide.Judge(&at, a.token, oom, a.exitedAt, r.collateralAfter(), j.Collateral) {
				j.Collateral++
			}
		}
	}
	if a.l.Res.Token != "" {
		r.release(a.l.Res.Token, string(at.Outcome), j.Name)
		r.s.FenceSync(a.l.GPU)
	}
	r.s.Finished(&a.l)
	r.settle(j, a, &at)
	if note := node.LeftBehindNote(a.leftBehind); note != "" {
		if at.Detail == "" {
			note = strings.TrimPrefix(note, "; ")
		}
		at.Detail += note
	}
	r.mu.Lock()
	r.attempts = append(r.attempts, at)
	r.mu.Unlock()
	r.prog.Finished(at, a.l.Window, r.capLabel(at.Template))
	r.learnShare(a, &at)
}

// wrote says whether the file at p is not the one before was: created, replaced or modified.
func wrote(before os.FileInfo, p string) bool {
	after, err := os.Stat(p)
	if err != nil {
		return false
	}
	return before == nil || !os.SameFile(before, after) || !before.ModTime().Equal(after.ModTime()) || before.Size() != after.Size()
}

// ownOOM says whether an out-of-memory exit of an attempt that no violation explains was the
// attempt's own cap. Under MPS the allocation that crosses the cap fails inside the job, which
// exits with CUDA's own message; the watchdog may never see usage above the cap, and one large
// allocation can fail long before the sampled use comes near it. Caps fit the budget, so an OOM
// under MPS is the job's own limit. Without MPS an OOM far below the cap means the GPU itself was
// full: a harmed job, not a violator; and so does one near the cap while a neighbour was over
// its own or a GPU-wide event was on (the GPU was full of memory the fence never saw): the
// failure is collateral (collateral.Events.Judge), never a rung of the job's ladder.
func (r *run) ownOOM(a *active, at *record.Attempt) bool {
	if r.o.modeOf() == policy.ModeMPS {
		return true
	}
	if at.PeakBytes*2 < at.CapBytes {
		return false
	}
	_, harmed := r.wide.Explaining(at, a.token, true, a.exitedAt, r.collateralAfter())
	return !harmed
}

// release ends a finished attempt's reservation. One the ledger cannot record (a full disk)
// stays pending and is retried every round and when the run ends: a reservation must not
// outlive the job it was for while its run lives on.
func (r *run) release(token, reason, job string) {
	err := r.led.Release(token, reason)
	if err == nil || errors.Is(err, ledger.ErrNoReservation) {
		return
	}
	r.log.Warn("reservation not released; retrying", "job", job, "error", err)
	r.unreleased = append(r.unreleased, pendingRelease{token: token, reason: reason, job: job})
}

// retryReleases gives back the reservations release could not, and keeps the ones it still
// cannot.
func (r *run) retryReleases() {
	kept := r.unreleased[:0]
	for _, p := range r.unreleased {
		if err := r.led.Release(p.token, p.reason); err != nil && !errors.Is(err, ledger.ErrNoReservation) {
			kept = append(kept, p)
			continue
		}
		r.log.Info("reservation released after an earlier failure", "job", p.job)
	}
	r.unreleased = kept
}

// collateralAfter is how long after a GPU is marked healthy again a failure still counts: the
// mark is cleared once the GPU's clients are gone, a watchdog interval or two after the last
// one left, and a faulted neighbour may take a moment longer to end its own wrapper.
func (r *run) collateralAfter() time.Duration {
	return time.Second + 3*r.o.Policy.WatchdogInterval
}
