// Package hclspecpb is the generated code of hcl_spec.proto: the HCL specification a plugin
// returns from ConfigSchema, wire-compatible with Nomad's hashicorp.nomad.plugins.shared.hclspec.
// Edit hcl_spec.proto and run `make generate`, never the .pb.go.
package hclspecpb
