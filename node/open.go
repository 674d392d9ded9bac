package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
)

// OpenLedger opens the ledger in dir and releases the reservations whose holder is gone (a
// `gpufrac run` or `gpufrac probe` killed outright took its jobs with it but left its
// reservations: they go now, not after the grace), and stops what those jobs left running
// (StopLeftBehind). It returns those it released; failing to release them is logged, not fatal:
// the grace ends them later.
func OpenLedger(dir string, opts ledger.Options) (*ledger.Ledger, []ledger.Reservation, error) {
	led, gone, _, err := openLedger(dir, opts)
	return led, gone, err
}

// openLedger is OpenLedger, with the PIDs of the left-behind processes it stopped, by token.
func openLedger(dir string, opts ledger.Options) (*ledger.Ledger, []ledger.Reservation, map[string][]int, error) {
	led, err := ledger.Open(dir, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	gone, err := led.ReleaseOrphans(HolderAlive)
	if err != nil && opts.Logger != nil {
		opts.Logger.Named("node").Warn("cannot release the reservations of a gpufrac process that is gone", "error", err)
	}
	stopped := StopLeftBehind(gone)
	if opts.Logger != nil {
		for tok, pids := range stopped {
			opts.Logger.Named("node").Warn("stopped the processes a job of a gpufrac process that is gone left running",
				"token", ledger.RedactToken(tok), "pids", pids)
		}
	}
	return led, gone, stopped, nil
}

// SyncGPUs records the GPUs the backend lists, minus those skip names, in the ledger. A GPU the
// backend could not name (UUID "": NVML could not open it or read its UUID, as when it fell off
// the bus) is left out: nothing can be reserved on a GPU no one can address, and the ledger
// refuses a whole inventory that holds one, which would keep every other GPU's health (and
// `gpufrac run` itself) from being recorded. A GPU it knew under its UUID stays, undetected,
// while reservations remain on it.
func SyncGPUs(led *ledger.Ledger, devs []gpu.Device, skip func(gpu.Device) bool) error {
	infos := make([]ledger.GPUInfo, 0, len(devs))
	for _, d := range devs {
		if d.UUID == "" || (skip != nil && skip(d)) {
			continue
		}
		infos = append(infos, enforcer.LedgerGPU(d))
	}
	return led.SyncGPUs(infos)
}

// EnforcerConfig is what an enforcer is built from besides the backend and the ledger.
type EnforcerConfig struct {
	Logger hclog.Logger
	MPS    enforcer.MPSOptions
	// Fence is the allocation fence, resolved (enforcer.ResolveFence); its zero value is none.
	Fence enforcer.FenceConfig
	// Borrow is the borrowing PlanBorrowing decided: the fence's side of it is set here.
	Borrow Borrowing
}

// NewEnforcer builds the node's enforcer; it starts nothing (Node.Start runs its watchdog).
func NewEnforcer(b gpu.Backend, led *ledger.Ledger, c EnforcerConfig) (*enforcer.Enforcer, error) {
	fc := c.Fence
	fc.Borrow(enforcer.BorrowRule(c.Borrow.Rule), c.Borrow.Wait)
	// Both front ends build their enforcer here: the ledger admits as the fence places.
	if err := led.SetLending(fc.LendKeep > 0); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return enforcer.New(enforcer.Config{Backend: b, Ledger: led, Logger: c.Logger, MPS: c.MPS, Fence: fc})
}

// Options open a whole node at once, as `gpufrac run` and `gpufrac probe` do; the plugin opens
// its parts one by one (OpenLedger, SyncGPUs, NewEnforcer), retrying each, and joins them with New.
type Options struct {
	Logger  hclog.Logger
	Backend gpu.Backend
	// StateDir holds the ledger; empty keeps it in memory.
	StateDir string
	// Hold marks this process as the holder of the node's reservations, so that they are
	// released at once once it is gone (persistent ledgers only).
	Hold   bool
	Policy policy.Policy
	// BorrowHold is the ledger's rule for pausing admissions where a borrower waited
	// (ledger.Options.BorrowHold); the zero rule holds nothing.
	BorrowHold policy.HoldRule
	// Enforce builds an enforcer (with Fence and Borrow); without it nothing is capped.
	Enforce  bool
	Enforcer EnforcerConfig
	// Node is the admission's configuration; its Borrow is set from Enforcer.Borrow.
	Node Config
	// OnHealth hears of each GPU whose health by the backend changed, after the ledger recorded
	// it (LookHealth); called from the look's goroutine, one GPU at a time.
	OnHealth func(gpu.Device)
	// HealthPeriod is how often Start looks at the backend's health; 0 is HealthPeriod.
	HealthPeriod time.Duration
}

// Opened is a node Open built, with what opening it found.
type Opened struct {
	*Node
	// Devices is the backend's listing, all of it, as recorded in the ledger.
	Devices []gpu.Device
	// Released are the reservations of holders found gone.
	Released []ledger.Reservation
	// LeftBehind are the PIDs, by reservation token, of the processes Released jobs left
	// running, which Open stopped (StopLeftBehind).
	LeftBehind map[string][]int
}

// Open opens the ledger, releases orphans, sets the policy, records the GPUs and builds the
// enforcer: everything but the watchdog (Start) and the GPUs' daemons (Prepare). On error
// nothing stays open.
func Open(ctx context.Context, o Options) (*Opened, error) {
	lopts := ledger.Options{Logger: o.Logger, NoPersist: o.StateDir == "", BorrowHold: o.BorrowHold}
	if o.Hold && !lopts.NoPersist {
		lopts.Holder = SelfHolder()
	}
	led, gone, stopped, err := openLedger(o.StateDir, lopts)
	if err != nil {
		return nil, fmt.Errorf("ledger in %q: %w", o.StateDir, err)
	}
	fail := func(err error) (*Opened, error) {
		return nil, errors.Join(err, led.Close())
	}
	if err := led.SetPolicy(o.Policy); err != nil {
		return fail(fmt.Errorf("ledger policy: %w", err))
	}
	devs, err := o.Backend.Devices(ctx)
	if err != nil {
		return fail(fmt.Errorf("listing GPUs: %w", err))
	}
	if err := SyncGPUs(led, devs, nil); err != nil {
		return fail(fmt.Errorf("ledger GPUs: %w", err))
	}
	var enf *enforcer.Enforcer
	if o.Enforce {
		if o.Enforcer.Logger == nil {
			o.Enforcer.Logger = o.Logger
		}
		if enf, err = NewEnforcer(o.Backend, led, o.Enforcer); err != nil {
			return fail(err)
		}
	}
	cfg := o.Node
	cfg.Borrow, cfg.BorrowMPS = o.Enforcer.Borrow.Rule, o.Enforcer.Borrow.MPS
	if cfg.Logger == nil {
		cfg.Logger = o.Logger
	}
	var e Enforcer // a nil *enforcer.Enforcer would be an interface that is not nil
	if enf != nil {
		e = enf
	}
	n := New(led, e, cfg)
	n.own, n.closeLedger = enf, true
	n.backend = o.Backend
	n.health.turn = make(chan struct{}, 1)
	n.health.last, n.health.onChange, n.health.every = devs, o.OnHealth, o.HealthPeriod
	if n.health.every <= 0 {
		n.health.every = HealthPeriod
	}
	return &Opened{Node: n, Devices: devs, Released: gone, LeftBehind: stopped}, nil
}

// Prepare readies each GPU's daemon for its mode before tasks start (Admit does it again per
// task, for a GPU whose mode changed).
func (n *Node) Prepare(ctx context.Context, gpus []string) error {
	for _, g := range gpus {
		if err := n.prepare(ctx, g); err != nil {
			return err
		}
	}
	return nil
}

// Start runs, until Close, the look at the GPU backend's health every HealthPeriod, and the
// enforcer's watchdog where Open built one: caps, unmanaged use, the token scan, expiry, and
// what borrowers hold written into the ledger. A node that caps nothing (the benchmark's
// uncapped and exclusive arms) follows the health as well: a GPU fallen off the bus must stop
// its admissions there too, not be noticed only when a job fails.
func (n *Node) Start() {
	if n.stop != nil || (n.own == nil && n.backend == nil) {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.stop = cancel
	if n.own != nil {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			_ = n.own.Run(ctx)
		}()
	}
	if n.backend != nil {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.watchHealth(ctx)
		}()
	}
}

// Close stops the watchdog, lets the enforcer give up its tables and stop idle MPS daemons, and
// closes the ledger when Open opened it.
func (n *Node) Close(ctx context.Context) error {
	if n.stop != nil {
		n.stop()
		n.wg.Wait()
		n.stop = nil
	}
	var errs []error
	if n.own != nil {
		errs = append(errs, n.own.Shutdown(ctx))
	}
	if n.closeLedger {
		errs = append(errs, n.led.Close())
	}
	return errors.Join(errs...)
}

// nodeRun is the watchdog's life, owned by Start and Close.
type nodeRun struct {
	own         *enforcer.Enforcer // the enforcer Open built, nil otherwise
	closeLedger bool
	// backend is what Open listed the GPUs with; Start watches their health (LookHealth).
	backend gpu.Backend
	health  healthLook
	stop    context.CancelFunc
	wg      sync.WaitGroup
}
