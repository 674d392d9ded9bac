package runner

import (
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/record"
)

// MPSOptions locate the MPS control daemons (mps mode on real GPUs).
type MPSOptions struct {
	// ControlBinary is nvidia-cuda-mps-control; empty = found on PATH.
	ControlBinary string
	// Root holds <Root>/<gpu-uuid>/pipe and log; empty = /run/gpufrac/mps for root, else
	// gpufrac-mps-<uid> in the temporary directory (pipe paths must stay short).
	Root string
}

// guard is what supervising an attempt needs of the node's enforcer.
type guard interface {
	SyncFence(st ledger.GPUState) error
	FenceTask(uuid, token string) (fence.TaskUse, bool)
	// Follow hands fn every sample the watchdog takes, which then samples at least every
	// `every`: how the run records its attempts' memory.
	Follow(every time.Duration, fn func(enforcer.Sample)) (stop func())
}

// runNotes are what a run's first lines say about the fence and borrowing.
type runNotes struct {
	fence  string
	borrow node.Borrowing
}

// nodeOptions is the node a run opens: its ledger holds this process's reservations, and in the
// arms that cap, an enforcer with the fence (its tables beside the ledger, or in the results
// directory when the ledger is in memory) and the borrowing decided for the arm and mode.
func nodeOptions(o Options) (node.Options, runNotes, error) {
	_, simulated := o.Backend.(*gpu.Simulated)
	no := node.Options{Logger: o.Logger, Backend: o.Backend, StateDir: o.StateDir, Hold: true, BorrowHold: *o.BorrowHold, Policy: o.Policy,
		Enforce: o.enforced(), Node: node.Config{NoMPSDaemon: simulated, ReadyAtOpen: true}}
	if !no.Enforce {
		return no, runNotes{}, nil
	}
	dir := filepath.Join(o.StateDir, "fence")
	if o.StateDir == "" {
		dir = filepath.Join(o.OutDir, ".fence")
	}
	fc, note, err := enforcer.ResolveFence(o.Fence, o.FenceLibrary, dir, simulated)
	if err != nil {
		return no, runNotes{}, err
	}
	offWhy := ""
	if o.Arm != record.ArmPacked {
		offWhy = "the " + string(o.Arm) + " arm"
	}
	notes := runNotes{fence: note, borrow: node.PlanBorrowing(o.Borrow, fc.Dir != "", o.modeOf(), o.BorrowWait, offWhy)}
	mps := enforcer.MPSOptions{ControlBinary: o.MPS.ControlBinary, Root: o.MPS.Root}
	if mps.Root == "" && os.Geteuid() != 0 {
		mps.Root = filepath.Join(os.TempDir(), "gpufrac-mps-"+strconv.Itoa(os.Getuid()))
	}
	no.Enforcer = node.EnforcerConfig{MPS: mps, Fence: fc, Borrow: notes.borrow}
	return no, notes, nil
}
