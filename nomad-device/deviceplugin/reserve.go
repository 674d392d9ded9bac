package deviceplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
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
	if why := rt.ignoredIn(ids); why != "" {
		return nil, fmt.Errorf("gpufrac: cannot reserve %s: %w: %s", strings.Join(ids, ","), ErrIgnored, why)
	}
	b, l, enf := rt.parts()
	if err := rt.checkHolders(l, enf, ids); err != nil {
		return nil, fmt.Errorf("gpufrac: cannot reserve %s: %w", strings.Join(ids, ","), err)
	}
	out, a, err := admit(ctx, rt.node(), ids)
	if err != nil {
		return nil, fmt.Errorf("gpufrac: cannot reserve %s: %w", strings.Join(ids, ","), err)
	}
	res, st := a.Reservation, a.GPU
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

// admit is the plugin's side of an admission: the node decides as for gpufrac run, and the
// plugin only translates Nomad's instance IDs in and the environment and mounts out.
func admit(ctx context.Context, nd *node.Node, ids []string) (*devicepb.ContainerReservation, node.Admission, error) {
	a, err := nd.Admit(ctx, node.Request{IDs: ids, Borrow: true})
	if err != nil {
		return nil, a, err
	}
	out := &devicepb.ContainerReservation{Envs: a.Env}
	for _, m := range a.Mounts {
		out.Mounts = append(out.Mounts, &devicepb.Mount{TaskPath: m.TaskPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	return out, a, nil
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
