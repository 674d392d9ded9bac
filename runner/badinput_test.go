package runner

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/size"
)

// A job's missing working directory is named before anything runs, instead of surfacing as a
// fork/exec error that blames the program.
func TestRunRefusesAMissingDir(t *testing.T) {
	sim := newSim(t, "H100=80GiB")
	missing := filepath.Join(t.TempDir(), "no-such-dir")
	j := simJob(t, "a", "t", "--peak", "1GiB")
	j.Dir = missing
	_, err := Run(context.Background(), Queue{Jobs: []Job{j}}, testOptions(t, sim, ArmPacked))
	if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), `job "a"`) {
		t.Fatalf("Run: %v; want an options error naming job a and %s", err, missing)
	}
}

// A template whose probe sees no GPU memory gets a footprint of one unit, said in the probe's
// detail, so its other jobs are admitted under a cap instead of each being probed again.
func TestProbeThatSeesNoGPUMemory(t *testing.T) {
	sim := newSim(t, "H100=80GiB")
	var jobs []Job
	for _, n := range []string{"a", "b", "c", "d"} {
		jobs = append(jobs, Job{Name: n, Template: "cpu-only", Command: []string{"true"}})
	}
	o := testOptions(t, sim, ArmPacked)
	res := runQueue(t, Queue{Jobs: jobs}, o)
	if res.Completed != 4 {
		t.Fatalf("completed %d of 4: %+v", res.Completed, res.Attempts)
	}
	probes := 0
	want := o.Policy.UnitBytes * size.Bytes(o.Policy.Units(o.Policy.Cap(o.Policy.UnitBytes)))
	for _, a := range res.Attempts {
		switch {
		case a.Probe:
			probes++
			if !strings.Contains(a.Detail, "probe saw no GPU memory: footprint set to one unit") {
				t.Errorf("probe %s: detail %q should say what footprint it was given", a.Job, a.Detail)
			}
		case a.CapBytes != want:
			t.Errorf("%s ran under a %s cap, want %s (one unit's footprint)", a.Job, a.CapBytes, want)
		}
	}
	if probes != 1 {
		t.Fatalf("%d probes, want 1: %+v", probes, res.Attempts)
	}
}
