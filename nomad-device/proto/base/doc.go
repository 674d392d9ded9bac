// Package basepb is the generated code of base.proto: the service every Nomad plugin serves
// (PluginInfo, ConfigSchema, SetConfig), wire-compatible with Nomad's
// hashicorp.nomad.plugins.base.proto. Edit base.proto and run `make generate`, never the .pb.go.
package basepb
