package deviceplugin

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	structspb "github.com/gpufrac/gpufrac/nomad-device/proto/structs"
	"github.com/gpufrac/gpufrac/size"
)

// readingTimeout bounds each backend query of a stats round.
const readingTimeout = 5 * time.Second

var errNoBackend = errors.New("the GPU backend is not running")

// gpuLine is a GPU's own readings, carried by every unit of the GPU. Each reading stands alone:
// one the backend cannot give says N/A with the reason, and the others are still sent.
func (rt *runtime) gpuLine(ctx context.Context, b gpu.Backend, g *ledger.GPUState) map[string]*structspb.StatValue {
	read := func(f func(context.Context) error) error {
		if b == nil {
			return errNoBackend
		}
		c, cancel := context.WithTimeout(ctx, readingTimeout)
		defer cancel()
		return f(c)
	}
	line := make(map[string]*structspb.StatValue, 4)

	const memDesc = "memory in use on the whole GPU, by every process and the driver / the GPU's memory"
	var used size.Bytes
	err := read(func(c context.Context) (err error) { used, err = b.MemoryUsed(c, g.UUID); return err })
	line[StatGPU] = rt.reading(g.UUID, StatGPU, "MiB", memDesc, err, func(v *structspb.StatValue) {
		v.IntNumeratorVal, v.IntDenominatorVal = wrapperspb.Int64(mib(used)), wrapperspb.Int64(mib(g.TotalBytes))
	})

	const utilDesc = "percent of the last sample period during which a kernel ran on the GPU"
	var util int
	err = read(func(c context.Context) (err error) { util, err = b.Utilization(c, g.UUID); return err })
	line[StatUtil] = rt.reading(g.UUID, StatUtil, "%", utilDesc, err, func(v *structspb.StatValue) {
		v.IntNumeratorVal = wrapperspb.Int64(int64(util))
	})

	const tempDesc = "temperature of the GPU die"
	var temp int
	err = read(func(c context.Context) (err error) { temp, err = b.Temperature(c, g.UUID); return err })
	line[StatTemp] = rt.reading(g.UUID, StatTemp, "C", tempDesc, err, func(v *structspb.StatValue) {
		v.IntNumeratorVal = wrapperspb.Int64(int64(temp))
	})

	const powerDesc = "power drawn by the GPU and its memory / the GPU's enforced power limit, in watts"
	var p gpu.Power
	err = read(func(c context.Context) (err error) { p, err = b.Power(c, g.UUID); return err })
	line[StatPower] = rt.reading(g.UUID, StatPower, "W", powerDesc, err, func(v *structspb.StatValue) {
		v.IntNumeratorVal = wrapperspb.Int64(int64(watts(p.UsageMilliwatts)))
		if p.LimitMilliwatts > 0 {
			v.IntDenominatorVal = wrapperspb.Int64(int64(watts(p.LimitMilliwatts)))
		}
	})
	return line
}

// reading is one stat of a GPU: set fills in the figures, or, when the query failed, the value is
// N/A with the reason (what nomad-device-nvidia sends for a reading it lacks, plus why). A
// reading that starts or stops failing is logged once, not every round.
func (rt *runtime) reading(uuid, stat, unit, desc string, err error, set func(*structspb.StatValue)) *structspb.StatValue {
	rt.noteReading(uuid, stat, err)
	v := &structspb.StatValue{Unit: unit, Desc: desc}
	if err != nil {
		v.StringVal = wrapperspb.String("N/A: " + err.Error())
		v.Desc = desc + "; unavailable: " + err.Error()
		return v
	}
	set(v)
	return v
}

// noteReading logs a GPU reading's first failure and its recovery.
func (rt *runtime) noteReading(uuid, stat string, err error) {
	key := uuid + "\x00" + stat
	rt.mu.Lock()
	if rt.readFaults == nil {
		rt.readFaults = map[string]string{}
	}
	before, failing := rt.readFaults[key]
	if err != nil {
		rt.readFaults[key] = err.Error()
	} else {
		delete(rt.readFaults, key)
	}
	rt.mu.Unlock()
	switch {
	case err != nil && (!failing || before != err.Error()):
		rt.log.Warn("a GPU reading is unavailable; its stat says N/A until it reads again", "gpu", uuid, "stat", stat, "error", err)
	case err == nil && failing:
		rt.log.Info("a GPU reading is available again", "gpu", uuid, "stat", stat)
	}
}

// watts rounds milliwatts to the nearest watt.
func watts(mw uint32) uint32 { return (mw + 500) / 1000 }
