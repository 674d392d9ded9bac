// Package deviceplugin is the Nomad device plugin nomad-device-gpufrac: it advertises each GPU
// as a group of memory units, turns Nomad's Reserve calls into ledger reservations with a task
// environment, and streams per-unit usage. See docs/plugin.md.
package deviceplugin
