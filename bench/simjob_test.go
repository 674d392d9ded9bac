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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/procfs"
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

// A simulated job holds no GPU memory during its start-up (on the H200 mostly CPU work) until
// its CUDA context and first small block, which it holds through its loading, then takes its
// memory: each comes no earlier than its scaled time.
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
	const settled = 500*size.MiB + firstBlock
	var first, large time.Duration
	var sawSettled bool
	for large == 0 {
		select {
		case err := <-done:
			t.Fatalf("the job ended (%v) before it took its memory", err)
		case <-time.After(5 * time.Millisecond):
		}
		procs, err := sim.Processes(t.Context(), uuid)
		if err != nil || len(procs) == 0 {
			continue
		}
		if first == 0 {
			first = time.Since(start)
		}
		sawSettled = sawSettled || procs[0].UsedBytes == settled
		if procs[0].UsedBytes > settled {
			large = time.Since(start)
		}
	}
	sh := simShapes[LoRA06B]
	if want := time.Duration(float64(sh.startup-sh.loading) * scale); first < want {
		t.Errorf("first GPU memory %v after start, want none before the start-up's %v", first, want)
	}
	if want := time.Duration(float64(sh.startup) * scale); large < want {
		t.Errorf("memory past the context %v after start, want none before the loading ends at %v", large, want)
	}
	if !sawSettled {
		t.Errorf("never saw the job hold its context and first block (%s) alone", settled)
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
		{Leaker, "", 10300 * time.Millisecond, false},
		{Leaker, "12", 2300 * time.Millisecond, false},
		{Leaker, "9.7", 0, false},
		{Leaker, "9.6", 0, true},
		{Leaker, "soon", 0, true},
		{LoRA06B, "12", 3900 * time.Millisecond, false},
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

// GPUFRAC_SIM_STARTUP scales a simulated job's CPU start-up and loading; the leaker's small
// phase still ends when it did after its process started. Bad factors are refused, named.
func TestStartupScaled(t *testing.T) {
	lora, leak := simShapes[LoRA06B], simShapes[Leaker]
	leakEnd := leak.startup + leak.ramp + leak.hold
	for _, tc := range []struct {
		name, f          string
		sh               simShape
		startup, loading time.Duration
		end              time.Duration // startup+ramp+hold, where it must not move
		err              bool
	}{
		{"unset", "", lora, lora.startup, lora.loading, 0, false},
		{"faster", "0.75", lora, 11250 * time.Millisecond, 3570 * time.Millisecond, 0, false},
		{"slower", "2", lora, 30 * time.Second, 9520 * time.Millisecond, 0, false},
		{"the leaker keeps its growth's start", "0.5", leak, 4100 * time.Millisecond, 0, leakEnd, false},
		{"zero", "0", lora, 0, 0, 0, true},
		{"too large", "4.5", lora, 0, 0, 0, true},
		{"not a number", "fast", lora, 0, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh, err := startupScaled(tc.sh, tc.f)
			if (err != nil) != tc.err {
				t.Fatalf("error %v, want one: %v", err, tc.err)
			}
			if err != nil {
				if !strings.Contains(err.Error(), strconv.Quote(tc.f)) {
					t.Fatalf("error %v does not name %q", err, tc.f)
				}
				return
			}
			if sh.startup != tc.startup || sh.loading != tc.loading {
				t.Fatalf("start-up %s loading %s, want %s and %s", sh.startup, sh.loading, tc.startup, tc.loading)
			}
			if tc.end > 0 && sh.startup+sh.ramp+sh.hold != tc.end {
				t.Fatalf("the leaker's growth starts %s after its start, want %s", sh.startup+sh.ramp+sh.hold, tc.end)
			}
			if tc.end == 0 && sh.hold != tc.sh.hold {
				t.Fatalf("hold %s changed from %s", sh.hold, tc.sh.hold)
			}
		})
	}
}

// A start-up advances at 1 / (1 + k x others starting beside it): alone it takes its length,
// beside others it stretches for as long as they are there.
func TestStartupPace(t *testing.T) {
	for _, tc := range []struct {
		name     string
		perOther float64
		steps    []int // others starting, one entry a paceTick of real time
		left     time.Duration
		wantDone bool
	}{
		{"alone", 0.5, []int{0, 0, 0, 0}, 200 * time.Millisecond, true},
		{"one other, k 1: half pace", 1, []int{1, 1, 1, 1}, 200 * time.Millisecond, false},
		{"one other, k 1, long enough", 1, []int{1, 1, 1, 1, 1, 1, 1, 1}, 200 * time.Millisecond, true},
		// Four ticks beside three others do a quarter tick each: one tick's work in all.
		{"others leave midway", 1, []int{3, 3, 3, 3, 0, 0}, 200 * time.Millisecond, false},
		{"others leave midway, then done", 1, []int{3, 3, 3, 3, 0, 0, 0}, 200 * time.Millisecond, true},
		{"k 0: others change nothing", 0, []int{5, 5, 5, 5}, 200 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startupPace{left: tc.left, perOther: tc.perOther}
			for _, n := range tc.steps {
				if p.done() {
					t.Fatalf("done before step of %d others; left %v", n, p.left)
				}
				w := p.next(n)
				if w > paceTick {
					t.Fatalf("waits %v, more than a tick", w)
				}
				p.advance(paceTick, n)
			}
			if p.done() != tc.wantDone {
				t.Fatalf("done %v after %v, want %v (left %v)", p.done(), tc.steps, tc.wantDone, p.left)
			}
		})
	}
	// The last wait is what is left, stretched, not a whole tick.
	p := startupPace{left: 10 * time.Millisecond, perOther: 1}
	if got := p.next(2); got != 30*time.Millisecond {
		t.Fatalf("next with 10ms left and 2 others at k 1: %v, want 30ms", got)
	}
}

// After its start-up a job holds its peak for its hold, stretched by the other jobs of its
// cohort; the leaker's small phase ends at a time since its start, so a slow start-up shortens it.
func TestWorkHold(t *testing.T) {
	c := simContention{startup: 0.032, work: 0.1}
	lora, leaker := simShapes[LoRA06B], simShapes[Leaker]
	for _, tc := range []struct {
		name   string
		sh     simShape
		scale  float64
		took   time.Duration
		cohort int
		want   time.Duration
	}{
		{"lora alone", lora, 1, lora.startup, 0, lora.hold},
		{"lora with five", lora, 1, lora.startup, 5, lora.hold * 3 / 2},
		{"lora at scale 0.1 with two", lora, 0.1, lora.startup / 10, 2, time.Duration(float64(lora.hold) * 0.1 * 1.2)},
		{"leaker alone", leaker, 1, leaker.startup, 0, leaker.hold},
		{"leaker with five, started 2 s late", leaker, 1, leaker.startup + 2*time.Second, 5, leaker.hold - 2*time.Second},
		{"leaker whose start-up outlasted its small phase", leaker, 1, 30 * time.Second, 0, 0},
	} {
		if got := tc.sh.workHold(tc.scale, tc.took, tc.cohort, c); (got - tc.want).Abs() > time.Microsecond {
			t.Errorf("%s: hold %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A job's cohort is the machine's other live simulated jobs started within the window of it: a
// job started apart is not in it, and a job that died without leaving (SIGKILL) is not counted
// and its file goes, reaped or not (a zombie does no more work).
func TestSimBoard(t *testing.T) {
	simDir := t.TempDir()
	const window = time.Hour // the test's joins are all within it
	me, err := joinSimBoard(simDir, window)
	if err != nil {
		t.Fatal(err)
	}
	mate, err := joinSimBoard(simDir, window)
	if err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	zombie := exec.Command("sleep", "60")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = zombie.Wait() })
	if err := zombie.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the killed child to be a zombie", func() bool {
		st, err := procfs.Linux("").Stat(zombie.Process.Pid)
		return err == nil && st.State == 'Z'
	})
	board := filepath.Join(simDir, simBoardDir)
	deadFile := filepath.Join(board, boardName(dead.Process.Pid, 1, time.Now()))
	zombieFile := filepath.Join(board, boardName(zombie.Process.Pid, 1, time.Now()))
	apart := filepath.Join(board, boardName(os.Getpid(), 99, me.start.Add(-2*window)))
	for _, f := range []string{deadFile, zombieFile, apart} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string, want int) {
		t.Helper()
		if n, err := me.cohort(); err != nil || n != want {
			t.Fatalf("%s: cohort %d (%v), want %d", when, n, err, want)
		}
	}
	check("a mate, a dead job, a zombie, a job started apart", 1)
	for _, f := range []string{deadFile, zombieFile} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a dead job's file %s stays on the board: %v", filepath.Base(f), err)
		}
	}
	if _, err := os.Stat(apart); err != nil {
		t.Errorf("a live job started apart was taken off the board: %v", err)
	}
	mate.leave()
	check("the mate gone", 0)
	var none *simBoard
	if n, err := none.cohort(); n != 0 || err != nil {
		t.Fatalf("no board: cohort %d, %v; want none", n, err)
	}
}

// A start-up with others of its cohort takes longer than alone, by the contention's share; a
// job started apart does not slow it. The lower bounds are exact (the pace never runs faster);
// the upper ones leave room for a loaded machine.
func TestStartUpSharesTheCPU(t *testing.T) {
	const d = 100 * time.Millisecond
	c := simContention{startup: 1}
	for _, tc := range []struct {
		name          string
		mates, apart  int
		min, max      time.Duration
		wantCohortEnd int
	}{
		{"alone", 0, 0, d, 10 * d, 0},
		{"with one", 1, 0, 2 * d, 20 * d, 1},
		{"with two", 2, 0, 3 * d, 30 * d, 2},
		{"beside two started apart", 0, 2, d, 10 * d, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			simDir := t.TempDir()
			for range tc.mates {
				if _, err := joinSimBoard(simDir, time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			b, err := joinSimBoard(simDir, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.apart {
				f := filepath.Join(simDir, simBoardDir, boardName(os.Getpid(), int64(1000+i), b.start.Add(-time.Hour)))
				if err := os.WriteFile(f, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var out, errs bytes.Buffer
			took, rc := startUp(LoRA06B, d, c, b, &out, &errs)
			if rc != 0 {
				t.Fatalf("exit %d: %s", rc, errs.String())
			}
			if took < tc.min || took > tc.max {
				t.Fatalf("start-up of %v with %d mates, %d apart took %v, want %v to %v", d, tc.mates, tc.apart, took, tc.min, tc.max)
			}
			if n, _ := b.cohort(); n != tc.wantCohortEnd {
				t.Fatalf("cohort after: %d, want the %d mates untouched", n, tc.wantCohortEnd)
			}
		})
	}
}

// TestSimContentionStretchesTheWorkPhase: two busy ResNet-50 jobs (each keeps the SMs 83% active
// while it computes) side by side on a GPU with SM contention take about 1.66x as long over their
// work phase as one alone when they share the SMs, and about 1.82x when the GPU time-slices their
// kernels, each kernel keeping 91% of the SMs active (their start-up, on the CPU, stretches only
// by the cohort's few per cent, startupPace, and is not part of the work phase measured here).
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
		contend  *gpu.SimContention
		jobs     int
		min, max float64 // the work phase over alone
	}{
		{"alone, contention on", &gpu.SimContention{KernelSM: gpu.DefaultSimKernelSM}, 1, 0.9, 1.25},
		{"two, contention off", nil, 2, 0.9, 1.25},
		{"two, sharing the SMs", &gpu.SimContention{}, 2, 1.45, 1.78},
		{"two, time-sliced", &gpu.SimContention{KernelSM: gpu.DefaultSimKernelSM}, 2, 1.7, 2.2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim, dir, uuid := simGPU(t, "H200=140GiB")
			if tc.contend != nil {
				if err := sim.SetContention(uuid, tc.contend); err != nil {
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
