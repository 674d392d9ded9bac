// Package structspb is the generated code of attribute.proto and stats.proto: typed attribute
// values with units and the statistics a device plugin streams, wire-compatible with Nomad's
// hashicorp.nomad.plugins.shared.structs. Edit the .proto files and run `make generate`, never
// the .pb.go.
package structspb
