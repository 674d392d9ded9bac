package ledger

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpufrac/gpufrac/internal/hub"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// DefaultGrace is how long a reservation may go unseen by any live process before it ends.
const DefaultGrace = 2 * time.Minute

// Errors callers can match with errors.Is.
var (
	ErrClosed        = errors.New("ledger is closed")
	ErrUnknownGPU    = errors.New("unknown GPU")
	ErrNoReservation = errors.New("no such reservation")
	ErrBadInput      = errors.New("invalid ledger input")
)

// Options tune a Ledger. The zero value is ready for production use.
type Options struct {
	// Logger is the parent logger; the ledger logs under the sub-name "ledger". nil = no logs.
	Logger hclog.Logger
	// Now is the clock seam for tests; nil = time.Now.
	Now func() time.Time
	// Grace ends a reservation that no live process has carried for this long, counted from
	// max(CreatedAt, SeenAt, the time this Ledger was opened). <= 0 = DefaultGrace.
	Grace time.Duration
	// NewToken makes reservation tokens; nil = 128 bits from crypto/rand as 32 hex digits.
	NewToken func() (string, error)
	// NoPersist keeps the state in memory only: no directory, no lock, no file. It exists for
	// tests and for benchmarks that measure admission apart from the disk.
	NoPersist bool
	// Holder marks every reservation this Ledger makes as held by that process (gpufrac run sets
	// itself), so that once it is gone its reservations are released at once (ReleaseOrphans)
	// instead of after the grace. nil for the plugin: Nomad's tasks hold its reservations.
	Holder *Holder
	// BorrowHold is the rule for pausing admissions where a borrower waited (SetBorrowHold);
	// the zero rule is policy.NoHold.
	BorrowHold policy.HoldRule
}

// Holder is the process this Ledger marks its reservations with (Options.Holder), or nil.
func (l *Ledger) Holder() *Holder { return l.opts.Holder }

// Ledger is one node's admission ledger. All methods are safe for concurrent use.
type Ledger struct {
	mu     sync.Mutex
	opts   Options
	log    hclog.Logger
	dir    string
	dirf   *os.File
	lockf  *os.File
	opened time.Time
	closed bool
	st     *state
	// cache holds computed GPU states until the next change; nil = stale.
	cache map[string]GPUState
	// seenStored is the SeenAt last committed by Seen, per token: Seen commits again only when
	// it lags by more than Grace/4 (the in-memory SeenAt is always the latest sighting).
	seenStored map[string]time.Time

	// changed wakes subscribers (coalesced) after a change that alters a GPUState.
	changed *hub.Hub[struct{}]
	// repairs are what Open found damaged and repaired (Repairs).
	repairs []string
	// failing is the error of the last commit that failed, until one succeeds (commitFailed).
	failing string
	// holdRule is the borrower hold's rule; holdTimer takes the look that ends a hold by time,
	// due at holdWake (zero: not armed). hold.go.
	holdRule  policy.HoldRule
	holdTimer *time.Timer
	holdWake  time.Time
}

// Open opens (or creates, mode 0700) the ledger in dir, takes the exclusive writer lock and
// restores every committed reservation. A second writer gets ErrLocked naming the lock file and
// the holder's PID; a corrupt file or one from a newer gpufrac is an error, never an empty start.
func Open(dir string, opts Options) (*Ledger, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultGrace
	}
	if opts.NewToken == nil {
		opts.NewToken = randomToken
	}
	log := opts.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if err := opts.BorrowHold.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	l := &Ledger{opts: opts, log: log.Named("ledger"), dir: dir, changed: hub.New[struct{}](1), seenStored: map[string]time.Time{},
		holdRule: opts.BorrowHold}
	l.opened = utc(opts.Now())
	if opts.NoPersist {
		l.st = newState()
		l.st.grace = opts.Grace
		return l, nil
	}
	if dir == "" {
		return nil, fmt.Errorf("%w: ledger directory is empty", ErrBadInput)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ledger: create directory %s: %w", dir, err)
	}
	lockf, err := lockDir(filepath.Join(dir, LockFile))
	if err != nil {
		return nil, err
	}
	l.lockf = lockf
	fail := func(err error) (*Ledger, error) {
		if l.dirf != nil {
			l.dirf.Close()
		}
		unlockDir(lockf)
		return nil, err
	}
	if l.dirf, err = os.Open(dir); err != nil {
		return fail(fmt.Errorf("ledger: open directory %s: %w", dir, err))
	}
	// A temp file is a commit that died before its rename; the committed file is intact.
	_ = os.Remove(filepath.Join(dir, StateFile+tempSuffix))
	_ = os.Remove(filepath.Join(dir, ViolationsFile+tempSuffix))
	st, _, err := readState(dir)
	switch {
	case err == nil:
		l.st = st
		st.grace = opts.Grace
		if len(st.gpuDamage) > 0 {
			if err := l.repairState(st.gpuDamage); err != nil {
				return fail(err)
			}
			st.gpuDamage = nil
		}
		if st.damage != "" {
			if err := l.repairViolations(st.damage); err != nil {
				return fail(err)
			}
			st.damage = ""
		}
		l.log.Info("restored ledger", "dir", dir, "generation", st.gen, "gpus", len(st.gpus), "reservations", len(st.res))
	case errors.Is(err, fs.ErrNotExist) && !errors.Is(err, ErrCorrupt):
		if err := orphanViolations(dir); err != nil {
			return fail(err)
		}
		l.st = newState()
		l.st.grace = opts.Grace
		if err := l.commitViolations(nil); err != nil {
			return fail(err)
		}
		if err := l.commit(nil, false); err != nil {
			return fail(err)
		}
		l.log.Info("created empty ledger", "dir", dir)
	default:
		return fail(err)
	}
	return l, nil
}

// Close releases the writer lock and closes every subscription. Committed state stays on disk.
func (l *Ledger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.holdTimer != nil {
		l.holdTimer.Stop()
	}
	l.changed.Close()
	var errs []error
	if l.dirf != nil {
		errs = append(errs, l.dirf.Close())
	}
	if l.lockf != nil {
		errs = append(errs, unlockDir(l.lockf))
	}
	return errors.Join(errs...)
}

func randomToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("ledger: make token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func (l *Ledger) now() time.Time { return utc(l.opts.Now()) }

// begin starts a change: it returns what to restore if the commit fails (nil when nothing can
// fail because nothing is written).
func (l *Ledger) begin() (*state, error) {
	if l.closed {
		return nil, ErrClosed
	}
	if l.opts.NoPersist {
		return nil, nil
	}
	return l.st.clone(), nil
}

// commit writes the state; on failure the previous state comes back, so memory never claims
// what the disk does not hold. notify wakes subscribers when a GPUState changed.
func (l *Ledger) commit(prev *state, notify bool) error {
	l.cache = nil
	l.st.gen++
	if err := l.persist(prev, StateFile, func() ([]byte, error) { return l.st.encode(l.opts.Now()) }); err != nil {
		l.commitFailed(StateFile, err)
		return err
	}
	l.commitSucceeded()
	if notify {
		l.changed.Publish(struct{}{})
	}
	return nil
}

// commitViolations writes the violations file; on failure the previous state comes back.
func (l *Ledger) commitViolations(prev *state) error {
	if err := l.persist(prev, ViolationsFile, l.st.encodeViolations); err != nil {
		l.commitFailed(ViolationsFile, err)
		return err
	}
	l.commitSucceeded()
	return nil
}

// commitFailed logs a failed commit as an error once, and again only for another cause or after
// a commit succeeded: a full disk fails every commit its callers retry (the runner each round,
// several a round, the watchdog each scan), and a line for each buried the terminal in the same
// line five times every 200 ms. Each caller still gets its error.
func (l *Ledger) commitFailed(file string, err error) {
	if err.Error() == l.failing {
		l.log.Debug("commit failed; change rolled back", "file", file, "error", err)
		return
	}
	l.failing = err.Error()
	l.log.Error("commit failed; change rolled back (said once until the cause changes or a commit succeeds)", "file", file, "error", err)
}

// commitSucceeded says that commits succeed again after one failed.
func (l *Ledger) commitSucceeded() {
	if l.failing != "" {
		l.log.Info("commits succeed again", "after", l.failing)
		l.failing = ""
	}
}

// persist writes what encode makes to file, unless the ledger keeps nothing on disk; on
// failure it puts prev (when there is one) back.
func (l *Ledger) persist(prev *state, file string, encode func() ([]byte, error)) error {
	if l.opts.NoPersist {
		return nil
	}
	data, err := encode()
	if err == nil {
		err = writeFile(l.dir, l.dirf, file, data)
	}
	if err != nil {
		if prev != nil {
			l.st = prev
		}
		return err
	}
	return nil
}

// Subscribe returns a channel that receives (coalesced, never blocking the ledger) after every
// change that alters a GPUState, and a function that unsubscribes and closes the channel.
func (l *Ledger) Subscribe() (<-chan struct{}, func()) {
	return l.changed.Subscribe()
}

// SetPolicy validates p and makes it current. Units still reserved are never dropped: a smaller
// budget shows them as unhealthy instances until their tasks end.
func (l *Ledger) SetPolicy(p policy.Policy) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("ledger: policy %q refused: %w", p.Name, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, err := l.begin()
	if err != nil {
		return err
	}
	if l.st.policy == p {
		return nil
	}
	old := l.st.policy
	l.st.policy = p
	if err := l.commit(prev, true); err != nil {
		return err
	}
	l.log.Info("policy set", "name", p.Name, "unit", p.UnitBytes.String(), "headroom", p.HeadroomBytes.String(),
		"max_tasks", p.MaxTasksPerGPU, "mode", p.Mode, "previous", old.Name)
	return nil
}

// Policy is the current policy; policy.Default() until SetPolicy is called.
func (l *Ledger) Policy() policy.Policy {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st.policy
}

// SyncGPUs replaces the inventory. Mode, unmanaged memory and SetHealth of known GPUs carry
// over. A GPU missing from gpus keeps its reservations and shows as unhealthy ("GPU no longer
// detected") until they end; one without reservations is forgotten.
func (l *Ledger) SyncGPUs(gpus []GPUInfo) error {
	seen := map[string]bool{}
	for i, g := range gpus {
		if g.UUID == "" {
			return fmt.Errorf("%w: GPU %d (index %d, model %q) has an empty UUID", ErrBadInput, i, g.Index, g.Model)
		}
		if seen[g.UUID] {
			return fmt.Errorf("%w: GPU %s is listed twice", ErrBadInput, g.UUID)
		}
		if g.TotalBytes > MaxGPUBytes {
			return fmt.Errorf("%w: GPU %s (index %d, model %q) reports %s of memory (%d bytes), more than any GPU has (at most %s)",
				ErrBadInput, g.UUID, g.Index, g.Model, g.TotalBytes, uint64(g.TotalBytes), MaxGPUBytes)
		}
		seen[g.UUID] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, err := l.begin()
	if err != nil {
		return err
	}
	next := make(map[string]gpuRec, len(gpus))
	for _, g := range gpus {
		rec := l.st.gpus[g.UUID]
		if !rec.Detected && rec.Info.UUID != "" {
			l.log.Info("GPU detected again", "gpu", g.UUID)
		}
		rec.Info, rec.Detected = g, true
		next[g.UUID] = rec
	}
	for u, rec := range l.st.gpus {
		if seen[u] {
			continue
		}
		if n := len(l.st.reservationsOn(u)); n > 0 {
			if rec.Detected {
				l.log.Warn("GPU no longer detected; keeping its reservations until they end", "gpu", u, "reservations", n)
			}
			rec.Detected = false
			next[u] = rec
		} else {
			l.log.Info("GPU no longer detected; forgetting it", "gpu", u)
		}
	}
	if reflect.DeepEqual(next, l.st.gpus) {
		return nil
	}
	l.st.gpus = next
	return l.commit(prev, true)
}

// openGPU is GPU uuid's record while the ledger is open; the caller holds l.mu.
func (l *Ledger) openGPU(uuid string) (gpuRec, error) {
	if l.closed {
		return gpuRec{}, ErrClosed
	}
	rec, ok := l.st.gpus[uuid]
	if !ok {
		return gpuRec{}, fmt.Errorf("%w %q", ErrUnknownGPU, uuid)
	}
	return rec, nil
}

// updateGPU applies fn to a known GPU and commits when it changed anything.
func (l *Ledger) updateGPU(uuid string, fn func(*gpuRec)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec, err := l.openGPU(uuid)
	if err != nil {
		return err
	}
	next := rec
	fn(&next)
	if next == rec {
		return nil
	}
	prev, err := l.begin()
	if err != nil {
		return err
	}
	l.st.gpus[uuid] = next
	return l.commit(prev, true)
}

// SetMode sets one GPU's enforcement mode; "" follows the policy's default mode.
func (l *Ledger) SetMode(uuid string, m policy.Mode) error {
	switch m {
	case "", policy.ModeMPS, policy.ModeIsolated:
	default:
		return fmt.Errorf("%w: mode %q for GPU %s: want %q, %q or \"\" (policy default)", ErrBadInput, m, uuid, policy.ModeMPS, policy.ModeIsolated)
	}
	return l.updateGPU(uuid, func(g *gpuRec) { g.Mode = m })
}

// SetUnmanaged records GPU memory held by processes without a reservation; it shrinks the budget.
// Callers that sample often should round the figure, since every change is a commit.
func (l *Ledger) SetUnmanaged(uuid string, b size.Bytes) error {
	return l.updateGPU(uuid, func(g *gpuRec) { g.UnmanagedBytes = b })
}

// SetBorrowed records what tasks on a GPU hold past their guarantees and whether one of their
// allocations waits for memory to come free, as the allocation fence's table says: admission
// counts the bytes as taken and admits nothing while an allocation waits, and the free units
// they cover are advertised unhealthy. Unlike SetUnmanaged it writes nothing to disk (it
// changes with every allocation of a borrower; the fence's tables are its record), and it wakes
// subscribers only when what is placeable changes: a unit more or less withheld, a wait begun
// or ended.
func (l *Ledger) SetBorrowed(uuid string, b size.Bytes, waiting bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec, err := l.openGPU(uuid)
	if err != nil {
		return err
	}
	if rec.Borrowed == b && rec.BorrowWaiting == waiting {
		l.advanceHold(uuid, l.now())
		return nil
	}
	unit := l.st.policy.UnitBytes
	units := func(b size.Bytes) size.Bytes {
		if unit == 0 {
			return b
		}
		return (b + unit - 1) / unit
	}
	placeable := units(rec.Borrowed) != units(b) || rec.BorrowWaiting != waiting
	rec.Borrowed, rec.BorrowWaiting = b, waiting
	l.st.gpus[uuid] = rec
	l.cache = nil
	if placeable {
		l.changed.Publish(struct{}{})
	}
	l.advanceHold(uuid, l.now())
	return nil
}

// SetHealth marks a GPU unhealthy for a reason the backend cannot see (e.g. its MPS daemon is
// down), or healthy again. It combines with GPUInfo.Healthy: both must be healthy.
func (l *Ledger) SetHealth(uuid string, healthy bool, reason string) error {
	return l.updateGPU(uuid, func(g *gpuRec) {
		g.Unhealthy = !healthy
		g.UnhealthyReason = ""
		if !healthy {
			g.UnhealthyReason = reason
		}
	})
}

// State is one GPU's capacity now.
func (l *Ledger) State(uuid string) (GPUState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.st.gpus[uuid]; !ok {
		return GPUState{}, fmt.Errorf("%w %q", ErrUnknownGPU, uuid)
	}
	return cloneState(l.cached(uuid)), nil
}

// cached returns the GPU's state, computing it only after a change: fingerprint passes call
// States far more often than the ledger changes.
func (l *Ledger) cached(uuid string) GPUState {
	l.advanceHold(uuid, l.now())
	if l.cache == nil {
		l.cache = map[string]GPUState{}
	}
	st, ok := l.cache[uuid]
	if !ok {
		st = l.st.gpuState(uuid)
		l.cache[uuid] = st
	}
	return st
}

// States is every GPU's capacity, in index order.
func (l *Ledger) States() []GPUState {
	l.mu.Lock()
	defer l.mu.Unlock()
	order := l.st.gpuOrder()
	out := make([]GPUState, 0, len(order))
	for _, u := range order {
		out = append(out, cloneState(l.cached(u)))
	}
	return out
}
