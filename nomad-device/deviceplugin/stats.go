package deviceplugin

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gpufrac/gpufrac/ledger"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	structspb "github.com/gpufrac/gpufrac/nomad-device/proto/structs"
	"github.com/gpufrac/gpufrac/size"
)

// Stat names shown by `nomad alloc status -stats` and `nomad node status -stats`. The GPU's
// own readings use nomad-device-nvidia's names, so dashboards built for it read them too.
const (
	StatMemory = "Memory state"
	StatCap    = "Reservation cap"
	StatGPU    = "GPU memory state"
	StatUtil   = "GPU utilization"
	StatTemp   = "Temperature"
	StatPower  = "Power usage"
)

// minStatsInterval is the shortest interval Stats streams at: every message reads every GPU
// through the backend, and an interval of a few nanoseconds (the protocol allows any) sent
// hundreds a second and kept NVML busy for nothing a person could read.
const minStatsInterval = 100 * time.Millisecond

// statsInterval is the interval Stats streams at when asked for d: 0 or less means 1s, and
// nothing shorter than minStatsInterval.
func statsInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return time.Second
	}
	return max(d, minStatsInterval)
}

// Stats streams usage every interval (statsInterval) until ctx ends. One line per task: the first
// unit of a reservation carries the task's memory in use against its cap; its other units say
// which unit that is, and free units say they are free, so that no figure reads as per-unit use.
// Every unit also carries its GPU's readings (memory, utilisation, temperature, power), each
// N/A with its reason when the backend cannot read it.
func (s *Server) Stats(ctx context.Context, interval time.Duration, send func(*devicepb.StatsResponse) error) error {
	rt := s.runtime()
	t := time.NewTicker(statsInterval(interval))
	defer t.Stop()
	for {
		if msg := rt.stats(ctx); len(msg.Groups) > 0 {
			if err := send(msg); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-rt.ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (rt *runtime) stats(ctx context.Context) *devicepb.StatsResponse {
	b, l, enf := rt.parts()
	if l == nil {
		return &devicepb.StatsResponse{}
	}
	states := l.States()
	fp := buildFingerprint(states, groupInfo{})
	now := timestamppb.Now()
	msg := &devicepb.StatsResponse{Groups: make([]*devicepb.DeviceGroupStats, 0, len(states))}
	for i := range states {
		g := &states[i]
		gpuAttrs := rt.gpuLine(ctx, b, g)
		// first is the unit that carries a reservation's line: its lowest-numbered one.
		first := map[string]string{}
		line := map[string]*structspb.StatValue{}
		for _, r := range g.Reservations {
			ids := slices.Clone(r.InstanceIDs)
			slices.SortFunc(ids, func(a, b string) int { return cmp.Compare(unitNumber(a), unitNumber(b)) })
			if len(ids) > 0 {
				first[r.Token] = ids[0]
			}
			var used size.Bytes
			known := false
			if enf != nil {
				// The watchdog saw no process of the task on the GPU: it uses nothing there.
				used, _ = enf.TaskUsage(r.Token)
				known = true
			}
			line[r.Token] = statPair(used, r.CapBytes, known, fmt.Sprintf("memory in use by the task %s (%d units), against its cap", r.Task.String(), len(r.InstanceIDs)))
		}
		inst := make(map[string]*devicepb.DeviceStats, len(g.Instances))
		for _, in := range g.Instances {
			attrs := maps.Clone(gpuAttrs)
			ds := &devicepb.DeviceStats{Timestamp: now, Stats: &structspb.StatObject{Attributes: attrs}}
			switch {
			case in.Token == "":
				ds.Summary = &structspb.StatValue{StringVal: wrapperspb.String("free"), Desc: "no task holds this unit"}
			case first[in.Token] == in.ID:
				ds.Summary = line[in.Token]
				attrs[StatMemory] = line[in.Token]
				attrs[StatCap] = &structspb.StatValue{IntNumeratorVal: wrapperspb.Int64(mib(capOf(g, in.Token))),
					Unit: "MiB", Desc: "the hard cap of the reservation holding this unit"}
			default:
				ds.Summary = &structspb.StatValue{StringVal: wrapperspb.String("held, see " + first[in.Token]),
					Desc: "part of a reservation whose use is reported on its first unit"}
			}
			inst[in.ID] = ds
		}
		msg.Groups = append(msg.Groups, &devicepb.DeviceGroupStats{
			Vendor: Vendor, Type: DeviceType, Name: fp.DeviceGroup[i].DeviceName, InstanceStats: inst,
		})
	}
	return msg
}

func capOf(g *ledger.GPUState, token string) size.Bytes {
	for _, r := range g.Reservations {
		if r.Token == token {
			return r.CapBytes
		}
	}
	return 0
}

func unitNumber(id string) int {
	if _, k, err := ledger.ParseInstanceID(id); err == nil {
		return k
	}
	return 0
}

// statPair is "used / total MiB", or N/A when the figure is not known, as Nomad's own plugin reports.
func statPair(used, total size.Bytes, known bool, desc string) *structspb.StatValue {
	if !known {
		return &structspb.StatValue{StringVal: wrapperspb.String("N/A"), Unit: "MiB", Desc: desc}
	}
	return &structspb.StatValue{IntNumeratorVal: wrapperspb.Int64(mib(used)), IntDenominatorVal: wrapperspb.Int64(mib(total)),
		Unit: "MiB", Desc: desc}
}
