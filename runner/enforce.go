package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// MPSOptions locate the MPS control daemons (mps mode on real GPUs).
type MPSOptions struct {
	// ControlBinary is nvidia-cuda-mps-control; empty = found on PATH.
	ControlBinary string
	// Root holds <Root>/<gpu-uuid>/pipe and log; empty = /run/gpufrac/mps for root, else
	// gpufrac-mps-<uid> in the temporary directory (pipe paths must stay short).
	Root string
}

// guard is what the runner needs from the enforcer.
type guard interface {
	EnvOptions(uuid string) enforcer.EnvOptions
	SyncFence(st ledger.GPUState) error
	FenceUse(uuid string) (size.Bytes, bool)
	FenceTask(uuid, token string) (fence.TaskUse, bool)
	Follow(every time.Duration, fn func(enforcer.Sample)) (stop func())
	Shutdown(ctx context.Context) error
}

// guardNotes are what a run's first lines say about the fence and borrowing.
type guardNotes struct {
	fence, borrow string
	borrows       bool
}

// Fence settings of Options.Fence.
const (
	FenceAuto = string(enforcer.FenceAuto)
	FenceOn   = string(enforcer.FenceOn)
	FenceOff  = string(enforcer.FenceOff)
)

// fenceConfig decides the allocation fence of a run; its tables live beside the ledger, or in
// the results directory when the ledger is in memory.
func fenceConfig(o Options) (enforcer.FenceConfig, string, error) {
	dir := filepath.Join(o.StateDir, "fence")
	if o.StateDir == "" {
		dir = filepath.Join(o.OutDir, ".fence")
	}
	_, simulated := o.Backend.(*gpu.Simulated)
	return enforcer.ResolveFence(enforcer.FenceMode(o.Fence), o.FenceLibrary, dir, simulated)
}

// enforcerGuard runs an enforcer's watchdog for the length of a run.
type enforcerGuard struct {
	*enforcer.Enforcer
	cancel context.CancelFunc
	done   chan struct{}
	unsub  func()
}

func newGuard(ctx context.Context, o Options, led *ledger.Ledger, gpus []string, onEvent func(enforcer.Event)) (guard, guardNotes, error) {
	mps := enforcer.MPSOptions{ControlBinary: o.MPS.ControlBinary, Root: o.MPS.Root}
	if mps.Root == "" && os.Geteuid() != 0 {
		mps.Root = filepath.Join(os.TempDir(), "gpufrac-mps-"+strconv.Itoa(os.Getuid()))
	}
	fc, note, err := fenceConfig(o)
	if err != nil {
		return nil, guardNotes{}, err
	}
	notes := guardNotes{fence: note}
	plan := borrowing(&o, fc.Dir != "")
	notes.borrows, notes.borrow = plan.on(), plan.note
	fc.Borrow(enforcer.BorrowRule(plan.rule), o.BorrowWait)
	e, err := enforcer.New(enforcer.Config{Backend: o.Backend, Ledger: led, Logger: o.Logger, MPS: mps, Fence: fc})
	if err != nil {
		return nil, guardNotes{}, err
	}
	_, simulated := o.Backend.(*gpu.Simulated)
	for _, g := range gpus {
		if simulated && o.Policy.Mode == policy.ModeMPS {
			// No MPS daemon exists for simulated GPUs: simulated jobs apply the pinned limit
			// from their environment themselves, as MPS clients do.
			continue
		}
		if err := e.PrepareGPU(ctx, g); err != nil {
			return nil, guardNotes{}, fmt.Errorf("preparing GPU %s for %s mode: %w", g, o.Policy.Mode, err)
		}
	}
	rctx, cancel := context.WithCancel(context.Background())
	g := &enforcerGuard{Enforcer: e, cancel: cancel, done: make(chan struct{})}
	events, unsub := e.Subscribe()
	g.unsub = unsub
	go func() {
		for ev := range events {
			if onEvent != nil {
				onEvent(ev)
			}
		}
	}()
	go func() {
		defer close(g.done)
		_ = e.Run(rctx)
	}()
	return g, notes, nil
}

// Shutdown stops the watchdog, then lets the enforcer stop idle MPS daemons.
func (g *enforcerGuard) Shutdown(ctx context.Context) error {
	g.cancel()
	<-g.done
	g.unsub()
	return g.Enforcer.Shutdown(ctx)
}
