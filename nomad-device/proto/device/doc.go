// Package devicepb is the generated code of device.proto: the device plugin service
// (Fingerprint, Reserve, Stats), wire-compatible with Nomad's hashicorp.nomad.plugins.device.
// Edit device.proto and run `make generate`, never the .pb.go.
package devicepb
