package emulator

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	structspb "github.com/gpufrac/gpufrac/nomad-device/proto/structs"
)

func TestStatString(t *testing.T) {
	i, s, f := wrapperspb.Int64, wrapperspb.String, wrapperspb.Double
	tests := []struct {
		name string
		v    *structspb.StatValue
		want string
	}{
		{"nil", nil, "<none>"},
		{"fraction", &structspb.StatValue{IntNumeratorVal: i(3072), IntDenominatorVal: i(4096), Unit: "MiB"}, "3072 / 4096 MiB"},
		{"scalar", &structspb.StatValue{IntNumeratorVal: i(67), Unit: "C"}, "67 C"},
		{"no unit", &structspb.StatValue{IntNumeratorVal: i(7)}, "7"},
		{"string hides its unit", &structspb.StatValue{StringVal: s("N/A"), Unit: "W"}, "N/A"},
		{"bool", &structspb.StatValue{BoolVal: wrapperspb.Bool(true), Unit: "x"}, "true"},
		{"float cut, not rounded", &structspb.StatValue{FloatNumeratorVal: f(1.23456), FloatDenominatorVal: f(2), Unit: "GiB"}, "1.234 / 2 GiB"},
		{"string wins over a number", &structspb.StatValue{StringVal: s("free"), IntNumeratorVal: i(1)}, "free"},
		{"empty", &structspb.StatValue{Unit: "MiB"}, "<unknown>"},
	}
	for _, tc := range tests {
		if got := StatString(tc.v); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestAttributeString(t *testing.T) {
	tests := []struct {
		a    *structspb.Attribute
		want string
	}{
		{&structspb.Attribute{Value: &structspb.Attribute_IntVal{IntVal: 16384}, Unit: "MiB"}, "16384 MiB"},
		{&structspb.Attribute{Value: &structspb.Attribute_IntVal{IntVal: 14}}, "14"},
		{&structspb.Attribute{Value: &structspb.Attribute_StringVal{StringVal: "isolated"}}, "isolated"},
		{&structspb.Attribute{Value: &structspb.Attribute_BoolVal{BoolVal: false}}, "false"},
		{&structspb.Attribute{Value: &structspb.Attribute_FloatVal{FloatVal: 0.5}, Unit: "W"}, "0.5 W"},
		{&structspb.Attribute{}, "<unknown>"},
	}
	for _, tc := range tests {
		if got := AttributeString(tc.a); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.a, got, tc.want)
		}
	}
}

func TestAlign(t *testing.T) {
	tests := []struct {
		name, glue string
		rows       []string
		want       string
	}{
		{"list", "  ", []string{"a|1", "long name|22"}, "a          1\nlong name  22"},
		{"kv", " = ", []string{"Device|x", "Temperature|67 C"}, "Device      = x\nTemperature = 67 C"},
		{"empty field", "  ", []string{"a|", "bb|x"}, "a   <none>\nbb  x"},
		{"trimmed", " = ", []string{" k |  v "}, "k = v"},
	}
	for _, tc := range tests {
		if got := align(tc.rows, tc.glue); got != tc.want {
			t.Errorf("%s:\n%s\nwant\n%s", tc.name, got, tc.want)
		}
	}
}

func TestCLIRenderings(t *testing.T) {
	stat := func(sum string, attrs map[string]*structspb.StatValue) *devicepb.DeviceStats {
		return &devicepb.DeviceStats{Summary: &structspb.StatValue{StringVal: wrapperspb.String(sum)},
			Stats: &structspb.StatObject{Attributes: attrs}, Timestamp: timestamppb.Now()}
	}
	temp := map[string]*structspb.StatValue{"Temperature": {IntNumeratorVal: wrapperspb.Int64(40), Unit: "C"}}
	st := &devicepb.StatsResponse{Groups: []*devicepb.DeviceGroupStats{{
		Vendor: "nvidia", Type: "gpumem", Name: "t4-0",
		InstanceStats: map[string]*devicepb.DeviceStats{"u-0": stat("busy", temp), "u-1": stat("free", temp), "u-10": stat("free", temp)},
	}}}
	fp := &devicepb.FingerprintResponse{DeviceGroup: []*devicepb.DeviceGroup{{
		Vendor: "nvidia", DeviceType: "gpumem", DeviceName: "t4-0",
		Devices:    []*devicepb.DetectedDevice{{ID: "u-0"}, {ID: "u-1"}, {ID: "u-10"}, {ID: "u-2"}},
		Attributes: map[string]*structspb.Attribute{"units": {Value: &structspb.Attribute_IntVal{IntVal: 4}}, "mode": {Value: &structspb.Attribute_StringVal{StringVal: "mps"}}},
	}}}
	tests := []struct {
		name, got, want string
	}{
		{"alloc status", AllocStatus(st, []string{"u-1", "u-0"}, false), `Device Stats
nvidia/gpumem/t4-0[u-0]  busy
nvidia/gpumem/t4-0[u-1]  free
`},
		{"alloc status -stats", AllocStatus(st, []string{"u-0"}, true), `Device Stats
nvidia/gpumem/t4-0[u-0]  busy

Device Stats
Device      = nvidia/gpumem/t4-0[u-0]
Temperature = 40 C
`},
		{"a task without device stats", AllocStatus(st, []string{"other"}, true), ""},
		// Rows sort as strings ("-10]" before "-1]"); an instance without stats is <none>.
		{"node status -verbose", NodeStatus(fp, st, false), `Device Resource Utilization
nvidia/gpumem/t4-0[u-0]   busy
nvidia/gpumem/t4-0[u-10]  free
nvidia/gpumem/t4-0[u-1]   free
nvidia/gpumem/t4-0[u-2]   <none>

Device Group Attributes
Device Group = nvidia/gpumem/t4-0
mode         = mps
units        = 4
`},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s:\n%s\nwant\n%s", tc.name, tc.got, tc.want)
		}
	}
	withStats := NodeStatus(fp, st, true)
	if n := strings.Count(withStats, "Device      = nvidia/gpumem/t4-0["); n != 3 {
		t.Errorf("node status -stats has %d device blocks, want one per instance with stats (3):\n%s", n, withStats)
	}
	if i, j := strings.Index(withStats, "Device Stats"), strings.Index(withStats, "Device Group Attributes"); i < 0 || j < i {
		t.Errorf("node status -stats: the device stats should come before the group attributes:\n%s", withStats)
	}
}
