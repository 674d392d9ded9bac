//go:build linux && cgo

package gpu

import (
	"context"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Temperature reads the GPU die's sensor (NVML_TEMPERATURE_GPU), in degrees Celsius.
func (n *nvmlBackend) Temperature(ctx context.Context, uuid string) (int, error) {
	h, err := n.handle(ctx, uuid)
	if err != nil {
		return 0, err
	}
	c, ret := h.GetTemperature(nvml.TEMPERATURE_GPU)
	if ret != nvml.SUCCESS {
		return 0, n.failed(uuid, "temperature", ret)
	}
	return int(c), nil
}

// Power reads the draw of the GPU and its circuitry and the enforced limit, both in mW. A GPU
// that reports its draw but not its limit (some boards do not support the query) gets limit 0.
func (n *nvmlBackend) Power(ctx context.Context, uuid string) (Power, error) {
	h, err := n.handle(ctx, uuid)
	if err != nil {
		return Power{}, err
	}
	usage, ret := h.GetPowerUsage()
	if ret != nvml.SUCCESS {
		return Power{}, n.failed(uuid, "power usage", ret)
	}
	p := Power{UsageMilliwatts: usage}
	if limit, ret := h.GetEnforcedPowerLimit(); ret == nvml.SUCCESS {
		p.LimitMilliwatts = limit
	}
	return p, nil
}
