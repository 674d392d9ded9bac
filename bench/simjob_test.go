package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
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
			_, dir, uuid := simGPU(t, tc.gpu)
			t.Setenv(gpu.EnvSimDir, dir)
			t.Setenv("CUDA_VISIBLE_DEVICES", uuid)
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
				t.Fatalf("peak %s, want %s (%g of %s)", m[1], tc.want, LeakerFraction, tc.gpu)
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

// A simulated job holds no GPU memory during its start-up (on the H200 mostly CPU work), then
// takes its memory; the first memory it reports comes no earlier than its scaled start-up.
func TestSimJobStartUpHoldsNoMemory(t *testing.T) {
	sim, dir, uuid := simGPU(t, "H200=140GiB")
	const scale = 0.1
	cmd := exec.Command(os.Args[0], "--template", LoRA06B, "--result", filepath.Join(t.TempDir(), "r.json"), "--scale", fmt.Sprint(scale))
	cmd.Env = append(os.Environ(), envSimJob+"=1", gpu.EnvSimDir+"="+dir, "CUDA_VISIBLE_DEVICES="+uuid)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var first time.Duration
	for first == 0 {
		select {
		case err := <-done:
			t.Fatalf("the job ended (%v) before it reported any GPU memory", err)
		case <-time.After(5 * time.Millisecond):
		}
		if procs, err := sim.Processes(t.Context(), uuid); err == nil && len(procs) > 0 {
			first = time.Since(start)
		}
	}
	if want := time.Duration(float64(simShapes[LoRA06B].startup) * scale); first < want {
		t.Errorf("first GPU memory %v after start, want none before the start-up's %v", first, want)
	}
	if err := <-done; err != nil {
		t.Fatalf("job: %v", err)
	}

	// Stopped during its start-up, it exits as a simulated job does, having taken nothing.
	cmd = exec.Command(os.Args[0], "--template", Eval17B, "--result", filepath.Join(t.TempDir(), "r.json"))
	cmd.Env = append(os.Environ(), envSimJob+"=1", gpu.EnvSimDir+"="+dir, "CUDA_VISIBLE_DEVICES="+uuid)
	out, stderr := testutil.StartPiped(t, cmd)
	// The job says it is starting up once its signal handler is in place; its start-up at scale
	// 1 is 14.5 s, so the SIGTERM lands inside it.
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.Contains(line, "starting up") {
		t.Fatalf("first line %q (%v), want the start-up's", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 143 {
		t.Fatalf("stopped in its start-up: %v (stderr %q), want exit 143", err, stderr.String())
	}
}

// GPUFRAC_LEAKER_SMALL_S moves the simulated leaker's growth as it moves the real one's: its
// small phase ends that many seconds after the process started; other templates ignore it.
func TestLeakerSmallPhase(t *testing.T) {
	for _, tc := range []struct {
		template, small string
		hold            time.Duration
		err             bool
	}{
		{Leaker, "", 16 * time.Second, false},
		{Leaker, "12", 4 * time.Second, false},
		{Leaker, "8", 0, false},
		{Leaker, "7.9", 0, true},
		{Leaker, "soon", 0, true},
		{LoRA06B, "12", 3 * time.Second, false},
	} {
		sh, err := leakerSmall(simShapes[tc.template], tc.small)
		if (err != nil) != tc.err || err == nil && sh.hold != tc.hold {
			t.Errorf("%s with %q: hold %s, error %v; want hold %s, error %v", tc.template, tc.small, sh.hold, err, tc.hold, tc.err)
		}
		if err != nil && !strings.Contains(err.Error(), tc.small) {
			t.Errorf("%s with %q: error %v does not name the value", tc.template, tc.small, err)
		}
	}
}
