package bench

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// h200 is the simulated benchmark GPU's memory (gpufrac-bench's default --sim-gpus).
const h200 = 140 * size.GiB

// The busy profile's simulated jobs each keep the SMs active 55-65% of their run alone, in at
// most 40 s (the target, so a seed's exclusive arm fits a device call); the start-up
// profile's stay start-up heavy, as measured on the H200 (4.4% for a LoRA job).
func TestProfileSizes(t *testing.T) {
	tests := []struct {
		profile        WorkloadProfile
		minSM, maxSM   float64
		minWall, maxWa time.Duration
	}{
		{ProfileBusy, 0.55, 0.65, 20 * time.Second, 40 * time.Second},
		{ProfileStartup, 0, 0.10, 8 * time.Second, 31 * time.Second},
	}
	for _, tc := range tests {
		shapes := shapesOf(tc.profile)
		for _, tpl := range Templates {
			sh, ok := shapes[tpl]
			if !ok {
				t.Errorf("%s profile: no simulated shape for %s", tc.profile, tpl)
				continue
			}
			wall, active, err := sh.alone(h200)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.profile, tpl, err)
			}
			f := active.Seconds() / wall.Seconds()
			if f < tc.minSM || f > tc.maxSM || wall < tc.minWall || wall > tc.maxWa {
				t.Errorf("%s %s alone: %.1f s, SMs active %.1f%%; want %v-%v and %.0f-%.0f%%", tc.profile, tpl,
					wall.Seconds(), 100*f, tc.minWall, tc.maxWa, 100*tc.minSM, 100*tc.maxSM)
			}
		}
	}
}

// scriptKnobs is the source of a template's script and of the module it delegates to
// (lora_17b.py runs lora_06b.py's main).
func scriptSource(t *testing.T, template string) string {
	t.Helper()
	var src strings.Builder
	for _, f := range []string{Scripts[template], "common.py"} {
		b, err := os.ReadFile(filepath.Join("..", "examples", "workloads", f))
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	if template == LoRA17B {
		b, err := os.ReadFile(filepath.Join("..", "examples", "workloads", Scripts[LoRA06B]))
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	return src.String()
}

// Every knob the busy profile sets is one its script reads (a misspelt knob would be ignored
// without a word and the job would run at its start-up size), with a positive integer value, and
// every job but the leaker has the knob that calibration scales.
func TestBusySizesAreReadByTheScripts(t *testing.T) {
	for _, tpl := range Templates {
		knobs, ok := BusySizes[tpl]
		if !ok || len(knobs) == 0 {
			t.Errorf("%s: no busy sizes", tpl)
			continue
		}
		src := scriptSource(t, tpl)
		for k, v := range knobs {
			if !strings.Contains(src, `"`+k+`"`) {
				t.Errorf("%s: busy knob %s is not read by %s", tpl, k, Scripts[tpl])
			}
			if n, err := strconv.Atoi(v); err != nil || n < 0 || (n == 0 && k != "GPUFRAC_LEAKER_STEP_MS") {
				t.Errorf("%s: %s=%q is not a positive integer", tpl, k, v)
			}
		}
		if tpl == Leaker {
			continue
		}
		if k, ok := WorkKnob[tpl]; !ok || knobs[k] == "" {
			t.Errorf("%s: the busy sizes do not set its work knob %q", tpl, k)
		}
	}
}

func TestProfileEnv(t *testing.T) {
	if env := ProfileEnv(ProfileStartup, LoRA06B); env != nil {
		t.Errorf("startup profile: env %v, want the scripts' defaults", env)
	}
	env := ProfileEnv(ProfileBusy, LoRA06B)
	if env["GPUFRAC_STEPS"] != BusySizes[LoRA06B]["GPUFRAC_STEPS"] {
		t.Fatalf("busy env %v", env)
	}
	env["GPUFRAC_STEPS"] = "1"
	if BusySizes[LoRA06B]["GPUFRAC_STEPS"] == "1" {
		t.Fatal("ProfileEnv handed out the profile's own map")
	}
	// The job's command carries the profile's sizes; --job-env overrides win over them.
	py := PythonWorkloads{Dir: "/w", Profile: ProfileBusy, Env: map[string]string{"GPUFRAC_BATCH": "2"}}
	_, env, err := py.Command(LoRA17B, "/r.json")
	if err != nil {
		t.Fatal(err)
	}
	if env["GPUFRAC_STEPS"] != BusySizes[LoRA17B]["GPUFRAC_STEPS"] || env["GPUFRAC_BATCH"] != "2" {
		t.Fatalf("busy lora-1.7b env %v", env)
	}
	for _, tc := range []struct {
		in      string
		want    WorkloadProfile
		wantErr bool
	}{{"", ProfileStartup, false}, {"startup", ProfileStartup, false}, {"busy", ProfileBusy, false}, {"heavy", "", true}} {
		got, err := ParseWorkloadProfile(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr || (err != nil && !strings.Contains(err.Error(), `"heavy"`)) {
			t.Errorf("ParseWorkloadProfile(%q) = %q, %v", tc.in, got, err)
		}
	}
}
