//go:build !linux || !cgo

package gpu

import (
	"fmt"
	"runtime"

	"github.com/hashicorp/go-hclog"
)

// MIGReason is the health reason of a GPU with MIG enabled.
const MIGReason = "MIG is enabled: gpufrac shares whole GPUs; disable MIG or ignore this GPU"

// NewNVML needs Linux and cgo; elsewhere it always fails with ErrNoNVML.
func NewNVML(logger hclog.Logger) (Backend, error) { return NewNVMLWith(logger, HealthOptions{}) }

// NewNVMLWith needs Linux and cgo too; elsewhere it always fails with ErrNoNVML.
func NewNVMLWith(logger hclog.Logger, health HealthOptions) (Backend, error) {
	return nil, fmt.Errorf("%w: this gpufrac was built for %s/%s without cgo; NVML needs a Linux build with cgo",
		ErrNoNVML, runtime.GOOS, runtime.GOARCH)
}
