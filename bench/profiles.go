package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// LoadProfiles reads stored footprints for warm arms: a JSON object mapping a template to its
// measured peak ("18.7GiB" or a byte count), plus optional "_source", "_measured_at" and
// "_workload" (the workload profile the peaks are of; absent: startup) notes, and
// "_sm_active_percent", an object mapping templates to the share of their run they kept the SMs
// active alone (the compute budget's demands; a template it omits is unknown).
// Templates it omits are probed by the runner as usual. Errors name the bad entry.
func LoadProfiles(path string) ([]ledger.Profile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("profiles %s: want a JSON object of template -> size: %w", path, err)
	}
	sm := map[string]float64{}
	if v, ok := top[profilesSMKey]; ok {
		if err := json.Unmarshal(v, &sm); err != nil {
			return nil, fmt.Errorf("profiles %s: %s: want an object of template -> percent: %w", path, profilesSMKey, err)
		}
		delete(top, profilesSMKey)
	}
	doc := map[string]string{}
	for k, v := range top {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, fmt.Errorf("profiles %s: %s = %s: want a string (a size, or a note)", path, k, v)
		}
		doc[k] = s
	}
	at := time.Time{}
	if s, ok := doc["_measured_at"]; ok {
		if at, err = time.Parse(time.RFC3339, s); err != nil {
			return nil, fmt.Errorf("profiles %s: _measured_at %q: %w", path, s, err)
		}
	}
	known := map[string]bool{}
	for _, t := range Templates {
		known[t] = true
	}
	for name, pct := range sm {
		if !known[name] {
			return nil, fmt.Errorf("profiles %s: %s: unknown template %q", path, profilesSMKey, name)
		}
		if err := policy.CheckSMActive(profilesSMKey+"."+name, pct); err != nil {
			return nil, fmt.Errorf("profiles %s: %w", path, err)
		}
		if _, ok := doc[name]; !ok {
			return nil, fmt.Errorf("profiles %s: %s gives %s an SM share but no peak: a profile needs its peak", path, profilesSMKey, name)
		}
	}
	var out []ledger.Profile
	for name, v := range doc {
		if name == "_source" || name == "_measured_at" || name == profilesWorkloadKey {
			continue
		}
		if !known[name] {
			return nil, fmt.Errorf("profiles %s: unknown template %q", path, name)
		}
		peak, err := size.Parse(v)
		if err != nil || peak == 0 {
			return nil, fmt.Errorf("profiles %s: %s = %q is not a positive size", path, name, v)
		}
		p := ledger.Profile{Template: name, PeakBytes: peak, Samples: 1, MeasuredAt: at, Source: ledger.ProfileProbe}
		if pct, ok := sm[name]; ok {
			p.SMActivePercent = &pct
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Template < out[j].Template })
	return out, nil
}

// profilesSMKey holds the templates' SM-active shares in a profiles file.
const profilesSMKey = "_sm_active_percent"

const profilesWorkloadKey = "_workload"

// LoadProfilesFor is LoadProfiles for a run of workload profile want: footprints measured on the
// other profile's jobs would give busy jobs the small jobs' caps (and the reverse), so they are
// refused with an error that names both.
func LoadProfilesFor(path string, want WorkloadProfile) ([]ledger.Profile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("profiles %s: want a JSON object of template -> size: %w", path, err)
	}
	got := ProfileStartup
	if v, ok := doc[profilesWorkloadKey]; ok {
		s, _ := v.(string)
		if got, err = ParseWorkloadProfile(s); err != nil || s == "" {
			return nil, fmt.Errorf("profiles %s: %s %v: want one of %q", path, profilesWorkloadKey, v, WorkloadProfiles)
		}
	}
	if got != want.orStartup() {
		return nil, fmt.Errorf("profiles %s hold the footprints of the %s profile's jobs, not the %s profile's: give the %s profile's (gpufrac-bench calibrate writes them) or none",
			path, got, want.orStartup(), want.orStartup())
	}
	return LoadProfiles(path)
}
