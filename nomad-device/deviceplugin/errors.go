package deviceplugin

import (
	"context"
	"errors"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
)

// Reserve refusals that are not admission decisions, matched with errors.Is.
var (
	// ErrUnavailable: the GPU is not fully managed right now (backend down, no valid policy yet,
	// enforcer not running, MPS daemon that cannot start), so no cap could be enforced.
	ErrUnavailable = node.ErrUnavailable
	// ErrInUse: an instance ID of the request is held by a reservation whose task still runs.
	ErrInUse = errors.New("instance held by a running task")
	// ErrBorrowed: tasks borrowing past their guarantees hold the memory the units stand for.
	ErrBorrowed = node.ErrBorrowed
	// ErrIgnored: an instance ID of the request is on a GPU that ignored_gpu_ids names.
	ErrIgnored = errors.New("ignored GPU")
)

// grpcCode says what happened in the code Nomad's client logs and shows in the task event:
// a request that can never succeed, a GPU (or the ledger's disk) that is full, or a GPU that
// cannot be managed now.
func grpcCode(err error) codes.Code {
	var d *ledger.DeniedError
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, ErrDisabled), errors.Is(err, ErrUnavailable):
		return codes.Unavailable
	case errors.Is(err, ErrIgnored):
		return codes.InvalidArgument // never, while the configuration stands
	case errors.Is(err, ErrInUse), errors.Is(err, ErrBorrowed):
		return codes.ResourceExhausted
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		// The ledger could not record the reservation: the node's disk (or quota) is full. gRPC
		// names this code for a file system out of space; nothing was admitted.
		return codes.ResourceExhausted
	case errors.As(err, &d):
		switch d.Reason {
		case ledger.ReasonNoFit, ledger.ReasonTooMany:
			return codes.ResourceExhausted
		case ledger.ReasonUnhealthy:
			return codes.Unavailable
		default:
			return codes.InvalidArgument
		}
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Internal
}

// grpcError turns a Reserve error into a gRPC status that keeps the whole message.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	return status.Error(grpcCode(err), err.Error())
}
