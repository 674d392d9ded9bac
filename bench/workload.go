package bench

import (
	"fmt"
	"maps"
	"slices"
)

// WorkloadProfile is the size of the queue's jobs: the same templates, the same seeded order,
// small or large.
type WorkloadProfile string

const (
	// ProfileStartup is the benchmark's original queue: default-size jobs that spend most of
	// their 8-25 s in Python start-up (a LoRA job alone kept the H200's SMs active 4.4% of its
	// run). Packing them mostly overlaps start-up.
	ProfileStartup WorkloadProfile = "startup"
	// ProfileBusy sizes every job (larger batches, more steps) to keep the SMs active 55-65% of
	// its run alone, as the published prototype's jobs did (58.7%), in at most about 40 s.
	// Packing them makes jobs contend for SMs.
	ProfileBusy WorkloadProfile = "busy"
)

// WorkloadProfiles lists the profiles; the first is the default.
var WorkloadProfiles = []WorkloadProfile{ProfileStartup, ProfileBusy}

// ParseWorkloadProfile reads a profile name; "" is ProfileStartup.
func ParseWorkloadProfile(s string) (WorkloadProfile, error) {
	if s == "" {
		return ProfileStartup, nil
	}
	p := WorkloadProfile(s)
	if !slices.Contains(WorkloadProfiles, p) {
		return "", fmt.Errorf("workload profile %q: want one of %q", s, WorkloadProfiles)
	}
	return p, nil
}

// orStartup is a profile as recorded, where summaries written before profiles existed say "".
func (p WorkloadProfile) orStartup() WorkloadProfile {
	if p == "" {
		return ProfileStartup
	}
	return p
}

// BusySizes are the busy profile's size knobs of each PyTorch job, read by the scripts in
// examples/workloads (see each docstring), as calibrated on the H200 on 2026-12-03
// (docs/benchmarks.md, "Calibration on the H200"): fullft, eval, embed and resnet50 keep the SMs
// 55-65% active alone in about 40 s; the LoRA jobs reach 50-54% (their ~13.5 s of start-up cannot
// be amortised within 40 s), generate-1.7b is decode-bound (14%).
var BusySizes = map[string]map[string]string{
	LoRA06B:   {"GPUFRAC_STEPS": "110", "GPUFRAC_BATCH": "8", "GPUFRAC_SEQ": "1024"},
	LoRA17B:   {"GPUFRAC_STEPS": "100", "GPUFRAC_BATCH": "8", "GPUFRAC_SEQ": "1024"},
	FullFT06B: {"GPUFRAC_STEPS": "120", "GPUFRAC_BATCH": "8", "GPUFRAC_SEQ": "1024"},
	Eval17B:   {"GPUFRAC_SEQS": "2048", "GPUFRAC_BATCH": "16", "GPUFRAC_SEQ": "1024"},
	Embed06B:  {"GPUFRAC_SEQS": "10240", "GPUFRAC_BATCH": "128", "GPUFRAC_SEQ": "512"},
	Gen17B:    {"GPUFRAC_SEQS": "256", "GPUFRAC_SEQ": "128", "GPUFRAC_NEW": "128"},
	ResNet50:  {"GPUFRAC_STEPS": "396", "GPUFRAC_BATCH": "256"},
	// The leaker's small phase trains a wider MLP on a larger batch without pausing between
	// steps, so it computes like its neighbours until it starts to leak.
	Leaker: {"GPUFRAC_LEAKER_STEP_MS": "0", "GPUFRAC_LEAKER_BATCH": "8192", "GPUFRAC_LEAKER_WIDTH": "8192"},
}

// WorkKnob is the knob of each template that scales its work phase linearly (steps, sequences,
// new tokens), the one calibration adjusts; the leaker's work is bounded by time instead.
var WorkKnob = map[string]string{
	LoRA06B: "GPUFRAC_STEPS", LoRA17B: "GPUFRAC_STEPS", FullFT06B: "GPUFRAC_STEPS",
	Eval17B: "GPUFRAC_SEQS", Embed06B: "GPUFRAC_SEQS", Gen17B: "GPUFRAC_NEW", ResNet50: "GPUFRAC_STEPS",
}

// ProfileEnv is the environment a template's job gets in profile p (nil for ProfileStartup: the
// scripts' defaults). The caller may add to the map it returns.
func ProfileEnv(p WorkloadProfile, template string) map[string]string {
	if p.orStartup() != ProfileBusy {
		return nil
	}
	return maps.Clone(BusySizes[template])
}
