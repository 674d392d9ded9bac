package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
)

// TestSimContentionStretchesTheWorkPhase: two busy ResNet-50 jobs (each keeps the SMs 86% active
// while it computes) side by side on a GPU with SM contention take about 1.72x as long over their
// work phase as one alone, time-slicing the SMs (their start-up, on the CPU, stretches only by the
// cohort's few per cent, startupPace, and is not part of the work phase measured here).
// Without contention they run side by side at full speed, as before contention existed.
func TestSimContentionStretchesTheWorkPhase(t *testing.T) {
	if testing.Short() {
		t.Skip("runs five simulated jobs of about 2-3 s")
	}
	const scale = 0.1
	sh := busySimShapes[ResNet50]
	alone := time.Duration(float64(sh.ramp+sh.hold) * scale)
	for _, tc := range []struct {
		name     string
		contend  bool
		jobs     int
		min, max float64 // the work phase over alone
	}{
		{"alone, contention on", true, 1, 0.9, 1.25},
		{"two, contention off", false, 2, 0.9, 1.25},
		{"two, contention on", true, 2, 1.45, 2.1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim, dir, uuid := simGPU(t, "H200=140GiB")
			if tc.contend {
				if err := sim.SetContention(uuid, &gpu.SimContention{}); err != nil {
					t.Fatal(err)
				}
			}
			works := make([]time.Duration, tc.jobs)
			var wg sync.WaitGroup
			errs := make([]error, tc.jobs)
			for i := range tc.jobs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					works[i], errs[i] = runSimJob(dir, uuid, ResNet50, scale, filepath.Join(t.TempDir(), fmt.Sprintf("r%d.json", i)))
				}()
			}
			wg.Wait()
			for i, w := range works {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				if r := float64(w) / float64(alone); r < tc.min || r > tc.max {
					t.Errorf("job %d: work phase %s, %.2fx the %s alone; want %.2f-%.2fx", i, w, r, alone, tc.min, tc.max)
				}
			}
		})
	}
}

// runSimJob runs this test binary as a busy-profile simulated job of template on GPU uuid and
// returns its work phase, as its result res reports it.
func runSimJob(dir, uuid, template string, scale float64, res string) (time.Duration, error) {
	cmd := exec.Command(os.Args[0], "--template", template, "--profile", "busy", "--result", res, "--scale", fmt.Sprint(scale))
	cmd.Env = append(os.Environ(), envSimJob+"=1", gpu.EnvSimDir+"="+dir, "CUDA_VISIBLE_DEVICES="+uuid)
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("%s: %v\n%s", template, err, out)
	}
	return resultWork(res)
}

// simGPU is one simulated GPU of spec in a state directory of the test's: the backend, the
// directory (a job's $GPUFRAC_SIM_DIR) and the GPU's UUID.
func simGPU(t *testing.T, spec string) (*gpu.Simulated, string, string) {
	t.Helper()
	sim, devs := testutil.NewSim(t, spec)
	return sim, sim.Dir(), devs[0].UUID
}
