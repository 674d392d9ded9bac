//go:build linux && cgo

package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// OpenGPM checks the GPU supports GPM and takes the first sample, the start of the first period.
func (n *nvmlBackend) OpenGPM(ctx context.Context, uuid string) (GPMSampler, error) {
	h, err := n.handle(ctx, uuid)
	if err != nil {
		return nil, err
	}
	sup, ret := h.GpmQueryDeviceSupport()
	switch {
	case errors.Is(ret, nvml.ERROR_FUNCTION_NOT_FOUND), errors.Is(ret, nvml.ERROR_NOT_SUPPORTED):
		return nil, fmt.Errorf("GPU %s: %w: %s", uuid, ErrNoGPM, ret.Error())
	case ret != nvml.SUCCESS:
		return nil, n.failed(uuid, "GPM support query", ret)
	case sup.IsSupportedDevice == 0:
		return nil, fmt.Errorf("GPU %s: %w: the device does not support it (Hopper or newer does)", uuid, ErrNoGPM)
	}
	g := &nvmlGPM{uuid: uuid, dev: h}
	for i := range g.samples {
		s, ret := nvml.GpmSampleAlloc()
		if ret != nvml.SUCCESS {
			g.free()
			return nil, fmt.Errorf("GPU %s: GPM sample allocation: %s", uuid, ret.Error())
		}
		g.samples[i] = s
	}
	if ret := nvml.GpmSampleGet(h, g.samples[0]); ret != nvml.SUCCESS {
		g.free()
		return nil, fmt.Errorf("GPU %s: GPM sample: %s", uuid, ret.Error())
	}
	g.at = time.Now()
	return g, nil
}

// nvmlGPM keeps two NVML samples and swaps them: each Read samples into the older one and
// computes the metrics between the two.
type nvmlGPM struct {
	uuid string
	dev  nvml.Device

	mu      sync.Mutex
	samples [2]nvml.GpmSample // samples[0] is the start of the current period
	at      time.Time
	closed  bool
}

// gpmMetrics are the metrics asked for, in the order Read reads them back.
var gpmMetrics = []nvml.GpmMetricId{nvml.GPM_METRIC_SM_UTIL, nvml.GPM_METRIC_SM_OCCUPANCY}

func (g *nvmlGPM) Read(ctx context.Context) (GPM, error) {
	if err := ctx.Err(); err != nil {
		return GPM{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return GPM{}, fmt.Errorf("GPU %s: GPM sampler is closed", g.uuid)
	}
	if ret := nvml.GpmSampleGet(g.dev, g.samples[1]); ret != nvml.SUCCESS {
		return GPM{}, fmt.Errorf("GPU %s: GPM sample: %s", g.uuid, ret.Error())
	}
	now := time.Now()
	req := nvml.GpmMetricsGetType{NumMetrics: uint32(len(gpmMetrics)), Sample1: g.samples[0], Sample2: g.samples[1]}
	for i, id := range gpmMetrics {
		req.Metrics[i].MetricId = uint32(id)
	}
	ret := nvml.GpmMetricsGet(&req)
	out := GPM{Start: g.at, End: now}
	// The new sample starts the next period whether or not this one could be computed, so one
	// bad period does not spoil the next.
	g.samples[0], g.samples[1] = g.samples[1], g.samples[0]
	g.at = now
	if ret != nvml.SUCCESS {
		return GPM{}, fmt.Errorf("GPU %s: GPM metrics: %s", g.uuid, ret.Error())
	}
	vals, err := gpmValues(req.Metrics[:len(gpmMetrics)])
	if err != nil {
		return GPM{}, fmt.Errorf("GPU %s: %w", g.uuid, err)
	}
	out.SMUtil, out.SMOccupancy = vals[0], vals[1]
	return out, nil
}

// gpmValues checks each metric's own return code and range (percentages).
func gpmValues(ms []nvml.GpmMetric) ([]float64, error) {
	out := make([]float64, len(ms))
	for i, m := range ms {
		if r := nvml.Return(m.NvmlReturn); r != nvml.SUCCESS {
			return nil, fmt.Errorf("GPM metric %d: %s", m.MetricId, r.Error())
		}
		if !(m.Value >= 0 && m.Value <= 100.5) {
			return nil, fmt.Errorf("GPM metric %d: %g is not a percentage", m.MetricId, m.Value)
		}
		out[i] = min(m.Value, 100)
	}
	return out, nil
}

func (g *nvmlGPM) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	return g.free()
}

func (g *nvmlGPM) free() error {
	var errs []error
	for i, s := range g.samples {
		if s == nil {
			continue
		}
		if ret := nvml.GpmSampleFree(s); ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("GPU %s: GPM sample free: %s", g.uuid, ret.Error()))
		}
		g.samples[i] = nil
	}
	return errors.Join(errs...)
}
