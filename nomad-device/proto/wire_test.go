package proto_test

import (
	"testing"

	basepb "github.com/gpufrac/gpufrac/nomad-device/proto/base"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	hclspecpb "github.com/gpufrac/gpufrac/nomad-device/proto/hclspec"
	structspb "github.com/gpufrac/gpufrac/nomad-device/proto/structs"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// field is one row of the protocol reference's message tables: what Nomad's client puts on
// the wire. A rename of a Go-side name is harmless; a number, kind or full name change is not.
type field struct {
	num  protoreflect.FieldNumber
	name string
	kind string // protoreflect kind, or the full name of a message/enum type
	list bool
}

func TestWireShapeMatchesNomad(t *testing.T) {
	tests := []struct {
		msg    protoreflect.ProtoMessage
		full   string
		fields []field
	}{
		{&basepb.PluginInfoResponse{}, "hashicorp.nomad.plugins.base.proto.PluginInfoResponse", []field{
			{1, "type", "hashicorp.nomad.plugins.base.proto.PluginType", false},
			{2, "plugin_api_versions", "string", true},
			{3, "plugin_version", "string", false},
			{4, "name", "string", false},
		}},
		{&basepb.ConfigSchemaResponse{}, "hashicorp.nomad.plugins.base.proto.ConfigSchemaResponse", []field{
			{1, "spec", "hashicorp.nomad.plugins.shared.hclspec.Spec", false},
		}},
		{&basepb.SetConfigRequest{}, "hashicorp.nomad.plugins.base.proto.SetConfigRequest", []field{
			{1, "msgpack_config", "bytes", false},
			{2, "nomad_config", "hashicorp.nomad.plugins.base.proto.NomadConfig", false},
			{3, "plugin_api_version", "string", false},
		}},
		{&basepb.NomadDriverConfig{}, "hashicorp.nomad.plugins.base.proto.NomadDriverConfig", []field{
			{1, "ClientMaxPort", "uint32", false},
			{2, "ClientMinPort", "uint32", false},
		}},
		{&hclspecpb.Spec{}, "hashicorp.nomad.plugins.shared.hclspec.Spec", []field{
			{1, "object", "hashicorp.nomad.plugins.shared.hclspec.Object", false},
			{2, "array", "hashicorp.nomad.plugins.shared.hclspec.Array", false},
			{3, "Attr", "hashicorp.nomad.plugins.shared.hclspec.Attr", false},
			{4, "block_value", "hashicorp.nomad.plugins.shared.hclspec.Block", false},
			{5, "block_attrs", "hashicorp.nomad.plugins.shared.hclspec.BlockAttrs", false},
			{6, "block_list", "hashicorp.nomad.plugins.shared.hclspec.BlockList", false},
			{7, "block_set", "hashicorp.nomad.plugins.shared.hclspec.BlockSet", false},
			{8, "block_map", "hashicorp.nomad.plugins.shared.hclspec.BlockMap", false},
			{9, "default", "hashicorp.nomad.plugins.shared.hclspec.Default", false},
			{10, "literal", "hashicorp.nomad.plugins.shared.hclspec.Literal", false},
		}},
		{&hclspecpb.BlockList{}, "hashicorp.nomad.plugins.shared.hclspec.BlockList", []field{
			{1, "name", "string", false},
			{2, "min_items", "uint64", false},
			{3, "max_items", "uint64", false},
			{4, "nested", "hashicorp.nomad.plugins.shared.hclspec.Spec", false},
		}},
		{&hclspecpb.BlockMap{}, "hashicorp.nomad.plugins.shared.hclspec.BlockMap", []field{
			{1, "name", "string", false},
			{2, "labels", "string", true},
			{3, "nested", "hashicorp.nomad.plugins.shared.hclspec.Spec", false},
		}},
		{&hclspecpb.Default{}, "hashicorp.nomad.plugins.shared.hclspec.Default", []field{
			{1, "primary", "hashicorp.nomad.plugins.shared.hclspec.Spec", false},
			{2, "default", "hashicorp.nomad.plugins.shared.hclspec.Spec", false},
		}},
		{&structspb.Attribute{}, "hashicorp.nomad.plugins.shared.structs.Attribute", []field{
			{1, "float_val", "double", false},
			{2, "int_val", "int64", false},
			{3, "string_val", "string", false},
			{4, "bool_val", "bool", false},
			{5, "unit", "string", false},
		}},
		{&structspb.StatValue{}, "hashicorp.nomad.plugins.shared.structs.StatValue", []field{
			{1, "float_numerator_val", "google.protobuf.DoubleValue", false},
			{2, "float_denominator_val", "google.protobuf.DoubleValue", false},
			{3, "int_numerator_val", "google.protobuf.Int64Value", false},
			{4, "int_denominator_val", "google.protobuf.Int64Value", false},
			{5, "string_val", "google.protobuf.StringValue", false},
			{6, "bool_val", "google.protobuf.BoolValue", false},
			{7, "unit", "string", false},
			{8, "desc", "string", false},
		}},
		{&devicepb.DeviceGroup{}, "hashicorp.nomad.plugins.device.DeviceGroup", []field{
			{1, "vendor", "string", false},
			{2, "device_type", "string", false},
			{3, "device_name", "string", false},
			{4, "devices", "hashicorp.nomad.plugins.device.DetectedDevice", true},
			{5, "attributes", "hashicorp.nomad.plugins.device.DeviceGroup.AttributesEntry", true},
		}},
		{&devicepb.DetectedDevice{}, "hashicorp.nomad.plugins.device.DetectedDevice", []field{
			{1, "ID", "string", false},
			{2, "healthy", "bool", false},
			{3, "health_description", "string", false},
			{4, "hw_locality", "hashicorp.nomad.plugins.device.DeviceLocality", false},
		}},
		{&devicepb.ContainerReservation{}, "hashicorp.nomad.plugins.device.ContainerReservation", []field{
			{1, "envs", "hashicorp.nomad.plugins.device.ContainerReservation.EnvsEntry", true},
			{2, "mounts", "hashicorp.nomad.plugins.device.Mount", true},
			{3, "devices", "hashicorp.nomad.plugins.device.DeviceSpec", true},
		}},
		{&devicepb.DeviceSpec{}, "hashicorp.nomad.plugins.device.DeviceSpec", []field{
			{1, "task_path", "string", false},
			{2, "host_path", "string", false},
			{3, "permissions", "string", false},
		}},
		{&devicepb.StatsRequest{}, "hashicorp.nomad.plugins.device.StatsRequest", []field{
			{1, "collection_interval", "google.protobuf.Duration", false},
		}},
		{&devicepb.DeviceGroupStats{}, "hashicorp.nomad.plugins.device.DeviceGroupStats", []field{
			{1, "vendor", "string", false},
			{2, "type", "string", false},
			{3, "name", "string", false},
			{4, "instance_stats", "hashicorp.nomad.plugins.device.DeviceGroupStats.InstanceStatsEntry", true},
		}},
		{&devicepb.DeviceStats{}, "hashicorp.nomad.plugins.device.DeviceStats", []field{
			{1, "summary", "hashicorp.nomad.plugins.shared.structs.StatValue", false},
			{2, "stats", "hashicorp.nomad.plugins.shared.structs.StatObject", false},
			{3, "timestamp", "google.protobuf.Timestamp", false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.full, func(t *testing.T) {
			md := tt.msg.ProtoReflect().Descriptor()
			if string(md.FullName()) != tt.full {
				t.Fatalf("full name %s, want %s", md.FullName(), tt.full)
			}
			if md.Fields().Len() != len(tt.fields) {
				t.Errorf("%d fields, want %d", md.Fields().Len(), len(tt.fields))
			}
			for _, want := range tt.fields {
				fd := md.Fields().ByNumber(want.num)
				if fd == nil {
					t.Errorf("field %d (%s) missing", want.num, want.name)
					continue
				}
				kind := fd.Kind().String()
				switch {
				case fd.Message() != nil:
					kind = string(fd.Message().FullName())
				case fd.Enum() != nil:
					kind = string(fd.Enum().FullName())
				}
				// Lists and maps are both repeated on the wire.
				repeated := fd.Cardinality() == protoreflect.Repeated
				if string(fd.Name()) != want.name || kind != want.kind || repeated != want.list {
					t.Errorf("field %d = %s %s repeated=%v, want %s %s repeated=%v",
						want.num, fd.Name(), kind, repeated, want.name, want.kind, want.list)
				}
			}
		})
	}
}

func TestServiceNames(t *testing.T) {
	if got := basepb.BasePlugin_ServiceDesc.ServiceName; got != "hashicorp.nomad.plugins.base.proto.BasePlugin" {
		t.Errorf("base service %q", got)
	}
	if got := devicepb.DevicePlugin_ServiceDesc.ServiceName; got != "hashicorp.nomad.plugins.device.DevicePlugin" {
		t.Errorf("device service %q", got)
	}
	if basepb.PluginType_DEVICE != 3 || basepb.PluginType_DRIVER != 2 {
		t.Errorf("PluginType numbers DEVICE=%d DRIVER=%d, want 3 and 2", basepb.PluginType_DEVICE, basepb.PluginType_DRIVER)
	}
	streams := map[string]bool{}
	for _, s := range devicepb.DevicePlugin_ServiceDesc.Streams {
		streams[s.StreamName] = s.ServerStreams && !s.ClientStreams
	}
	if !streams["Fingerprint"] || !streams["Stats"] || len(streams) != 2 {
		t.Errorf("device streams %v, want server-streaming Fingerprint and Stats", streams)
	}
}
