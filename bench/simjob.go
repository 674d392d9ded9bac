package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/gpu/simjob"
	"github.com/gpufrac/gpufrac/size"
)

// simShape is a simulated template, at scale 1, fitted to the H200's exclusive runs of 2026-12-03
// (docs/bench/packing-2026-12-03.md, "The simulator against the H200, 2026-12-03"): a start-up that holds no GPU
// memory (on the H200 most of it is importing and loading on the CPU), a rise from the CUDA
// context to its peak as NVML sees it, and the time at the peak. A rise spread over the whole
// start-up would make every job take its memory in small steps, so next to a leaker growing
// 400 MiB a sample only the leaker would ever find the GPU full; real jobs take theirs in large
// allocations too. Start-up and hold are what one job alone takes; next to others they stretch
// (simContention).
type simShape struct {
	peak                string
	startup, ramp, hold time.Duration
	// loading is the end of the start-up, after the CUDA context: the workloads make it and a
	// first 2 MiB block (torch.zeros(1) on the device, which arms the task in the fence), then
	// import and load the model on the CPU (the mean of their imports and import-model timings
	// on the H200) before their first large allocation.
	loading time.Duration
	// leakFraction, when set, makes the job keep growing after its hold, to this share of its
	// GPU's memory, at leakPerSec. Its hold then ends startup+ramp+hold after the process
	// started, whatever its start-up took, as leaker.py's small phase does.
	leakFraction float64
	leakPerSec   string
	resultKind   string
	resultCount  int
	// load is how hard the job works the SMs while simjob runs (its memory taken), for the
	// simulated GPM; start-up uses none.
	load gpu.SimLoad
}

// LeakerFraction is the share of its GPU's memory the leaker grows to when it has the GPU to
// itself (the published benchmark's leaker completes at 76 GB of an 80 GB GPU): enough that
// co-location without caps meets it. examples/workloads/leaker.py has the same default.
const LeakerFraction = 0.93

// firstBlock is a workload's first allocation, with its context (the caching allocator's
// smallest segment).
const firstBlock = 2 * size.MiB

// rise is the time a template takes from its CUDA context to its peak (checkpoint load and
// first steps: 0.4-1.1 s of loading on the H200, then the first step's activations).
const rise = 1500 * time.Millisecond

// startupLoad: the one H200 GPM figure of a default-size job (lora-0.6b alone: SMs active 4.4%
// of its 17.6 s, all of it in the 4.5 s after loading) gives about 17% while it computes.
var (
	startupLoad       = gpu.SimLoad{SMUtil: 17, SMOccupancy: 10}
	startupLeakerLoad = gpu.SimLoad{SMUtil: 2, SMOccupancy: 1}
)

// simShapes: start-up is the mean time from the job's start to 90% of its NVML peak, less the
// rise; hold is the mean time from there to its end (H200, exclusive arms of seeds 1-3,
// 2026-12-03, 3 to 8 runs a template).
var simShapes = map[string]simShape{
	LoRA06B:   {peak: "18.7GiB", startup: 15000 * time.Millisecond, loading: 4760 * time.Millisecond, ramp: rise, hold: 3900 * time.Millisecond, resultKind: KindLosses, resultCount: 12, load: startupLoad},
	LoRA17B:   {peak: "24.6GiB", startup: 13900 * time.Millisecond, loading: 4280 * time.Millisecond, ramp: rise, hold: 4100 * time.Millisecond, resultKind: KindLosses, resultCount: 12, load: startupLoad},
	FullFT06B: {peak: "28.9GiB", startup: 15400 * time.Millisecond, loading: 4640 * time.Millisecond, ramp: rise, hold: 3700 * time.Millisecond, resultKind: KindLosses, resultCount: 12, load: startupLoad},
	Eval17B:   {peak: "16.9GiB", startup: 14800 * time.Millisecond, loading: 4890 * time.Millisecond, ramp: rise, hold: 2200 * time.Millisecond, resultKind: KindExact, resultCount: 8, load: startupLoad},
	Embed06B:  {peak: "4.3GiB", startup: 15200 * time.Millisecond, loading: 4370 * time.Millisecond, ramp: rise, hold: 3100 * time.Millisecond, resultKind: KindExact, resultCount: 8, load: startupLoad},
	Gen17B:    {peak: "4.3GiB", startup: 12100 * time.Millisecond, loading: 4130 * time.Millisecond, ramp: rise, hold: 6400 * time.Millisecond, resultKind: KindExact, resultCount: 8, load: startupLoad},
	ResNet50:  {peak: "4.3GiB", startup: 8500 * time.Millisecond, loading: 150 * time.Millisecond, ramp: rise, hold: 2900 * time.Millisecond, resultKind: KindLosses, resultCount: 12, load: startupLoad},
	// The leaker holds about 1 GiB from its CUDA context (9.7 s after its start on the H200)
	// until 20 s after its start (leaker.py's default small phase, which outlasts every other
	// template's rise, so a probe window that sees their peaks still sees a small leaker), then
	// grows 18.4 GiB a second, as the real one did (130.6 GiB in 7.1 s), to LeakerFraction of
	// its GPU's memory.
	Leaker: {peak: "1GiB", startup: 8200 * time.Millisecond, ramp: rise, hold: 10300 * time.Millisecond, leakFraction: LeakerFraction, leakPerSec: "18.4GiB", resultKind: KindExact, resultCount: 2, load: startupLeakerLoad},
}

// busySimShapes are the busy profile's jobs as the H200 ran them alone at its sizes (busy seed 1's
// exclusive arm, 2026-12-03 19:52 UTC, docs/bench-results/2026-12-03-seed1-busy-exclusive4: NVML
// peaks; hold is the work phase the job timed itself, start-up the rest of its wall less the rise;
// the load is its GPM SM-active seconds over rise and hold; the mean of its runs). generate-1.7b is
// decode-bound and the leaker computes only in its small phase, which ends 20 s after its start
// as leaker.py's does (its shape is from the run before, at the same leaker sizes).
var busySimShapes = map[string]simShape{
	LoRA06B:   {peak: "35.6GiB", startup: 11500 * time.Millisecond, loading: 4100 * time.Millisecond, ramp: rise, hold: 20400 * time.Millisecond, resultKind: KindLosses, resultCount: 48, load: gpu.SimLoad{SMUtil: 79, SMOccupancy: 47}},
	LoRA17B:   {peak: "45.3GiB", startup: 10800 * time.Millisecond, loading: 4230 * time.Millisecond, ramp: rise, hold: 25600 * time.Millisecond, resultKind: KindLosses, resultCount: 32, load: gpu.SimLoad{SMUtil: 85, SMOccupancy: 47}},
	FullFT06B: {peak: "49GiB", startup: 13100 * time.Millisecond, loading: 4370 * time.Millisecond, ramp: rise, hold: 26500 * time.Millisecond, resultKind: KindLosses, resultCount: 36, load: gpu.SimLoad{SMUtil: 81, SMOccupancy: 50}},
	Eval17B:   {peak: "29.8GiB", startup: 11100 * time.Millisecond, loading: 4440 * time.Millisecond, ramp: rise, hold: 23800 * time.Millisecond, resultKind: KindExact, resultCount: 96, load: gpu.SimLoad{SMUtil: 88, SMOccupancy: 49}},
	Embed06B:  {peak: "11.6GiB", startup: 9500 * time.Millisecond, loading: 3560 * time.Millisecond, ramp: rise, hold: 27500 * time.Millisecond, resultKind: KindExact, resultCount: 64, load: gpu.SimLoad{SMUtil: 90, SMOccupancy: 59}},
	Gen17B:    {peak: "18.5GiB", startup: 11700 * time.Millisecond, loading: 4170 * time.Millisecond, ramp: rise, hold: 4400 * time.Millisecond, resultKind: KindExact, resultCount: 32, load: gpu.SimLoad{SMUtil: 22, SMOccupancy: 10}},
	ResNet50:  {peak: "14GiB", startup: 6800 * time.Millisecond, loading: 130 * time.Millisecond, ramp: rise, hold: 22300 * time.Millisecond, resultKind: KindLosses, resultCount: 200, load: gpu.SimLoad{SMUtil: 83, SMOccupancy: 48}},
	Leaker:    {peak: "3.7GiB", startup: 8600 * time.Millisecond, ramp: rise, hold: 9900 * time.Millisecond, leakFraction: LeakerFraction, leakPerSec: "18.4GiB", resultKind: KindExact, resultCount: 2, load: gpu.SimLoad{SMUtil: 48, SMOccupancy: 7}},
}

// shapesOf is the simulated shapes of a workload profile.
func shapesOf(p WorkloadProfile) map[string]simShape {
	if p.orStartup() == ProfileBusy {
		return busySimShapes
	}
	return simShapes
}

// alone is how long a simulated job of this shape takes alone on a GPU of gpuMem at scale 1, and
// the SM-active seconds the simulated GPM sees.
func (sh simShape) alone(gpuMem size.Bytes) (wall, smActive time.Duration, err error) {
	return sh.aloneAt(gpuMem, 1)
}

// aloneAt is alone at a duration scale: the load holds over simjob's whole run (ramp, hold and
// any leak, whose rate SimJobMain does not scale); start-up computes nothing.
func (sh simShape) aloneAt(gpuMem size.Bytes, scale float64) (wall, smActive time.Duration, err error) {
	startup := time.Duration(float64(sh.startup) * scale)
	active := time.Duration(float64(sh.ramp+sh.hold) * scale)
	if sh.leakFraction > 0 {
		peak, err := size.Parse(sh.peak)
		if err != nil {
			return 0, 0, err
		}
		rate, err := size.Parse(sh.leakPerSec)
		if err != nil {
			return 0, 0, err
		}
		to := size.Bytes(float64(gpuMem)*sh.leakFraction) / size.MiB * size.MiB
		if to > peak {
			active += time.Duration(float64(to-peak) / float64(rate) * float64(time.Second))
		}
	}
	return startup + active, time.Duration(float64(active) * sh.load.SMUtil / 100), nil
}

// EnvLeakerSmall ends the leaker's small phase this many seconds after its process started, at
// scale 1, as it does for examples/workloads/leaker.py: a shorter one makes the leaker grow while
// the queue's second wave starts (the pattern of issue 25).
const EnvLeakerSmall = "GPUFRAC_LEAKER_SMALL_S"

// leakerSmall is sh with its small phase ending at small seconds ("" keeps it): the hold after
// its start-up and rise shrinks or grows; other templates are left alone.
func leakerSmall(sh simShape, small string) (simShape, error) {
	if sh.leakFraction == 0 || small == "" {
		return sh, nil
	}
	s, err := strconv.ParseFloat(small, 64)
	hold := time.Duration(s*float64(time.Second)) - sh.startup - sh.ramp
	if err != nil || hold < 0 {
		return sh, fmt.Errorf("%s=%q: want seconds, at least the leaker's start-up and rise (%s)", EnvLeakerSmall, small, sh.startup+sh.ramp)
	}
	sh.hold = hold
	return sh, nil
}

// EnvSimStartup scales every simulated job's CPU start-up (its import, CUDA context and
// model loading) by a factor, at any duration scale: the H200's start-ups ran 14-37% shorter
// from 2026-12-05 than on the days the shapes were fitted to (docs/bench/results.md), and which
// job meets the leaker's growth depends on it. The leaker's small phase still ends when it did
// after its process started, as leaker.py's does.
const EnvSimStartup = "GPUFRAC_SIM_STARTUP"

// startupScaled is sh with its start-up and loading scaled by f ("" keeps them).
func startupScaled(sh simShape, f string) (simShape, error) {
	if f == "" {
		return sh, nil
	}
	x, err := strconv.ParseFloat(f, 64)
	if err != nil || x <= 0 || x > 4 {
		return sh, fmt.Errorf("%s=%q: want a factor above 0 and at most 4", EnvSimStartup, f)
	}
	end := sh.startup + sh.ramp + sh.hold
	sh.startup = time.Duration(float64(sh.startup) * x)
	sh.loading = time.Duration(float64(sh.loading) * x)
	if sh.leakFraction > 0 {
		sh.hold = end - sh.startup - sh.ramp
	}
	return sh, nil
}

// SimJobMain is a simulated benchmark job: it runs gpu/simjob (a real process that takes memory
// on a simulated GPU, fails inside itself at an MPS limit, dies for real when killed) shaped
// like the template, and converts simjob's deterministic result into the workloads' result
// format. Flags: --template, --result, --scale (durations are multiplied by it). It returns the
// process exit code (simjob's).
func SimJobMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("simjob", flag.ContinueOnError)
	fs.SetOutput(stderr)
	template := fs.String("template", "", "one of the benchmark templates")
	result := fs.String("result", os.Getenv("GPUFRAC_RESULT"), "where to write the result (default $GPUFRAC_RESULT)")
	scale := fs.Float64("scale", 1, "multiply every duration by this")
	profile := fs.String("profile", string(ProfileStartup), "workload profile: startup or busy")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	prof, err := ParseWorkloadProfile(*profile)
	if err != nil {
		fmt.Fprintf(stderr, "simjob: --profile: %v\n", err)
		return 2
	}
	shape, ok := shapesOf(prof)[*template]
	if !ok {
		fmt.Fprintf(stderr, "simjob: --template %q is not a benchmark template\n", *template)
		return 2
	}
	if shape, err = leakerSmall(shape, os.Getenv(EnvLeakerSmall)); err != nil {
		fmt.Fprintf(stderr, "simjob: %v\n", err)
		return 2
	}
	if shape, err = startupScaled(shape, os.Getenv(EnvSimStartup)); err != nil {
		fmt.Fprintf(stderr, "simjob: %v\n", err)
		return 2
	}
	if *result == "" || *scale <= 0 {
		fmt.Fprintf(stderr, "simjob: --result must be set and --scale (%g) positive\n", *scale)
		return 2
	}
	h := fnv.New64a()
	h.Write([]byte(*template))
	seed := int64(h.Sum64() >> 1)
	raw := *result + ".simjob"
	var leakArgs []string
	if shape.leakFraction > 0 {
		total, err := simGPUMemory(os.Getenv(gpu.EnvSimDir), os.Getenv("CUDA_VISIBLE_DEVICES"))
		if err != nil {
			fmt.Fprintf(stderr, "simjob: the leaker's size: %v\n", err)
			return 2
		}
		leakTo := size.Bytes(float64(total)*shape.leakFraction) / size.MiB * size.MiB
		// The rate is not scaled: the runner samples memory every 20 ms, and a leak that passed
		// the cap between two samples would look like an ordinary crash rather than a violation.
		leakArgs = []string{"--leak-to", fmt.Sprint(uint64(leakTo)), "--leak-rate", shape.leakPerSec}
	}
	if err := declareLoad(shape.load); err != nil {
		fmt.Fprintf(stderr, "simjob: declaring the job's SM load: %v\n", err)
		return 2
	}
	board, err := joinSimBoard(os.Getenv(gpu.EnvSimDir), time.Duration(float64(cohortWindow)**scale))
	if err != nil {
		fmt.Fprintf(stderr, "simjob: %v\n", err)
		return 2
	}
	defer board.leave()
	cont := contentionOf(prof)
	before := time.Duration(float64(shape.startup-shape.loading) * *scale)
	took, rc := startUp(*template, before, cont, board, stdout, stderr)
	if rc != 0 {
		return rc
	}
	cohort, err := board.cohort()
	if err != nil {
		fmt.Fprintf(stderr, "simjob: %v\n", err)
		return 2
	}
	hold := shape.workHold(*scale, took, cohort, cont)
	// The benchmark's jobs are PyTorch programs, whose caching allocator meets a refused
	// allocation by freeing its cache and asking once more: a borrower waits twice the bound
	// before it fails (on the H200 the busy queue's leaker lived through a refusal so).
	sargs := append([]string{"--peak", shape.peak, "--ramp", scaled(shape.ramp, *scale), "--hold", hold.String(),
		"--result", raw, "--seed", fmt.Sprint(seed), "--asks", "2"}, leakArgs...)
	if shape.loading > 0 {
		// The loading is CPU work too: it stretches as the start-up before it did.
		settle := time.Duration(float64(shape.loading) * *scale)
		if before > 0 {
			settle = time.Duration(float64(settle) * float64(took) / float64(before))
		}
		sargs = append(sargs, "--first", firstBlock.String(), "--settle", settle.String())
	}
	workStart := time.Now()
	if rc := simjob.Main(sargs, stdout, stderr); rc != 0 {
		return rc
	}
	if err := convertSimResult(raw, *result, *template, shape, time.Since(workStart)); err != nil {
		fmt.Fprintf(stderr, "simjob: %v\n", err)
		return 1
	}
	return 0
}

// startUp is the job's start-up on the CPU: d of work alone, with no GPU memory, slowed while
// other simulated jobs of its cohort are alive (cont); it returns how long it took.
// SIGINT or SIGTERM end it early with simjob's exit codes (a stopped job must not go on to
// allocate).
func startUp(template string, d time.Duration, cont simContention, board *simBoard, stdout, stderr io.Writer) (time.Duration, int) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	fmt.Fprintf(stdout, "simjob: %s starting up for %s with no GPU memory\n", template, d)
	begin := time.Now()
	pace := startupPace{left: d, perOther: cont.startup}
	for !pace.done() {
		others, err := board.cohort()
		if err != nil {
			fmt.Fprintf(stderr, "simjob: %v\n", err)
			return time.Since(begin), 2
		}
		tick := time.Now()
		t := time.NewTimer(pace.next(others))
		select {
		case <-t.C:
			pace.advance(time.Since(tick), others)
		case s := <-sigs:
			t.Stop()
			if s == syscall.SIGINT {
				return time.Since(begin), simjob.ExitINT
			}
			return time.Since(begin), simjob.ExitTERM
		}
	}
	return time.Since(begin), 0
}

// simContention is how much the simulated jobs of one machine slow each other, fitted to the
// H200 (docs/bench/packing-2026-12-03.md, "The simulator against the H200, 2026-12-03"). There jobs started at
// the same moment stayed in step and met in every phase: each took about 3.2% longer over its
// CPU start-up (importing torch, the CUDA context, loading) and 9.8% longer over its work phase
// for every other job started with it, while jobs started apart (even 0.25 s apart) interleaved
// their phases on the VM's 16 cores and barely slowed each other, however many ran. So a job's
// cohort, the other live jobs of the machine that started within cohortWindow of it, is what
// slows it.
type simContention struct {
	startup float64 // start-up slowdown per other job of its cohort
	work    float64 // hold stretch per other job of its cohort alive when its work begins
}

// cohortWindow, at scale 1: on the H200 jobs the runner started in one pass started within
// 20 ms of each other, and jobs 0.25 s apart did not slow each other.
const cohortWindow = 200 * time.Millisecond

// contentionOf is the contention of a workload profile: the busy profile's work phases share
// the SMs, which the simulated GPU's SM contention models where a test turns it on.
func contentionOf(p WorkloadProfile) simContention {
	if p.orStartup() == ProfileBusy {
		return simContention{startup: 0.032}
	}
	return simContention{startup: 0.032, work: 0.098}
}

// startupPace is a start-up of left CPU time alone that advances at 1 / (1 + perOther x others)
// while others of its cohort start beside it: a measured slowdown, not a model of the H200's
// cores and disk.
type startupPace struct {
	left     time.Duration
	perOther float64
}

// paceTick bounds how long a start-up goes without looking at who else is starting.
const paceTick = 50 * time.Millisecond

func (p *startupPace) slowdown(others int) float64 { return 1 + p.perOther*float64(others) }

// next is how long to wait before looking again: a tick, or less where the start-up ends first.
func (p *startupPace) next(others int) time.Duration {
	return min(paceTick, time.Duration(float64(p.left)*p.slowdown(others)))
}

// advance counts real time spent with others starting beside it.
func (p *startupPace) advance(real time.Duration, others int) {
	p.left -= time.Duration(float64(real) / p.slowdown(others))
}

func (p *startupPace) done() bool { return p.left <= 0 }

// workHold is how long the job stays at its peak once its start-up took took, with cohort other
// jobs of its cohort alive: the leaker's small phase ends at a time since its start, as
// leaker.py's does, so a slow start-up shortens it; other jobs' holds stretch with contention.
func (sh simShape) workHold(scale float64, took time.Duration, cohort int, c simContention) time.Duration {
	if sh.leakFraction > 0 {
		end := time.Duration(float64(sh.startup+sh.ramp+sh.hold) * scale)
		return max(0, end-took-time.Duration(float64(sh.ramp)*scale))
	}
	return time.Duration(float64(sh.hold) * scale * (1 + c.work*float64(cohort)))
}

// The simulated jobs of one machine (one $GPUFRAC_SIM_DIR) meet on a board there: an empty file
// a job, named for its process and the moment it started, so that each can count its cohort. A
// job killed with SIGKILL leaves its file; a file whose process is gone is not counted and is
// removed by whoever finds it.
const simBoardDir = "simjobs"

type simBoard struct {
	dir, self string
	start     time.Time
	window    time.Duration
}

var boardSeq atomic.Int64

// joinSimBoard enters this process on the board of simDir, started now, with a cohort of the
// jobs started within window of it; with no simDir there is no board (nil), and a job has no
// cohort.
func joinSimBoard(simDir string, window time.Duration) (*simBoard, error) {
	if simDir == "" {
		return nil, nil
	}
	b := &simBoard{dir: filepath.Join(simDir, simBoardDir), start: time.Now(), window: window}
	b.self = boardName(os.Getpid(), boardSeq.Add(1), b.start)
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return nil, fmt.Errorf("the simulated jobs' board: %w", err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, b.self), nil, 0o644); err != nil {
		return nil, fmt.Errorf("the simulated jobs' board: %w", err)
	}
	return b, nil
}

func boardName(pid int, seq int64, start time.Time) string {
	return fmt.Sprintf("%d-%d-%d", pid, seq, start.UnixNano())
}

// leave takes this job off the board.
func (b *simBoard) leave() {
	if b != nil {
		_ = os.Remove(filepath.Join(b.dir, b.self))
	}
}

// cohort counts the other live jobs on the board that started within the window of this one.
func (b *simBoard) cohort() (int, error) {
	if b == nil {
		return 0, nil
	}
	ents, err := os.ReadDir(b.dir)
	if err != nil {
		return 0, fmt.Errorf("the simulated jobs' board: %w", err)
	}
	n := 0
	for _, e := range ents {
		var pid int
		var seq, start int64
		if _, err := fmt.Sscanf(e.Name(), "%d-%d-%d", &pid, &seq, &start); err != nil || e.Name() == b.self {
			continue
		}
		// A process that cannot be read is left on the board: counted, not taken off.
		if alive, err := gpu.SimProcessAlive(pid); err == nil && !alive {
			_ = os.Remove(filepath.Join(b.dir, e.Name()))
			continue
		}
		if d := time.Unix(0, start).Sub(b.start); d.Abs() <= b.window {
			n++
		}
	}
	return n, nil
}

// simGPUMemory is the memory of the simulated GPU uuid in the backend's state directory dir:
// the job's own GPU, as leaker.py reads its device's.
func simGPUMemory(dir, uuid string) (size.Bytes, error) {
	if dir == "" || uuid == "" {
		return 0, fmt.Errorf("$%s (%q) and $CUDA_VISIBLE_DEVICES (%q) must name the simulated GPU", gpu.EnvSimDir, dir, uuid)
	}
	sim, err := gpu.NewSimulated(gpu.SimConfig{Dir: dir})
	if err != nil {
		return 0, err
	}
	defer sim.Close()
	devs, err := sim.Devices(context.Background())
	if err != nil {
		return 0, err
	}
	for _, d := range devs {
		if d.UUID == uuid {
			return d.MemoryBytes, nil
		}
	}
	return 0, fmt.Errorf("GPU %q is not a simulated GPU in %s", uuid, dir)
}

func scaled(d time.Duration, s float64) string {
	return time.Duration(float64(d) * s).String()
}

// declareLoad tells the simulated GPU how hard this job works its SMs, for its GPM figures. A job
// outside a simulated GPU's reach (no $GPUFRAC_SIM_DIR or GPU) declares nothing: simjob then
// refuses to run, with its own message.
func declareLoad(l gpu.SimLoad) error {
	dir, uuid := os.Getenv(gpu.EnvSimDir), os.Getenv("CUDA_VISIBLE_DEVICES")
	if dir == "" || uuid == "" {
		return nil
	}
	sim, err := gpu.NewSimulated(gpu.SimConfig{Dir: dir})
	if err != nil {
		return err
	}
	defer sim.Close()
	return sim.SetProcessLoad(uuid, os.Getpid(), l)
}

// convertSimResult writes the workloads' result format; meta carries the work phase's seconds,
// as the PyTorch jobs' timings do, for calibration.
func convertSimResult(raw, path, template string, shape simShape, work time.Duration) error {
	data, err := os.ReadFile(raw)
	if err != nil {
		return fmt.Errorf("simulated result: %w", err)
	}
	var r simjob.Result
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("simulated result %s: %w", raw, err)
	}
	if len(r.Values) == 0 {
		return errors.New("simulated result has no values")
	}
	vals := make([]float64, shape.resultCount)
	for i := range vals {
		vals[i] = r.Values[i%len(r.Values)] + float64(i)
	}
	meta := map[string]any{"timings_s": map[string]float64{"work": work.Seconds()}}
	out, err := json.Marshal(map[string]any{"template": template, "kind": shape.resultKind, "values": vals, "meta": meta})
	if err != nil {
		return err
	}
	if err := writeAtomic(path, out); err != nil {
		return err
	}
	return os.Remove(raw)
}
