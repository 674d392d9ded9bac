package emulator

import (
	"slices"
	"strings"

	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
)

// AllocStatus is the device part of `nomad alloc status <alloc>` for a task that holds ids (the
// instances Nomad assigned its device block; the agent reports a task's stats for those alone):
// the "Device Stats" list of their summaries. With stats (`-stats`) the "Device Stats" blocks of
// every stat follow, after the task's memory and CPU stats that are not rendered here.
func AllocStatus(st *devicepb.StatsResponse, ids []string, stats bool) string {
	held := func(id string) bool { return slices.Contains(ids, id) }
	sums := summaries(st)
	var rows []string
	for _, g := range st.GetGroups() {
		for id := range g.GetInstanceStats() {
			if held(id) {
				qid := QualifiedID(g.GetVendor(), g.GetType(), g.GetName(), id)
				rows = append(rows, qid+"|"+sums[qid])
			}
		}
	}
	if len(rows) == 0 {
		return "" // the agent prints no device section for a task without device stats
	}
	slices.Sort(rows)
	out := "Device Stats\n" + list(rows) + "\n"
	if stats {
		out += "\nDevice Stats\n" + strings.Join(instanceBlocks(st, held), "\n\n") + "\n"
	}
	return out
}

// NodeStatus is the device part of `nomad node status -verbose <node>`: "Device Resource
// Utilization" lists every instance of the fingerprint with its summary (<none> for one the
// stats do not cover) and, further down, "Device Group Attributes" shows each group's
// attributes. With stats (`-stats`) the "Device Stats" blocks of every instance come between
// the two, as the agent prints them.
func NodeStatus(fp *devicepb.FingerprintResponse, st *devicepb.StatsResponse, stats bool) string {
	sums := summaries(st)
	var rows []string
	for _, g := range fp.GetDeviceGroup() {
		for _, d := range g.GetDevices() {
			qid := QualifiedID(g.GetVendor(), g.GetDeviceType(), g.GetDeviceName(), d.GetID())
			rows = append(rows, qid+"|"+sums[qid]) // a missing summary is an empty field
		}
	}
	slices.Sort(rows)
	var b strings.Builder
	b.WriteString("Device Resource Utilization\n" + list(rows) + "\n")
	if stats && len(st.GetGroups()) > 0 {
		b.WriteString("\nDevice Stats\n" + strings.Join(instanceBlocks(st, func(string) bool { return true }), "\n\n") + "\n")
	}
	groups := slices.Clone(fp.GetDeviceGroup())
	id := func(g *devicepb.DeviceGroup) string {
		return g.GetVendor() + "/" + g.GetDeviceType() + "/" + g.GetDeviceName()
	}
	slices.SortFunc(groups, func(x, y *devicepb.DeviceGroup) int { return strings.Compare(id(x), id(y)) })
	first := true
	for _, g := range groups {
		if len(g.GetAttributes()) == 0 {
			continue
		}
		if first {
			b.WriteString("\nDevice Group Attributes\n")
			first = false
		} else {
			b.WriteString("\n")
		}
		var attrs []string
		for k, a := range g.GetAttributes() {
			attrs = append(attrs, k+"|"+AttributeString(a))
		}
		slices.Sort(attrs)
		b.WriteString(kv(append([]string{"Device Group|" + id(g)}, attrs...)) + "\n")
	}
	return b.String()
}
