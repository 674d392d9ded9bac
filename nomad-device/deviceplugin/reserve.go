package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/ledger"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/policy"
)

// Reserve admits a task onto the instance IDs Nomad assigned it and returns what the task needs:
// the environment (always), the MPS pipe directory (mps mode) and the NVIDIA device nodes (for
// exec tasks, when device_nodes is on). The reply always carries a reservation, because Nomad's
// device hook uses it without a nil check.
func (s *Server) Reserve(ctx context.Context, ids []string) (*devicepb.ContainerReservation, error) {
	cfg := s.config()
	if !cfg.Enabled {
		return nil, ErrDisabled
	}
	if len(ids) == 0 {
		return &devicepb.ContainerReservation{}, nil
	}
	rt := s.runtime()
	// Admitting while any part is missing would start a task that nothing caps.
	if why := rt.unavailable(); why != "" {
		return nil, fmt.Errorf("gpufrac: cannot reserve %s: %w: %s", strings.Join(ids, ","), ErrUnavailable, why)
	}
	if why := rt.vanishedIn(ids); why != "" {
		return nil, fmt.Errorf("gpufrac: cannot reserve %s: %w: %s", strings.Join(ids, ","), ErrUnavailable, why)
	}
	b, l, enf := rt.parts()
	if err := rt.checkHolders(l, enf, ids); err != nil {
		return nil, fmt.Errorf("gpufrac: cannot reserve %s: %w", strings.Join(ids, ","), err)
	}
	res, err := l.ReserveIDs(ids, ledger.Task{}, rt.borrowLimit(l, cfg, enf, ids)...)
	if err != nil {
		return nil, fmt.Errorf("gpufrac: cannot reserve %s: %w", strings.Join(ids, ","), err)
	}
	st, err := l.State(res.GPU)
	if err != nil {
		return nil, rt.undo(l, res, fmt.Errorf("gpufrac: reservation on GPU %s: %w", res.GPU, err))
	}
	var opts enforcer.EnvOptions
	if enf != nil {
		err := enf.PrepareGPU(ctx, res.GPU)
		if st.Mode == policy.ModeMPS {
			rt.setMPS(res.GPU, err)
		}
		if err != nil {
			return nil, rt.undo(l, res, fmt.Errorf("gpufrac: preparing GPU %s (%s mode) for the task: %w: %w", res.GPU, st.Mode, ErrUnavailable, err))
		}
		// The task's first allocation must find its cap in the fence's table.
		if err := enf.SyncFence(st); err != nil {
			if errors.Is(err, fence.ErrNoRoom) {
				// Borrowers hold the memory these units stand for (the fingerprint marks such
				// units unhealthy, but Nomad may have placed on an older one): refuse, and the
				// units come back when the borrowers give it back.
				err = fmt.Errorf("%w: %w", ErrBorrowed, err)
			}
			return nil, rt.undo(l, res, fmt.Errorf("gpufrac: writing the task's cap into the fence: %w", err))
		}
		opts = enf.EnvOptions(res.GPU)
	}
	opts.DockerRuntime = cfg.DockerRuntime
	out := &devicepb.ContainerReservation{Envs: enforcer.TaskEnv(res, st, opts)}
	if st.Mode == policy.ModeMPS && opts.MPSPipeDir != "" {
		out.Mounts = append(out.Mounts, &devicepb.Mount{TaskPath: opts.MPSPipeDir, HostPath: opts.MPSPipeDir})
	}
	if opts.FenceDir != "" {
		for _, m := range fence.TaskMounts(opts.FenceDir, opts.FenceLibrary) {
			out.Mounts = append(out.Mounts, &devicepb.Mount{TaskPath: m.Path, HostPath: m.Path, ReadOnly: m.ReadOnly})
		}
	}
	if cfg.DeviceNodes && b != nil {
		rt.mu.Lock()
		d, ok := rt.devices[res.GPU]
		rt.mu.Unlock()
		minor := -1
		if ok {
			minor = d.Minor
		}
		out.Devices = deviceNodes(s.opts.devRoot, minor)
	}
	rt.log.Info("reserved", "gpu", res.GPU, "units", len(ids), "cap", res.CapBytes.String(), "mode", st.Mode,
		"token", ledger.RedactToken(res.Token))
	return out, nil
}

// borrowLimit lets a task on an isolated GPU borrow up to the GPU's budget when the plugin's
// borrow rule is on and the fence holds caps (only it can keep a borrower out of its
// neighbours' guarantees). Under MPS a client's pinned limit is fixed when it starts.
func (rt *runtime) borrowLimit(l *ledger.Ledger, cfg Config, enf taskEnforcer, ids []string) []ledger.ReserveOption {
	if cfg.Borrow == string(enforcer.BorrowOff) || enf == nil || !enf.Fenced() {
		return nil
	}
	uuid, _, err := ledger.ParseInstanceID(ids[0])
	if err != nil {
		return nil // the ledger refuses the IDs and says why
	}
	st, err := l.State(uuid)
	if err != nil || st.Mode != policy.ModeIsolated {
		return nil
	}
	return []ledger.ReserveOption{ledger.WithLimit(st.BudgetBytes)}
}

// undo releases a reservation whose task cannot be started, so its units return to the pool.
func (rt *runtime) undo(l *ledger.Ledger, res ledger.Reservation, err error) error {
	if rerr := l.Release(res.Token, "reserve failed: "+err.Error()); rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// deviceNodes lists the nodes a CUDA process opens, keeping only those present on this host:
// Nomad's exec driver fails the task when a listed node does not exist.
func deviceNodes(devRoot string, minor int) []*devicepb.DeviceSpec {
	if devRoot == "" {
		devRoot = "/dev"
	}
	names := []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}
	if minor >= 0 {
		names = append(names, "nvidia"+strconv.Itoa(minor))
	}
	var out []*devicepb.DeviceSpec
	for _, n := range names {
		host := filepath.Join(devRoot, n)
		if _, err := os.Stat(host); err != nil {
			continue
		}
		out = append(out, &devicepb.DeviceSpec{TaskPath: "/dev/" + n, HostPath: host, Permissions: "rw"})
	}
	return out
}
