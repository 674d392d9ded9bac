package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/size"
)

// The simulated leaker, given a GPU to itself, grows to LeakerFraction of that GPU's memory,
// whatever its size, as leaker.py does from its device's total memory.
func TestSimLeakerGrowsToItsGPUsShare(t *testing.T) {
	for _, tc := range []struct {
		gpu  string
		want size.Bytes
	}{
		{"A=8GiB", 7618 * size.MiB},   // 8192 MiB x 0.93 = 7618.56 MiB
		{"B=16GiB", 15237 * size.MiB}, // 16384 MiB x 0.93 = 15237.12 MiB
	} {
		t.Run(tc.gpu, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "sim")
			sim, err := gpu.NewSimulated(gpu.SimConfig{GPUs: []string{tc.gpu}, Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			devs, err := sim.Devices(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			t.Setenv(gpu.EnvSimDir, dir)
			t.Setenv("CUDA_VISIBLE_DEVICES", devs[0].UUID)
			res := filepath.Join(t.TempDir(), "leaker.json")
			var out, errs bytes.Buffer
			if rc := SimJobMain([]string{"--template", Leaker, "--result", res, "--scale", "0.01"}, &out, &errs); rc != 0 {
				t.Fatalf("exit %d: %s", rc, errs.String())
			}
			m := regexp.MustCompile(`done: peak (\S+)`).FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("no peak in the job's output %q", out.String())
			}
			if m[1] != tc.want.String() {
				t.Fatalf("peak %s, want %s (%g of %s)", m[1], tc.want, LeakerFraction, devs[0].MemoryBytes)
			}
			if _, err := os.Stat(res); err != nil {
				t.Fatalf("no result: %v", err)
			}
		})
	}
	t.Run("no GPU", func(t *testing.T) {
		t.Setenv(gpu.EnvSimDir, "")
		var out, errs bytes.Buffer
		rc := SimJobMain([]string{"--template", Leaker, "--result", filepath.Join(t.TempDir(), "r.json")}, &out, &errs)
		if rc != 2 || !strings.Contains(errs.String(), gpu.EnvSimDir) {
			t.Fatalf("exit %d, stderr %q: want 2 and a message naming %s", rc, errs.String(), gpu.EnvSimDir)
		}
	})
}

// leaker.py's default share is the simulated leaker's: both follow the same calibration.
func TestLeakerScriptFraction(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "examples", "workloads", "leaker.py"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`env_float\("GPUFRAC_LEAK_FRACTION", ([0-9.]+)\)`).FindSubmatch(src)
	if m == nil {
		t.Fatal("leaker.py reads no GPUFRAC_LEAK_FRACTION with a default")
	}
	if f, err := strconv.ParseFloat(string(m[1]), 64); err != nil || f != LeakerFraction {
		t.Fatalf("leaker.py's default fraction %s, the simulated leaker's %g: they must agree", m[1], LeakerFraction)
	}
}
