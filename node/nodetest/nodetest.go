// Package nodetest is the one table of admission cases that both front ends, the Nomad plugin
// and `gpufrac run`'s scheduler, are tested against through node/: the same inputs must bring
// the same decision, by construction. It holds a fake of the enforcer's fence for the cases
// that need one (borrowers, a table with no room), which the scheduler's own tests use too.
package nodetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// GPU is the one GPU of every case: 80 GiB, so the default policy's budget is 78 GiB in 78
// units of 1 GiB.
const (
	GPU      = "GPU-nodetest-0"
	GPUBytes = 80 * size.GiB
	Budget   = 78 * size.GiB
	Unit     = policy.DefaultUnitBytes
)

// Fence is the enforcer as admission sees it, with the fence's answers set by the case.
type Fence struct {
	mu           sync.Mutex
	borrowed     size.Bytes
	waiting      bool
	noRoom       bool
	room         size.Bytes // > 0: a table whose guarantees pass it has no room
	prepErr      error
	synced       int
	waiters      []string
	stageWaiters []string
}

// NewFence is a fence that shows borrowed bytes and a waiting allocation as given, and whose
// table has no room for a new guarantee when noRoom.
func NewFence(borrowed size.Bytes, waiting, noRoom bool) *Fence {
	return &Fence{borrowed: borrowed, waiting: waiting, noRoom: noRoom}
}

// Set changes what the fence shows of borrowers, as their allocations come and go.
func (f *Fence) Set(borrowed size.Bytes, waiting bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.borrowed, f.waiting = borrowed, waiting
}

// SetNoRoom says whether the table has room for the next guarantee.
func (f *Fence) SetNoRoom(noRoom bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noRoom = noRoom
}

// SetRoom makes the table refuse a sync whose guarantees together pass n (0: no such bound).
func (f *Fence) SetRoom(n size.Bytes) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.room = n
}

// PrepareGPU fails with the case's error.
func (f *Fence) PrepareGPU(context.Context, string) error { return f.prepErr }

// EnvOptions names a fence directory, as a fenced enforcer does.
func (f *Fence) EnvOptions(string) enforcer.EnvOptions {
	return enforcer.EnvOptions{FenceDir: "/nodetest/fence"}
}

// SyncFence counts the call and has no room when the case says so.
func (f *Fence) SyncFence(st ledger.GPUState) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.synced++
	var held size.Bytes
	for _, r := range st.Reservations {
		held += r.CapBytes
	}
	if f.noRoom || f.room > 0 && held > f.room {
		return &fence.NoRoomError{Path: "nodetest", Tokens: []string{"t"}, Borrowed: f.borrowed}
	}
	return nil
}

// SyncFenceOr is SyncFence, with undo run and the table written again where it has no room.
func (f *Fence) SyncFenceOr(st ledger.GPUState, undo func(error) error) error {
	err := f.SyncFence(st)
	if err == nil {
		return nil
	}
	if uerr := undo(err); uerr != nil {
		return errors.Join(err, uerr)
	}
	_ = f.SyncFence(st)
	return err
}

// FenceUse is what the case's borrowers hold.
func (f *Fence) FenceUse(string) (size.Bytes, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.borrowed, f.waiting
}

// SetWaiters names the tasks (by token) whose allocations wait, as FenceWaiters reports them.
func (f *Fence) SetWaiters(tokens ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waiters = tokens
}

// SetStageWaiters names the staged tasks (by token) whose allocations wait for their grants.
func (f *Fence) SetStageWaiters(tokens ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stageWaiters = tokens
}

// FenceWaiters are the tasks SetWaiters and SetStageWaiters named.
func (f *Fence) FenceWaiters(string) ([]string, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiters, f.stageWaiters
}

// Fenced is true: the fence holds caps.
func (f *Fence) Fenced() bool { return true }

// Synced is how many times a table was written.
func (f *Fence) Synced() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.synced
}

// Case is one admission: what the GPU holds before, and what a task asks.
type Case struct {
	Name string
	// Mode of the GPU; "" = isolated.
	Mode policy.Mode
	// Held is the guarantee another task holds before; Orphaned makes its holder a process
	// that is gone, so opening the node releases it.
	Held     size.Bytes
	Orphaned bool
	// Borrowed and Waiting are what the fence shows of borrowers; NoRoom makes its table
	// refuse the next guarantee; PrepErr fails readying the GPU.
	Borrowed size.Bytes
	Waiting  bool
	NoRoom   bool
	PrepErr  error
	// Unhealthy marks the GPU unhealthy.
	Unhealthy bool
	// Past is what the fence showed of borrowers before, on the case's clock, which starts at
	// Epoch; the admission comes at At, with Borrowed and Waiting as the fence shows then. The
	// ledger holds borrowers by policy.DefaultHold (1 s quiet, 30 s bound) in every case.
	Past []Look
	At   time.Duration
	// Cap is what the task asks, in whole units.
	Cap size.Bytes

	// Admit is whether it must be admitted, and Limit the limit it must get (0: none).
	Admit bool
	Limit size.Bytes
	// Err is what a refusal matches (errors.Is), for the front ends that say why.
	Err error
}

// Look is the fence's answer at At on the case's clock.
type Look struct {
	At       time.Duration
	Borrowed size.Bytes
	Waiting  bool
}

// Epoch is where every case's clock starts.
var Epoch = time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)

// Cases is the table.
func Cases() []Case {
	// A borrower waited, then grew into what came free and stopped waiting at 0.5 s: it is
	// served once a second passed with no wait and no growth (issue 25).
	served := []Look{{0, 10 * size.GiB, true}, {500 * time.Millisecond, 20 * size.GiB, false}}
	// A borrower that never fits waits throughout; its allocation fails when the hold ends.
	never := []Look{{0, 10 * size.GiB, true}, {15 * time.Second, 10 * size.GiB, true}, {29 * time.Second, 10 * size.GiB, true}}
	return []Case{
		{Name: "fits", Cap: 20 * size.GiB, Admit: true, Limit: Budget},
		{Name: "fits beside a guarantee", Held: 50 * size.GiB, Cap: 28 * size.GiB, Admit: true, Limit: Budget},
		{Name: "does not fit", Held: 60 * size.GiB, Cap: 20 * size.GiB, Err: ledger.ErrDenied},
		{Name: "borrowed memory present", Held: 40 * size.GiB, Borrowed: 30 * size.GiB, Cap: 20 * size.GiB, Err: node.ErrBorrowed},
		{Name: "fits beside borrowed memory", Held: 40 * size.GiB, Borrowed: 10 * size.GiB, Cap: 20 * size.GiB, Admit: true, Limit: Budget},
		{Name: "an allocation waits", Waiting: true, Borrowed: size.GiB, Cap: 4 * size.GiB, Err: node.ErrBorrowed},
		{Name: "a borrower waited, then was served after 0.5 s: refused until 1 s quiet", Past: served, At: 1200 * time.Millisecond,
			Borrowed: 20 * size.GiB, Cap: 20 * size.GiB, Err: node.ErrBorrowed},
		{Name: "a borrower waited, then was served after 0.5 s: admitted after 1 s quiet", Past: served, At: 1500 * time.Millisecond,
			Borrowed: 20 * size.GiB, Cap: 20 * size.GiB, Admit: true, Limit: Budget},
		{Name: "a borrower that never fits: refused within the bound", Past: never, At: 29500 * time.Millisecond,
			Borrowed: 10 * size.GiB, Cap: 20 * size.GiB, Err: node.ErrBorrowed},
		{Name: "a borrower that never fits: admission resumes at the bound", Past: never, At: 30 * time.Second,
			Borrowed: 10 * size.GiB, Cap: 20 * size.GiB, Admit: true, Limit: Budget},
		{Name: "fence has no room: everything undone", NoRoom: true, Cap: 20 * size.GiB, Err: node.ErrBorrowed},
		{Name: "orphan released", Held: 70 * size.GiB, Orphaned: true, Cap: 20 * size.GiB, Admit: true, Limit: Budget},
		{Name: "unhealthy GPU", Unhealthy: true, Cap: 4 * size.GiB, Err: ledger.ErrDenied},
		{Name: "mps: no borrowing", Mode: policy.ModeMPS, Cap: 20 * size.GiB, Admit: true},
		{Name: "mps daemon cannot start: undone", Mode: policy.ModeMPS, PrepErr: errors.New("nodetest: no daemon"), Cap: 20 * size.GiB, Err: node.ErrUnavailable},
	}
}

// Setup is a case's node, ready for a front end: its ledger holds the GPU and what the case
// holds before, its enforcer is the case's fence, and it borrows with BorrowWait.
type Setup struct {
	Node   *node.Node
	Ledger *ledger.Ledger
	Fence  *Fence
	// Before is the number of reservations the ledger holds before the front end admits.
	Before int
}

// deadHolder is no process: Linux's PIDs stay below 4194304.
var deadHolder = &ledger.Holder{PID: 1 << 23, StartTicks: 1}

// Setup builds the case's node.
func (c Case) Setup(tb testing.TB) Setup {
	tb.Helper()
	dir := tb.TempDir()
	if c.Held > 0 {
		// Held by another task in an earlier life of the ledger; by a process that is gone,
		// when orphaned (Nomad's tasks hold theirs with no holder).
		var holder *ledger.Holder
		if c.Orphaned {
			holder = deadHolder
		}
		led, err := ledger.Open(dir, ledger.Options{Holder: holder})
		if err != nil {
			tb.Fatal(err)
		}
		withGPU(tb, led)
		if _, err := led.ReserveBytes(GPU, c.Held, ledger.Task{JobName: "before", TaskName: "before"}); err != nil {
			tb.Fatal(err)
		}
		if err := led.Close(); err != nil {
			tb.Fatal(err)
		}
	}
	var clock atomic.Int64 // the ledger's hold timer reads it from its own goroutine
	now := func() time.Time { return Epoch.Add(time.Duration(clock.Load())) }
	led, gone, err := node.OpenLedger(dir, ledger.Options{Now: now, BorrowHold: policy.DefaultHold})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { led.Close() })
	if orphans := map[bool]int{true: 1}[c.Orphaned]; len(gone) != orphans {
		tb.Fatalf("opening the node released %d reservations of holders that are gone, want %d", len(gone), orphans)
	}
	withGPU(tb, led)
	if c.Mode != "" {
		if err := led.SetMode(GPU, c.Mode); err != nil {
			tb.Fatal(err)
		}
	}
	if c.Unhealthy {
		if err := led.SetHealth(GPU, false, "nodetest: XID 79"); err != nil {
			tb.Fatal(err)
		}
	}
	for _, l := range c.Past {
		clock.Store(int64(l.At))
		if err := led.SetBorrowed(GPU, l.Borrowed, l.Waiting); err != nil {
			tb.Fatal(err)
		}
	}
	clock.Store(int64(c.At))
	f := NewFence(c.Borrowed, c.Waiting, c.NoRoom)
	f.prepErr = c.PrepErr
	n := node.New(led, f, node.Config{Borrow: node.BorrowWait})
	return Setup{Node: n, Ledger: led, Fence: f, Before: len(led.Reservations())}
}

// Run holds one front end to every case: admit is its admission of the case's cap on the case's
// node (the reservation it made, whether it admitted, and the error of a refusal, nil where the
// front end gives none), judged by Check and, for an error, CheckErr.
func Run(t *testing.T, admit func(t *testing.T, c Case, s Setup) (res ledger.Reservation, admitted bool, err error)) {
	for _, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) {
			s := c.Setup(t)
			res, admitted, err := admit(t, c, s)
			c.Check(t, s, admitted, res)
			if err != nil {
				c.CheckErr(t, err)
			}
		})
	}
}

// CheckErr holds a front end's refusal to the case's reason: err matches c.Err.
func (c Case) CheckErr(tb testing.TB, err error) {
	tb.Helper()
	if c.Err != nil && !errors.Is(err, c.Err) {
		tb.Fatalf("%s: refused with %v, want %v", c.Name, err, c.Err)
	}
}

// Check holds a front end's decision to the case's: admitted or not, with the limit the case
// wants, and nothing left in the ledger of an admission that failed.
func (c Case) Check(tb testing.TB, s Setup, admitted bool, res ledger.Reservation) {
	tb.Helper()
	if admitted != c.Admit {
		tb.Fatalf("%s: admitted %v, want %v", c.Name, admitted, c.Admit)
	}
	if n := s.Fence.Synced(); admitted && n == 0 {
		tb.Fatalf("%s: admitted with no cap written into the fence", c.Name)
	}
	want := s.Before
	if admitted {
		want++
		if res.CapBytes != c.Cap || res.LimitBytes != c.Limit {
			tb.Fatalf("%s: cap %s limit %s, want cap %s limit %s", c.Name, res.CapBytes, res.LimitBytes, c.Cap, c.Limit)
		}
	}
	if n := len(s.Ledger.Reservations()); n != want {
		tb.Fatalf("%s: the ledger holds %d reservations, want %d: a refused admission was kept", c.Name, n, want)
	}
	if c.NoRoom && s.Fence.Synced() == 0 {
		tb.Fatalf("%s: the fence was never asked", c.Name)
	}
}

// withGPU gives the ledger the default policy and the cases' GPU.
func withGPU(tb testing.TB, led *ledger.Ledger) {
	tb.Helper()
	if err := led.SetPolicy(policy.Default()); err != nil {
		tb.Fatal(err)
	}
	if err := led.SyncGPUs([]ledger.GPUInfo{{UUID: GPU, Model: "H100", TotalBytes: GPUBytes, Healthy: true}}); err != nil {
		tb.Fatal(err)
	}
}

// FreeIDs are n instance IDs of the GPU that no reservation holds, as Nomad would place a
// request of n units (on units it saw free, perhaps before borrowers took them); past the units
// the GPU has, IDs beyond them, which admission refuses as Nomad never would send them.
func FreeIDs(led *ledger.Ledger, n int) []string {
	st, _ := led.State(GPU)
	var out []string
	for _, in := range st.Instances {
		if len(out) < n && in.Token == "" {
			out = append(out, in.ID)
		}
	}
	for k := len(st.Instances); len(out) < n; k++ {
		out = append(out, ledger.InstanceID(GPU, k))
	}
	return out
}
