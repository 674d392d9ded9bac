package ledger

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// Reservation sources.
const (
	SourceNomad  = "nomad"
	SourceRunner = "runner"
)

func denied(r Reason, format string, args ...any) error {
	return &DeniedError{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

// ReserveIDs admits a Nomad task onto the instance IDs the scheduler assigned it (Source
// "nomad", cap = len(ids) x unit). Nomad has no release call, so a reservation that holds one of
// these IDs ends first: the scheduler only reuses an ID once the task holding it is gone.
func (l *Ledger) ReserveIDs(ids []string, task Task, opts ...ReserveOption) (Reservation, error) {
	if len(ids) == 0 {
		return Reservation{}, denied(ReasonNoIDs, "the request names no instance IDs")
	}
	count := map[string]int{}
	for _, id := range ids {
		count[id]++
	}
	var dups []string
	for id, n := range count {
		if n > 1 {
			dups = append(dups, fmt.Sprintf("%s (%d times)", id, n))
		}
	}
	if len(dups) > 0 {
		slices.Sort(dups)
		return Reservation{}, denied(ReasonUnknownIDs, "instance IDs appear more than once in one request: %s", strings.Join(dups, ", "))
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	prev, err := l.begin()
	if err != nil {
		return Reservation{}, err
	}
	ended := 0
	for _, id := range ids {
		tok, ok := l.st.byID[id]
		if !ok {
			continue
		}
		r := l.st.res[tok]
		l.end(tok)
		ended++
		l.log.Info("reservation ended: the scheduler reused its instance", "token", RedactToken(tok), "gpu", r.GPU,
			"instance", id, "task", r.Task.String())
	}

	r, admitErr := l.admitIDs(ids, task)
	if admitErr != nil {
		if ended > 0 {
			if err := l.commit(prev, true); err != nil {
				return Reservation{}, errors.Join(admitErr, err)
			}
		}
		l.log.Info("reservation denied", "ids", ids, "task", task.String(), "error", admitErr)
		return Reservation{}, admitErr
	}
	for _, o := range opts {
		o(&r)
	}
	return l.add(prev, r)
}

// admitIDs runs every admission check for ids and builds the reservation (not yet stored).
func (l *Ledger) admitIDs(ids []string, task Task) (Reservation, error) {
	var bad []string
	gpus := []string{}
	ks := make([]int, len(ids))
	for i, id := range ids {
		u, k, err := ParseInstanceID(id)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%q (malformed)", id))
			continue
		}
		if _, ok := l.st.gpus[u]; !ok {
			bad = append(bad, fmt.Sprintf("%q (no known GPU %s)", id, u))
			continue
		}
		ks[i] = k
		if !slices.Contains(gpus, u) {
			gpus = append(gpus, u)
		}
	}
	if len(bad) > 0 {
		return Reservation{}, denied(ReasonUnknownIDs, "unknown instance IDs: %s", strings.Join(bad, ", "))
	}
	if len(gpus) > 1 {
		return Reservation{}, denied(ReasonMixedGPUs, "the IDs come from more than one GPU (%s); one request must be served by one GPU", strings.Join(gpus, " and "))
	}
	uuid := gpus[0]
	l.advanceHold(uuid, l.now())
	gs := l.st.capacity(uuid)
	for i, id := range ids {
		if ks[i] >= gs.Units {
			bad = append(bad, fmt.Sprintf("%q", id))
		}
	}
	if len(bad) > 0 {
		valid := fmt.Sprintf("IDs %s-0 to %s-%d", uuid, uuid, gs.Units-1)
		if gs.Units == 0 {
			// A GPU without units shows one stand-in instance, whose health says why.
			valid = "none: its one instance is a stand-in whose health description says why"
		}
		return Reservation{}, denied(ReasonUnknownIDs, "instance IDs outside the %d units %s advertises (%s): %s",
			gs.Units, uuid, valid, strings.Join(bad, ", "))
	}
	capBytes := size.Bytes(len(ids)) * gs.UnitBytes
	if err := checkGPU(gs, capBytes, len(ids)); err != nil {
		return Reservation{}, err
	}
	return Reservation{GPU: uuid, InstanceIDs: slices.Clone(ids), CapBytes: capBytes, Task: task, Source: SourceNomad}, nil
}

// checkGPU is the admission rule shared by both paths: healthy, below max tasks, fits the budget,
// and, unless guarantees are lent, fits beside what borrowers hold with no allocation waiting.
func checkGPU(gs GPUState, capBytes size.Bytes, units int) error {
	return checkRoom(gs, capBytes, units, true, false)
}

// checkRoom is checkGPU for capBytes more on the GPU: for a new task (newTask), or for one it
// already counts (a staged task's grant), which adds no task. A staged start (staged) takes only
// what is free beside borrowers, waiting or held for or not: what it holds is its CUDA
// context's, its guarantee waits for its grant under the whole rule, and gpufrac run stops it
// where it alone keeps a borrower waiting (sched/stage.go).
func checkRoom(gs GPUState, capBytes size.Bytes, units int, newTask, staged bool) error {
	if !gs.Healthy {
		return denied(ReasonUnhealthy, "GPU %s is unhealthy: %s", gs.UUID, gs.HealthReason)
	}
	if newTask && len(gs.Reservations) >= gs.MaxTasks {
		return denied(ReasonTooMany, "GPU %s already runs %d tasks (max_tasks_per_gpu = %d)", gs.UUID, len(gs.Reservations), gs.MaxTasks)
	}
	if gs.ReservedBytes+capBytes > gs.BudgetBytes || gs.ReservedBytes+capBytes < capBytes {
		return denied(ReasonNoFit, "a cap of %s (%d units) does not fit GPU %s: %s already reserved of %s budget (%s free)",
			capBytes, units, gs.UUID, gs.ReservedBytes, gs.BudgetBytes.A(), subFloor(gs.BudgetBytes, gs.ReservedBytes))
	}
	if gs.Lending {
		return nil
	}
	if gs.BorrowWaiting && !staged {
		return denied(ReasonBorrowed, "GPU %s: %s", gs.UUID, descBorrowWait)
	}
	if gs.BorrowHeld && !staged {
		return denied(ReasonBorrowed, "GPU %s: %s", gs.UUID, descBorrowHold)
	}
	if capBytes > gs.Free() {
		return denied(ReasonBorrowed, "a cap of %s (%d units) does not fit GPU %s beside what borrowers hold: %s reserved and %s borrowed of %s budget (%s free)",
			capBytes, units, gs.UUID, gs.ReservedBytes, gs.BorrowedBytes, gs.BudgetBytes.A(), gs.Free())
	}
	return nil
}

// unitsFor is how many whole units a cap of b rounds up to; false when the rounding overflows
// or the count passes any real GPU's (maxUnitNumber).
func unitsFor(b, unit size.Bytes) (int, bool) {
	if b+unit-1 < b {
		return 0, false
	}
	n := (b + unit - 1) / unit
	if n > maxUnitNumber {
		return 0, false
	}
	return int(n), true
}

// ReserveOption adjusts a reservation ReserveBytes or ReserveIDs makes.
type ReserveOption func(*Reservation)

// WithLimit lets the task borrow up to limit (see Reservation.LimitBytes); a limit at or below
// the cap borrows nothing.
func WithLimit(limit size.Bytes) ReserveOption {
	return func(r *Reservation) {
		if limit > r.CapBytes {
			r.LimitBytes = limit
		}
	}
}

// ReserveBytes admits a `gpufrac run` job (Source "runner"): capBytes rounds up to whole units
// and the ledger picks the lowest free instance IDs itself.
func (l *Ledger) ReserveBytes(uuid string, capBytes size.Bytes, task Task, opts ...ReserveOption) (Reservation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, err := l.begin()
	if err != nil {
		return Reservation{}, err
	}
	if capBytes == 0 {
		return Reservation{}, denied(ReasonNoIDs, "a cap of 0 bytes asks for no memory units")
	}
	if _, ok := l.st.gpus[uuid]; !ok {
		return Reservation{}, denied(ReasonUnknownIDs, "no known GPU %q", uuid)
	}
	l.advanceHold(uuid, l.now())
	gs := l.st.gpuState(uuid)
	units, ok := unitsFor(capBytes, gs.UnitBytes)
	if !ok {
		return Reservation{}, denied(ReasonNoFit, "a cap of %s does not fit GPU %s: its budget is %s", capBytes, uuid, gs.BudgetBytes)
	}
	rounded := size.Bytes(units) * gs.UnitBytes
	var asked Reservation
	asked.CapBytes = rounded
	for _, o := range opts {
		o(&asked)
	}
	if err := checkRoom(gs, rounded, units, true, asked.StagedFor > 0); err != nil {
		return Reservation{}, err
	}
	var ids []string
	if asked.StagedFor > 0 {
		// Its units are free but need not look placeable: a borrower's wait withholds them
		// from Nomad, not from a staged start (checkRoom). These are every free unit, the
		// placeable ones among them, so none is looked for again (it would be taken twice).
		ids = l.st.freeIDs(uuid, gs.Units, units, nil)
	} else {
		for _, in := range gs.Instances {
			if len(ids) == units {
				break
			}
			if in.Healthy && in.Token == "" {
				ids = append(ids, in.ID)
			}
		}
	}
	if len(ids) < units {
		return Reservation{}, denied(ReasonNoFit, "a cap of %s (%d units) does not fit GPU %s: only %d free units", rounded, units, uuid, len(ids))
	}
	r := Reservation{GPU: uuid, InstanceIDs: ids, CapBytes: rounded, Task: task, Source: SourceRunner, Holder: l.opts.Holder}
	for _, o := range opts {
		o(&r)
	}
	if r.StagedFor > 0 {
		// Promised in whole units, as Grant grants it: what the task is told is what it gets.
		su, ok := unitsFor(r.StagedFor, gs.UnitBytes)
		if !ok || su > gs.Units {
			l.restore(prev)
			return Reservation{}, denied(ReasonNoFit, "a staged cap of %s does not fit GPU %s: its budget is %s", r.StagedFor, uuid, gs.BudgetBytes)
		}
		r.StagedFor = size.Bytes(su) * gs.UnitBytes
	}
	if r.LimitBytes > gs.TotalBytes {
		l.restore(prev)
		return Reservation{}, fmt.Errorf("%w: a limit of %s is more than GPU %s has (%s)", ErrBadInput, r.LimitBytes, uuid, gs.TotalBytes)
	}
	return l.add(prev, r)
}

// add stores an admitted reservation with a fresh token and commits it.
func (l *Ledger) add(prev *state, r Reservation) (Reservation, error) {
	tok, err := l.opts.NewToken()
	if err != nil {
		l.restore(prev)
		return Reservation{}, err
	}
	if len(tok) < 16 {
		l.restore(prev)
		return Reservation{}, fmt.Errorf("ledger: token generator made a %d-character token; want at least 16", len(tok))
	}
	if _, dup := l.st.res[tok]; dup {
		l.restore(prev)
		return Reservation{}, fmt.Errorf("ledger: token generator repeated token %s", RedactToken(tok))
	}
	r.Token = tok
	r.CreatedAt = l.now()
	l.st.res[tok] = r
	for _, id := range r.InstanceIDs {
		l.st.byID[id] = tok
	}
	if err := l.commit(prev, true); err != nil {
		return Reservation{}, err
	}
	l.log.Info("reserved", "token", RedactToken(tok), "gpu", r.GPU, "cap", r.CapBytes.String(), "units", len(r.InstanceIDs),
		"source", r.Source, "task", r.Task.String())
	return cloneRes(r), nil
}

// restore puts back the state from before a change that will not be committed. With NoPersist
// there is no copy; changes made before the failure (ended reservations) then stay, which is
// harmless because they are decisions already taken.
func (l *Ledger) restore(prev *state) {
	l.cache = nil
	if prev != nil {
		l.st = prev
	}
}

// end removes a reservation, and its GPU too when the GPU is gone and held nothing else.
func (l *Ledger) end(tok string) {
	r := l.st.res[tok]
	delete(l.st.res, tok)
	delete(l.seenStored, tok)
	l.st.dropIDs(tok, r.InstanceIDs)
	if g, ok := l.st.gpus[r.GPU]; ok && !g.Detected && len(l.st.reservationsOn(r.GPU)) == 0 {
		delete(l.st.gpus, r.GPU)
		l.log.Info("forgetting undetected GPU: its last reservation ended", "gpu", r.GPU)
		return
	}
	l.lookHold(r.GPU, l.now(), true)
}

func latest(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}

func cloneRes(r Reservation) Reservation {
	r.InstanceIDs = slices.Clone(r.InstanceIDs)
	return r
}

// Release ends a reservation, e.g. when `gpufrac run` sees its job exit.
func (l *Ledger) Release(token, reason string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, err := l.begin()
	if err != nil {
		return err
	}
	r, ok := l.st.res[token]
	if !ok {
		return fmt.Errorf("%w: token %s", ErrNoReservation, RedactToken(token))
	}
	l.end(token)
	if err := l.commit(prev, true); err != nil {
		return err
	}
	l.log.Info("released", "token", RedactToken(token), "gpu", r.GPU, "task", r.Task.String(), "reason", reason)
	return nil
}

// Reservation returns the reservation that token names.
func (l *Ledger) Reservation(token string) (Reservation, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.st.res[token]
	return cloneRes(r), ok
}

// Reservations returns every reservation, oldest first.
func (l *Ledger) Reservations() []Reservation {
	l.mu.Lock()
	defer l.mu.Unlock()
	rs := l.st.allReservations()
	for i := range rs {
		rs[i] = cloneRes(rs[i])
	}
	return rs
}

// Seen records that a live process carries token now, and fills Task fields that were empty
// (the watchdog learns the job and task names from the process). SeenAt is committed to disk
// only when it lags by more than a quarter of Grace, so a frequent watchdog costs no fsync per
// sample; the lag is harmless because after a restart every reservation gets a full Grace anyway.
func (l *Ledger) Seen(token string, task Task) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	r, ok := l.st.res[token]
	if !ok {
		return fmt.Errorf("%w: token %s", ErrNoReservation, RedactToken(token))
	}
	next := r
	fill := func(dst *string, src string) {
		if *dst == "" {
			*dst = src
		}
	}
	fill(&next.Task.AllocID, task.AllocID)
	fill(&next.Task.JobName, task.JobName)
	fill(&next.Task.TaskName, task.TaskName)
	fill(&next.Task.Template, task.Template)
	fill(&next.Task.Namespace, task.Namespace)
	now := l.now()
	next.SeenAt = now
	taskChanged := next.Task != r.Task
	stale := now.Sub(l.seenStored[token]) > l.opts.Grace/4
	l.cache = nil
	if !taskChanged && !stale {
		l.st.res[token] = next
		return nil
	}
	prev, err := l.begin()
	if err != nil {
		return err
	}
	l.st.res[token] = next
	if err := l.commit(prev, taskChanged); err != nil {
		return err
	}
	l.seenStored[token] = now
	return nil
}

// ExpireUnseen ends and returns the reservations that no live process has carried for Grace,
// counted from the latest of creation, last sighting and the opening of this Ledger.
func (l *Ledger) ExpireUnseen() ([]Reservation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, err := l.begin()
	if err != nil {
		return nil, err
	}
	now := l.now()
	var gone []Reservation
	for _, r := range l.st.allReservations() {
		last := latest(r.CreatedAt, r.SeenAt, l.opened)
		if now.Sub(last) >= l.opts.Grace {
			gone = append(gone, r)
		}
	}
	return l.endAll(prev, gone, func(r Reservation) {
		l.log.Info("reservation expired: no live process carried it", "token", RedactToken(r.Token), "gpu", r.GPU,
			"task", r.Task.String(), "grace", l.opts.Grace)
	})
}

// endAll ends the gone reservations in one commit and, once it holds, logs each; with none
// gone it commits nothing.
func (l *Ledger) endAll(prev *state, gone []Reservation, logEnd func(Reservation)) ([]Reservation, error) {
	if len(gone) == 0 {
		return nil, nil
	}
	for _, r := range gone {
		l.end(r.Token)
	}
	if err := l.commit(prev, true); err != nil {
		return nil, err
	}
	for _, r := range gone {
		logEnd(r)
	}
	return gone, nil
}

// ReleaseOrphans ends every reservation whose Holder alive says is gone (a gpufrac run killed
// with SIGKILL, or that crashed), and returns them. Their jobs died with it (the runner starts
// them with a parent-death signal), so nothing waits out the grace for them.
func (l *Ledger) ReleaseOrphans(alive func(Holder) bool) ([]Reservation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	var gone []Reservation
	for _, r := range l.st.allReservations() {
		if r.Holder != nil && !alive(*r.Holder) {
			gone = append(gone, r)
		}
	}
	if len(gone) == 0 {
		return nil, nil
	}
	prev, err := l.begin()
	if err != nil {
		return nil, err
	}
	return l.endAll(prev, gone, func(r Reservation) {
		l.log.Info("reservation released: its holder is gone", "token", RedactToken(r.Token), "gpu", r.GPU,
			"task", r.Task.String(), "holder", r.Holder.String())
	})
}

// Shrink lowers a runner reservation's cap to capBytes (rounded up to whole units) and frees
// the units above it, keeping the token, so the watchdog enforces the lower cap from its next
// sample: `gpufrac run` starts a probe under a protective cap (half the GPU's budget) and lowers
// it to the cap its footprint earned when the probe window ends, while the job runs on. A reservation
// never grows in place (growing needs admission), and a Nomad reservation's instance IDs belong
// to Nomad's allocation, so only runner reservations shrink.
func (l *Ledger) Shrink(token string, capBytes size.Bytes) (Reservation, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, r, err := l.beginOn(token)
	if err != nil {
		return Reservation{}, err
	}
	if r.Source != SourceRunner {
		return Reservation{}, fmt.Errorf("%w: reservation %s comes from %s; only runner reservations shrink", ErrBadInput, RedactToken(token), r.Source)
	}
	unit := l.st.capacity(r.GPU).UnitBytes
	if capBytes == 0 || unit == 0 {
		return Reservation{}, fmt.Errorf("%w: a cap of %s leaves reservation %s no memory unit", ErrBadInput, capBytes, RedactToken(token))
	}
	units, ok := unitsFor(capBytes, unit)
	if !ok || units > len(r.InstanceIDs) {
		return Reservation{}, fmt.Errorf("%w: a cap of %s is more than reservation %s holds (%s, %d units): a reservation does not grow in place",
			ErrBadInput, capBytes, RedactToken(token), r.CapBytes, len(r.InstanceIDs))
	}
	if units == len(r.InstanceIDs) {
		return cloneRes(r), nil
	}
	next := cloneRes(r)
	l.st.dropIDs(token, next.InstanceIDs[units:])
	next.InstanceIDs = next.InstanceIDs[:units]
	next.CapBytes = size.Bytes(units) * unit
	l.st.res[token] = next
	if err := l.commit(prev, true); err != nil {
		return Reservation{}, err
	}
	l.log.Info("cap lowered in place", "token", RedactToken(token), "gpu", r.GPU, "from", r.CapBytes.String(), "to", next.CapBytes.String(),
		"units", units, "task", r.Task.String())
	return cloneRes(next), nil
}
