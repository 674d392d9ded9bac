// Package violations is how a cap violation travels from the node that stopped the task to the
// cluster: one Nomad Variable per violation under gpufrac/violations/, written by the device
// plugin (create-only, so a restart that publishes again changes nothing) and read, then marked
// handled, by `gpufrac controller`. The reservation token never leaves the node.
package violations
