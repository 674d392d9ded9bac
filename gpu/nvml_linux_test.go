//go:build linux && cgo

package gpu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpufrac/gpufrac/size"
)

func TestMergeProcesses(t *testing.T) {
	gib := uint64(size.GiB)
	tests := []struct {
		name         string
		compute, mps []nvml.ProcessInfo
		want         []Process
	}{
		{"none", nil, nil, []Process{}},
		{"compute only", []nvml.ProcessInfo{{Pid: 20, UsedGpuMemory: 2 * gib}, {Pid: 10, UsedGpuMemory: gib}}, nil,
			[]Process{{10, size.GiB}, {20, 2 * size.GiB}}},
		{"mps clients and server", []nvml.ProcessInfo{{Pid: 5, UsedGpuMemory: 66 << 20}},
			[]nvml.ProcessInfo{{Pid: 7, UsedGpuMemory: 3 * gib}},
			[]Process{{5, 66 * size.MiB}, {7, 3 * size.GiB}}},
		{"listed twice keeps the larger", []nvml.ProcessInfo{{Pid: 7, UsedGpuMemory: gib}},
			[]nvml.ProcessInfo{{Pid: 7, UsedGpuMemory: 3 * gib}},
			[]Process{{7, 3 * size.GiB}}},
		{"not available is 0", []nvml.ProcessInfo{{Pid: 9, UsedGpuMemory: ^uint64(0)}}, nil,
			[]Process{{9, 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := mergeProcesses(tc.compute, tc.mps)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("mergeProcesses = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCString(t *testing.T) {
	b := make([]int8, 32)
	for i, c := range "00000000:51:00.0" {
		b[i] = int8(c)
	}
	if got := cString(b); got != "00000000:51:00.0" {
		t.Fatalf("cString = %q", got)
	}
}

func TestGPMValues(t *testing.T) {
	ok := uint32(nvml.SUCCESS)
	tests := []struct {
		name    string
		in      []nvml.GpmMetric
		want    []float64
		wantErr string
	}{
		{"two percentages", []nvml.GpmMetric{{MetricId: 2, NvmlReturn: ok, Value: 58.7}, {MetricId: 3, NvmlReturn: ok, Value: 12.5}}, []float64{58.7, 12.5}, ""},
		{"rounding past 100 is clamped", []nvml.GpmMetric{{MetricId: 2, NvmlReturn: ok, Value: 100.2}}, []float64{100}, ""},
		{"a metric's own error", []nvml.GpmMetric{{MetricId: 2, NvmlReturn: ok, Value: 1}, {MetricId: 3, NvmlReturn: uint32(nvml.ERROR_NOT_SUPPORTED)}}, nil, "metric 3"},
		{"not a percentage", []nvml.GpmMetric{{MetricId: 2, NvmlReturn: ok, Value: 250}}, nil, "250"},
		{"negative", []nvml.GpmMetric{{MetricId: 2, NvmlReturn: ok, Value: -3}}, nil, "-3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := gpmValues(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("gpmValues = %v, %v; want an error naming %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("gpmValues = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
