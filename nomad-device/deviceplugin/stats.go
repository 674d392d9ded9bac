package deviceplugin

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gpufrac/gpufrac/ledger"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	structspb "github.com/gpufrac/gpufrac/nomad-device/proto/structs"
	"github.com/gpufrac/gpufrac/size"
)

// Stat names shown by `nomad alloc status -stats` and `nomad node status -stats`.
const (
	StatMemory = "Memory state"
	StatCap    = "Reservation cap"
	StatGPU    = "GPU memory state"
)

// Stats streams every instance's usage every interval (0 means 1s) until ctx ends. An instance
// held by a reservation reports the reservation's memory in use against its cap; a free one
// reports its GPU's used/total.
func (s *Server) Stats(ctx context.Context, interval time.Duration, send func(*devicepb.StatsResponse) error) error {
	if interval <= 0 {
		interval = time.Second
	}
	rt := s.runtime()
	t := time.NewTicker(interval)
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
		var gpuUsed size.Bytes
		gpuKnown := false
		if b != nil {
			c, cancel := context.WithTimeout(ctx, 5*time.Second)
			u, err := b.MemoryUsed(c, g.UUID)
			cancel()
			gpuUsed, gpuKnown = u, err == nil
		}
		gpuStat := statPair(gpuUsed, g.TotalBytes, gpuKnown, "memory in use on the whole GPU")
		resUse := map[string]*structspb.StatValue{}
		for _, r := range g.Reservations {
			var used size.Bytes
			known := false
			if enf != nil {
				used, known = enf.TaskUsage(r.Token)
			}
			resUse[r.Token] = statPair(used, r.CapBytes, known, "memory in use by the task holding this unit, against its cap")
		}
		inst := make(map[string]*devicepb.DeviceStats, len(g.Instances))
		for _, in := range g.Instances {
			ds := &devicepb.DeviceStats{Timestamp: now, Stats: &structspb.StatObject{Attributes: map[string]*structspb.StatValue{
				StatGPU: gpuStat,
			}}}
			if v, ok := resUse[in.Token]; ok {
				ds.Summary = v
				ds.Stats.Attributes[StatMemory] = v
				ds.Stats.Attributes[StatCap] = &structspb.StatValue{IntNumeratorVal: wrapperspb.Int64(mib(capOf(g, in.Token))),
					Unit: "MiB", Desc: "the hard cap of the reservation holding this unit"}
			} else {
				ds.Summary = gpuStat
				ds.Stats.Attributes[StatMemory] = gpuStat
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

// statPair is "used / total MiB", or N/A when the reading failed, as Nomad's own plugin reports.
func statPair(used, total size.Bytes, known bool, desc string) *structspb.StatValue {
	if !known {
		return &structspb.StatValue{StringVal: wrapperspb.String("N/A"), Unit: "MiB", Desc: desc}
	}
	return &structspb.StatValue{IntNumeratorVal: wrapperspb.Int64(mib(used)), IntDenominatorVal: wrapperspb.Int64(mib(total)),
		Unit: "MiB", Desc: desc}
}
