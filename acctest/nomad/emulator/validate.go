package emulator

import (
	"fmt"

	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	structspb "github.com/gpufrac/gpufrac/nomad-device/proto/structs"
)

// knownUnits are the attribute units a Nomad client accepts (case-sensitive).
var knownUnits = map[string]bool{}

func init() {
	for _, u := range []string{
		"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "kB", "KB", "MB", "GB", "TB", "PB", "EB",
		"KiB/s", "MiB/s", "GiB/s", "TiB/s", "PiB/s", "EiB/s", "kB/s", "KB/s", "MB/s", "GB/s", "TB/s", "PB/s", "EB/s",
		"MHz", "GHz", "mW", "W", "kW", "MW", "GW",
	} {
		knownUnits[u] = true
	}
}

// ValidateFingerprint applies the checks a Nomad client makes on every fingerprint message. A
// message that fails them disables the plugin until the agent restarts.
func ValidateFingerprint(m *devicepb.FingerprintResponse) error {
	for i, g := range m.GetDeviceGroup() {
		if g.GetVendor() == "" || g.GetDeviceType() == "" || g.GetDeviceName() == "" {
			return fmt.Errorf("group %d: vendor %q, type %q and name %q must all be set", i, g.GetVendor(), g.GetDeviceType(), g.GetDeviceName())
		}
		id := g.GetVendor() + "/" + g.GetDeviceType() + "/" + g.GetDeviceName()
		for j, d := range g.GetDevices() {
			if d.GetID() == "" {
				return fmt.Errorf("group %s: device %d has no ID", id, j)
			}
		}
		for k, a := range g.GetAttributes() {
			if err := validateAttribute(a); err != nil {
				return fmt.Errorf("group %s: attribute %s: %w", id, k, err)
			}
		}
	}
	return nil
}

func validateAttribute(a *structspb.Attribute) error {
	switch a.GetValue().(type) {
	case nil:
		return fmt.Errorf("no value set")
	case *structspb.Attribute_StringVal, *structspb.Attribute_BoolVal:
		if a.GetUnit() != "" {
			return fmt.Errorf("unit %q on a string or bool value", a.GetUnit())
		}
	}
	if a.GetUnit() != "" && !knownUnits[a.GetUnit()] {
		return fmt.Errorf("unknown unit %q", a.GetUnit())
	}
	return nil
}

// ValidateStats reports instance stats Nomad would drop: a missing timestamp.
func ValidateStats(m *devicepb.StatsResponse) error {
	for _, g := range m.GetGroups() {
		for id, s := range g.GetInstanceStats() {
			if s.GetTimestamp() == nil {
				return fmt.Errorf("stats of %s/%s/%s instance %s have no timestamp", g.GetVendor(), g.GetType(), g.GetName(), id)
			}
		}
	}
	return nil
}

// HealthyCount is how many of a group's instances Nomad's scheduler may place work on.
func HealthyCount(g *devicepb.DeviceGroup) int {
	n := 0
	for _, d := range g.GetDevices() {
		if d.GetHealthy() {
			n++
		}
	}
	return n
}
