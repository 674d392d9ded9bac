package gpu

import (
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"
)

// KindAuto picks NVML when it initialises and the simulated backend otherwise.
const KindAuto = "auto"

// OpenOptions configure Open.
type OpenOptions struct {
	// SimGPUs are the simulated GPUs ("H100=80GiB" entries, see ParseSimSpec); empty means
	// DefaultSimGPUs.
	SimGPUs []string
	// SimDir is the simulated backend's state directory; empty means DefaultSimDir().
	SimDir string
	Logger hclog.Logger
	// Health tunes how either backend turns XID and ECC events into GPU health.
	Health HealthOptions
}

// Open returns the backend of the given kind: "nvml", "simulated", or "auto" (also ""): NVML
// when it initialises, else the simulated backend with a warning that says why.
func Open(kind string, opts OpenOptions) (Backend, error) {
	logger := opts.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	sim := func() (Backend, error) {
		gpus := opts.SimGPUs
		if len(gpus) == 0 {
			gpus = DefaultSimGPUs
		}
		s, err := NewSimulated(SimConfig{GPUs: gpus, Dir: opts.SimDir, Logger: logger, Health: opts.Health})
		if err != nil {
			// A typed nil inside a non-nil interface would pass callers' nil checks and panic later.
			return nil, err
		}
		return s, nil
	}
	switch kind {
	case KindNVML:
		return NewNVMLWith(logger, opts.Health)
	case KindSimulated:
		return sim()
	case KindAuto, "":
		b, err := NewNVMLWith(logger, opts.Health)
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, ErrNoNVML) {
			return nil, err
		}
		logger.Named("gpu").Warn("no NVIDIA GPU found: using the SIMULATED GPU backend", "reason", err)
		return sim()
	default:
		return nil, fmt.Errorf("unknown GPU backend %q: want %q, %q or %q", kind, KindNVML, KindSimulated, KindAuto)
	}
}
