// Package proto holds the device plugin protocol: its .proto files, written for gpufrac and
// wire-compatible with Nomad's device plugin API v0.1.0, and the Go code protoc generates from
// them in base, device, hclspec and structs (`make generate`). Its tests check that the
// generated code is fresh and that messages keep Nomad's field numbers on the wire.
package proto
