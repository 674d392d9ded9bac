// Package emulator is a Nomad client agent's side of the device plugin protocol, written from
// the protocol reference: it launches a plugin binary exactly as an agent does (three launches
// at start, the go-plugin handshake, gRPC over a unix socket), encodes HCL config through the
// plugin's own schema (HCL1 agent file, JSON, HCL2 JSON body, hcldec, msgpack, as an agent
// does), keeps the Fingerprint and Stats streams open, and reserves instances as the scheduler
// and the device hook would. Tests of the plugin and of the Terraform provider use
// it in place of a real Nomad agent.
package emulator
