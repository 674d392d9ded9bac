package deviceplugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	structspb "github.com/gpufrac/gpufrac/nomad-device/proto/structs"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// Group attribute keys, visible in `nomad node status -verbose` and usable in job constraints
// as ${device.attr.<key>}.
const (
	AttrModel    = "model"
	AttrUUID     = "uuid"
	AttrIndex    = "index"
	AttrMemory   = "memory"
	AttrUnitSize = "unit_size"
	AttrBudget   = "budget"
	AttrUnits    = "units"
	AttrMode     = "mode"
	AttrBackend  = "backend"
	AttrDriver   = "driver_version"
	AttrPolicy   = "policy"
)

// ErrDisabled is what Fingerprint and Reserve return when enabled = false. On Fingerprint it
// makes Nomad stop the plugin, which is what an operator who disabled it wants.
var ErrDisabled = errors.New("the gpufrac device plugin is disabled (enabled = false in its config)")

// Fingerprint sends a full device list now and again whenever it may have changed, until ctx
// ends. It never returns an error for a problem it can describe: Nomad disables a plugin for good
// when its fingerprint stream ends or fails. The one exception is a configuration that cannot
// work on this node (ignored_gpu_ids or gpu_modes naming a GPU it does not have), which only
// the GPU listing reveals: that is what disabling is for.
func (s *Server) Fingerprint(ctx context.Context, send func(*devicepb.FingerprintResponse) error) error {
	if !s.config().Enabled {
		return ErrDisabled
	}
	rt := s.runtime()
	changed, cancel := rt.subscribe()
	defer cancel()
	rt.waitPolicy(ctx, waitFirst)
	var last *devicepb.FingerprintResponse
	for {
		if err := rt.configErr(); err != nil {
			// A configuration naming GPUs the node lacks: Nomad logs this error and stops
			// using the plugin, as it does for a config SetConfig refuses.
			return err
		}
		msg := rt.fingerprint()
		// Ledger notifications also fire for changes Nomad does not see (a reservation's
		// last-seen time); identical messages would only cost node updates.
		if last == nil || !proto.Equal(msg, last) {
			if err := send(msg); err != nil {
				return err // the client went away; Nomad reopens the stream if it wants one
			}
			last = msg
		}
		select {
		case <-ctx.Done():
			return nil
		case <-rt.ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// fingerprint builds the message from the ledger, or from its last committed snapshot while the
// ledger cannot be opened, so units held by running tasks never disappear from Nomad's view.
func (rt *runtime) fingerprint() *devicepb.FingerprintResponse {
	b, l, _ := rt.parts()
	rt.mu.Lock()
	dir := rt.ledgerDir
	rt.mu.Unlock()
	var states []ledger.GPUState
	var policyName string
	if l != nil {
		states = l.States()
		policyName = l.Policy().Name
	} else if snap, err := ledger.ReadSnapshot(dir); err == nil {
		states = snap.GPUs
		policyName = snap.Policy.Name
	}
	rt.mu.Lock()
	devs := make(map[string]gpu.Device, len(rt.devices))
	for k, v := range rt.devices {
		devs[k] = v
	}
	rt.mu.Unlock()
	vanished := rt.vanishedGPUs()
	info := groupInfo{unavailable: rt.unavailable(), policy: policyName, gpuDown: rt.gpuDown(), ignored: rt.ignoredUUIDs()}
	if b != nil {
		info.backend, info.driver = b.Kind(), b.DriverVersion()
	}
	msg := buildFingerprint(states, info)
	if len(states) == 0 && len(devs) > 0 {
		// No ledger state at all yet: show the GPUs with no units, so the operator sees them
		// and the reason in their attributes rather than nothing. In index order: the stream
		// sends a listing only when it differs from the last, and map order would differ.
		for _, uuid := range slices.SortedFunc(maps.Keys(devs), func(a, b string) int {
			return cmp.Or(devs[a].Index-devs[b].Index, strings.Compare(a, b))
		}) {
			msg.DeviceGroup = append(msg.DeviceGroup, bareGroup(devs[uuid], info.unavailable))
		}
	}
	addVanished(msg, states, vanished)
	return msg
}

// addVanished lists each vanished GPU the ledger no longer has (it forgets one without
// reservations; one with reservations is in states, unhealthy) as a group whose one unhealthy
// stand-in says why, so that the operator sees where its units went.
func addVanished(msg *devicepb.FingerprintResponse, states []ledger.GPUState, vanished []gpu.Device) {
	slices.SortFunc(vanished, func(a, b gpu.Device) int { return cmp.Or(a.Index-b.Index, strings.Compare(a.UUID, b.UUID)) })
	names := map[string]bool{}
	for _, g := range msg.DeviceGroup {
		names[g.DeviceName] = true
	}
	for _, d := range vanished {
		if slices.ContainsFunc(states, func(st ledger.GPUState) bool { return st.UUID == d.UUID }) {
			continue
		}
		name := groupName(d.Model, d.Index)
		if names[name] {
			name += "-" + shortUUID(d.UUID)
		}
		names[name] = true
		var loc *devicepb.DeviceLocality
		if d.PCIBusID != "" {
			loc = &devicepb.DeviceLocality{PciBusId: d.PCIBusID}
		}
		g := bareGroup(d, descVanished)
		g.DeviceName = name
		g.Devices = []*devicepb.DetectedDevice{{ID: ledger.InstanceID(d.UUID, 0), HealthDescription: descVanished, HwLocality: loc}}
		msg.DeviceGroup = append(msg.DeviceGroup, g)
	}
}

type groupInfo struct {
	// unavailable, when set, marks every unit not held by a task unhealthy with this reason.
	unavailable     string
	backend, driver string
	policy          string
	// gpuDown marks the units of one mps-mode GPU not held by a task unhealthy, with its reason.
	// (The units borrowers hold come withheld from the ledger: ledger.SetBorrowed.)
	gpuDown map[string]string
	// ignored marks the GPUs that ignored_gpu_ids names: every unit unhealthy, saying so.
	ignored map[string]bool
}

// buildFingerprint is one group per GPU, one instance per unit, in the ledger's order.
func buildFingerprint(states []ledger.GPUState, info groupInfo) *devicepb.FingerprintResponse {
	msg := &devicepb.FingerprintResponse{DeviceGroup: make([]*devicepb.DeviceGroup, 0, len(states))}
	names := make(map[string]bool, len(states))
	for i := range states {
		g := &states[i]
		name := groupName(g.Model, g.Index)
		if names[name] {
			name += "-" + shortUUID(g.UUID)
		}
		names[name] = true
		attrs := map[string]*structspb.Attribute{
			AttrModel:    str(g.Model),
			AttrUUID:     str(g.UUID),
			AttrIndex:    intAttr(int64(g.Index), ""),
			AttrMemory:   intAttr(mib(g.TotalBytes), "MiB"),
			AttrUnitSize: intAttr(mib(g.UnitBytes), "MiB"),
			AttrBudget:   intAttr(mib(g.BudgetBytes), "MiB"),
			AttrUnits:    intAttr(int64(g.Units), ""),
			AttrMode:     str(string(g.Mode)),
		}
		if info.backend != "" {
			attrs[AttrBackend] = str(info.backend)
			attrs[AttrDriver] = str(info.driver)
		}
		if info.policy != "" {
			attrs[AttrPolicy] = str(info.policy)
		}
		var loc *devicepb.DeviceLocality
		if g.PCIBusID != "" {
			loc = &devicepb.DeviceLocality{PciBusId: g.PCIBusID}
		}
		down := info.unavailable
		if why := info.gpuDown[g.UUID]; down == "" && why != "" && g.Mode == policy.ModeMPS {
			down = why
		}
		devs := make([]*devicepb.DetectedDevice, len(g.Instances))
		for j, in := range g.Instances {
			d := &devicepb.DetectedDevice{ID: in.ID, Healthy: in.Healthy, HealthDescription: in.HealthDescription, HwLocality: loc}
			switch {
			case info.ignored[g.UUID]:
				// The ledger keeps an ignored GPU only for the tasks still on it, as a GPU it no
				// longer sees: that reason would send the operator to nvidia-smi.
				d.Healthy, d.HealthDescription = false, descIgnored
			case down != "" && in.Token == "":
				d.Healthy, d.HealthDescription = false, down
			}
			devs[j] = d
		}
		if info.ignored[g.UUID] {
			attrs["status"] = str(descIgnored)
		}
		if len(devs) == 0 {
			// An instance list is the only place Nomad shows a health description, so a GPU
			// with no unit at all carries one unhealthy stand-in that says why; admission
			// refuses its ID like any ID beyond the units.
			why := noUnitsReason(g)
			attrs["status"] = str(why)
			devs = append(devs, &devicepb.DetectedDevice{ID: ledger.InstanceID(g.UUID, 0), HealthDescription: why, HwLocality: loc})
		}
		msg.DeviceGroup = append(msg.DeviceGroup, &devicepb.DeviceGroup{
			Vendor: Vendor, DeviceType: DeviceType, DeviceName: name, Devices: devs, Attributes: attrs,
		})
	}
	return msg
}

// noUnitsReason says why a GPU's budget leaves no memory unit.
func noUnitsReason(g *ledger.GPUState) string {
	prefix := ""
	if !g.Healthy && g.HealthReason != "" {
		prefix = g.HealthReason + "; "
	}
	switch {
	case g.UnitBytes == 0:
		return prefix + "no units: no policy has set a unit size yet"
	case g.HeadroomBytes >= g.TotalBytes:
		return fmt.Sprintf("%sno units: the policy's headroom (%s) is not smaller than the GPU's memory (%s)",
			prefix, g.HeadroomBytes, g.TotalBytes)
	case g.HeadroomBytes+g.UnmanagedBytes >= g.TotalBytes:
		return fmt.Sprintf("%sno units: the policy's headroom (%s) and memory held by processes without a reservation (%s) leave nothing of the GPU's %s",
			prefix, g.HeadroomBytes, g.UnmanagedBytes, g.TotalBytes)
	}
	return fmt.Sprintf("%sno units: the budget left (%s = %s - %s headroom - %s unmanaged) is smaller than one unit (%s)",
		prefix, g.BudgetBytes, g.TotalBytes, g.HeadroomBytes, g.UnmanagedBytes, g.UnitBytes)
}

// bareGroup is d's group with no units, its status attribute saying why.
func bareGroup(d gpu.Device, status string) *devicepb.DeviceGroup {
	attrs := map[string]*structspb.Attribute{
		AttrModel:  str(d.Model),
		AttrUUID:   str(d.UUID),
		AttrIndex:  intAttr(int64(d.Index), ""),
		AttrMemory: intAttr(mib(d.MemoryBytes), "MiB"),
		AttrUnits:  intAttr(0, ""),
		"status":   str(status),
	}
	return &devicepb.DeviceGroup{Vendor: Vendor, DeviceType: DeviceType, DeviceName: groupName(d.Model, d.Index), Attributes: attrs}
}

// groupName is the model as a slug plus the GPU index ("h100-80gb-hbm3-0"): unique per GPU, so
// Nomad serves every request from one physical GPU, and readable in constraints.
func groupName(model string, index int) string {
	m := strings.ToLower(strings.TrimSpace(model))
	m = strings.TrimPrefix(m, "nvidia ")
	var b strings.Builder
	dash := false
	for _, r := range m {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	slug := strings.TrimSuffix(b.String(), "-")
	if slug == "" {
		slug = "gpu"
	}
	return slug + "-" + strconv.Itoa(index)
}

func shortUUID(u string) string {
	u = strings.TrimPrefix(u, "GPU-")
	if len(u) > 8 {
		u = u[:8]
	}
	return u
}

func str(s string) *structspb.Attribute {
	return &structspb.Attribute{Value: &structspb.Attribute_StringVal{StringVal: s}}
}

func intAttr(v int64, unit string) *structspb.Attribute {
	return &structspb.Attribute{Value: &structspb.Attribute_IntVal{IntVal: v}, Unit: unit}
}

func mib(b size.Bytes) int64 { return int64(b / size.MiB) }

// waitFirst bounds how long the first fingerprint waits for a policy source to answer, so the
// first message does not advertise units a second later marked unhealthy.
const waitFirst = 3 * time.Second
