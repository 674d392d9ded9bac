// Command gpufrac-bench runs the packing benchmark (bench package) and renders its tables.
// `run` exits 0 when every arm ran to its end, 1 when one failed or the run broke, 3 when arms
// were skipped (deadline); results are written in every case.
//
//	gpufrac-bench run    --seed N [--arms LIST] [--workloads python|sim] [--out DIR] ...
//	gpufrac-bench calibrate [--profile busy] ...       each template alone: SM figures, proposed sizes
//	gpufrac-bench queue  --seed N                      print the seed's queue
//	gpufrac-bench report [--into FILE] DIR...          combined arm x seed table
//	gpufrac-bench compare REF_ARM_DIR ARM_DIR          results of two runs within the tolerances
//	gpufrac-bench simjob --template T --result F       one simulated job (used by --workloads sim)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpufrac/gpufrac/bench"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/runner"
	"github.com/gpufrac/gpufrac/size"
	"github.com/hashicorp/go-hclog"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: gpufrac-bench COMMAND [flags]
commands:
  run     run one seed's arms and write docs/bench-results/<date>-seed<N>/
  calibrate run each template alone (exclusive) and print its SM activity (GPM), wall time, peak
          and the work size that reaches the busy profile's target; writes profiles-<profile>.json
  queue   print the queue of a seed
  report  render the combined table of several runs (optionally into docs/bench/results.md)
  compare check one arm's results against another's (e.g. a seed's two exclusive runs from two calls)
  simjob  one simulated benchmark job (what --workloads sim runs)
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:], stdout, stderr, false)
	case "calibrate":
		return cmdRun(args[1:], stdout, stderr, true)
	case "queue":
		return cmdQueue(args[1:], stdout, stderr)
	case "report":
		return cmdReport(args[1:], stdout, stderr)
	case "compare":
		return cmdCompare(args[1:], stdout, stderr)
	case "simjob":
		return bench.SimJobMain(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "gpufrac-bench: unknown command %q\n%s", args[0], usage)
	return 2
}

type kvFlag map[string]string

func (k kvFlag) String() string { return fmt.Sprint(map[string]string(k)) }
func (k kvFlag) Set(s string) error {
	key, val, ok := strings.Cut(s, "=")
	if !ok || key == "" {
		return fmt.Errorf("%q: want KEY=VALUE", s)
	}
	k[key] = val
	return nil
}

func cmdQueue(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("queue", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Uint64("seed", 1, "queue seed")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	for _, e := range bench.Draw(*seed) {
		fmt.Fprintf(stdout, "%s\t%s\n", e.Name, e.Template)
	}
	return 0
}

// cmdRun runs one seed's arms, or, calibrating, one exclusive arm of every template once.
func cmdRun(args []string, stdout, stderr io.Writer, calibrate bool) int {
	name, defArms, defProfile := "run", "exclusive,packed-mps,packed-isolated,exclusive", bench.ProfileStartup
	if calibrate {
		name, defArms, defProfile = "calibrate", "exclusive", bench.ProfileBusy
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Uint64("seed", 1, "queue seed (1, 2, 3 are the published ones)")
	arms := fs.String("arms", defArms, "arms in order: ARM[-MODE][-cold|-warm][-BORROW][-instant|-holdN][-smN], the first exclusive")
	profile := fs.String("profile", string(defProfile), "workload profile: startup (default-size jobs, start-up heavy) or busy (jobs sized to keep the SMs 55-65% active alone)")
	queueLen := fs.Int("queue-len", 0, "run only the seed's first N jobs (a short A/A run; 0: all)")
	only := fs.String("templates", "", "calibrate: only these templates (comma-separated), e.g. to try a size with --job-env")
	ref := fs.String("ref", "", "check results against this earlier run's exclusive arm (its arm directory) instead of a first exclusive arm: the arms may then start with any arm")
	gpmInterval := fs.Duration("gpm-interval", bench.DefaultGPMInterval, "how often the GPUs' performance monitors (SM util, occupancy) are read; 0: not read")
	mode := fs.String("mode", string(policy.ModeIsolated), "mode of arms that name none (mps or isolated)")
	workloads := fs.String("workloads", "python", "python: the PyTorch jobs; sim: simulated jobs (no GPU needed)")
	python := fs.String("python", "python3", "Python interpreter of the workloads")
	wdir := fs.String("workloads-dir", "examples/workloads", "directory of the workload scripts")
	cache := fs.String("cache", os.Getenv("GPUFRAC_CACHE"), "checkpoint directory written by prepare.py (default $GPUFRAC_CACHE)")
	out := fs.String("out", "docs/bench-results", "results go to OUT/<date>-seed<N>[-SUFFIX]")
	suffix := fs.String("suffix", "", "appended to the results directory's name (e.g. arms)")
	backend := fs.String("backend", gpu.KindAuto, "GPU backend: nvml, simulated or auto")
	simGPUs := fs.String("sim-gpus", "H200=140GiB", "simulated GPUs (simulated backend)")
	simDir := fs.String("sim-dir", "", "simulated backend state directory (default: OUT/.../sim)")
	simScale := fs.Float64("sim-scale", 0.1, "duration scale of simulated jobs")
	simContention := fs.Float64("sim-contention", -1, fmt.Sprintf("simulated backend: SM contention, with this switching cost per extra busy context (%g is the documented assumption); negative: none, every job works at full speed", gpu.DefaultSimSwitchCost))
	simKernelSM := fs.Float64("sim-kernel-sm", gpu.DefaultSimKernelSM, "simulated backend, with --sim-contention: the share of the SMs one job's kernels keep active; the GPU time-slices, running one job's kernels at a time (the H200 without MPS); 0: jobs share the SMs themselves, as their kernels running at once would (MPS)")
	probeWindow := fs.Duration("probe-window", 0, "make cold probes windows of this length (0: whole-run probes)")
	probeCap := fs.String("probe-cap", "", "protective cap of every template's in-place probe, e.g. 35GiB (default: half the GPU's budget)")
	borrow := fs.String("borrow", node.BorrowAuto, "borrowing of the packed arms: auto, wait, now, lend or off (gpufrac run --borrow); an arm may name its own (packed-isolated-warm-lend)")
	borrowWait := fs.Duration("borrow-wait", 0, "how long a borrower's allocation may wait (0: the runner's default)")
	armTimeout := fs.Duration("arm-timeout", 0, "stop an arm after this long (0: no limit)")
	deadline := fs.Duration("deadline", 0, "start no arm later than this after the start (0: no limit)")
	mpsRoot := fs.String("mps-root", "", "MPS pipe/log root (default: the runner's)")
	logLevel := fs.String("log-level", "info", "log level")
	profiles := fs.String("profiles", "", "JSON file of template -> measured peak that warm arms start from (e.g. bench/profiles-h200.json)")
	jobEnv := kvFlag{}
	fs.Var(jobEnv, "job-env", "KEY=VALUE added to every job's environment (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "gpufrac-bench", Level: hclog.LevelFromString(*logLevel), Output: stderr})
	var pcap size.Bytes
	if *probeCap != "" {
		c, err := size.Parse(*probeCap)
		if err != nil || c == 0 {
			fmt.Fprintf(stderr, "gpufrac-bench: --probe-cap %q: want a size such as 35GiB\n", *probeCap)
			return 2
		}
		pcap = c
	}
	if err := node.CheckBorrow(*borrow); err != nil {
		fmt.Fprintf(stderr, "gpufrac-bench: --%v\n", err)
		return 2
	}
	if *borrowWait < 0 {
		fmt.Fprintf(stderr, "gpufrac-bench: --borrow-wait %s: want a duration of 0 or more\n", *borrowWait)
		return 2
	}
	parse := bench.ParseArms
	if *ref != "" {
		parse = bench.ParseArmsWithRef
	}
	specs, err := parse(*arms, *mode)
	if err != nil {
		fmt.Fprintf(stderr, "gpufrac-bench: --arms: %v\n", err)
		return 2
	}
	wprof, err := bench.ParseWorkloadProfile(*profile)
	if err != nil {
		fmt.Fprintf(stderr, "gpufrac-bench: --%v\n", err)
		return 2
	}
	if *queueLen < 0 || *queueLen > bench.QueueLen || *gpmInterval < 0 {
		fmt.Fprintf(stderr, "gpufrac-bench: --queue-len %d (want 0 to %d) or --gpm-interval %s (want 0 or more) is out of range\n", *queueLen, bench.QueueLen, *gpmInterval)
		return 2
	}
	var refDir string
	if *ref != "" {
		if refDir, err = bench.CheckRef(*ref, *seed, wprof); err != nil {
			fmt.Fprintf(stderr, "gpufrac-bench: --ref: %v\n", err)
			return 2
		}
	}
	if calibrate && (len(specs) != 1 || specs[0].Arm != "exclusive" || *queueLen != 0 || *ref != "") {
		fmt.Fprintf(stderr, "gpufrac-bench calibrate: --arms %q, --queue-len %d: calibration runs one exclusive arm of every template\n", *arms, *queueLen)
		return 2
	}
	start := time.Now().UTC()
	base := fmt.Sprintf("%s-seed%d", start.Format("2006-01-02"), *seed)
	if calibrate {
		base = start.Format("2006-01-02") + "-calibration"
	}
	if wprof != bench.ProfileStartup {
		base += "-" + string(wprof)
	}
	if *suffix != "" {
		base += "-" + *suffix
	}
	dir := filepath.Join(*out, base)
	if _, err := os.Stat(dir); err == nil {
		dir += "-" + start.Format("150405") // never overwrite an earlier run of the same day
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "gpufrac-bench: %v\n", err)
		return 1
	}
	dir, _ = filepath.Abs(dir)
	var wl bench.Workloads
	var self string
	switch *workloads {
	case "python":
		d, err := filepath.Abs(*wdir)
		if err == nil {
			_, err = os.Stat(filepath.Join(d, "common.py"))
		}
		if err != nil {
			fmt.Fprintf(stderr, "gpufrac-bench: --workloads-dir %q does not hold the workloads: %v\n", *wdir, err)
			return 2
		}
		wl = bench.PythonWorkloads{Python: *python, Dir: d, Cache: *cache, Profile: wprof, Env: jobEnv}
	case "sim":
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintf(stderr, "gpufrac-bench: %v\n", err)
			return 1
		}
		self = exe
		wl = bench.SimWorkloads{Program: []string{exe, "simjob"}, Scale: *simScale, Profile: wprof, Env: jobEnv}
	default:
		fmt.Fprintf(stderr, "gpufrac-bench: --workloads %q: want python or sim\n", *workloads)
		return 2
	}
	sd := *simDir
	if sd == "" {
		sd = filepath.Join(dir, "sim")
	}
	b, err := gpu.Open(*backend, gpu.OpenOptions{SimGPUs: []string{*simGPUs}, SimDir: sd, Logger: log})
	if err != nil {
		fmt.Fprintf(stderr, "gpufrac-bench: GPU backend: %v\n", err)
		return 1
	}
	defer b.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	devs, err := b.Devices(ctx)
	if err != nil || len(devs) == 0 {
		fmt.Fprintf(stderr, "gpufrac-bench: no GPU: %v\n", err)
		return 1
	}
	if *simContention >= 0 {
		if err := setContention(b, devs, gpu.SimContention{SwitchCost: *simContention, KernelSM: *simKernelSM}); err != nil {
			fmt.Fprintf(stderr, "gpufrac-bench: --sim-contention %g: %v\n", *simContention, err)
			return 2
		}
	}
	if pw, ok := wl.(bench.PythonWorkloads); ok {
		// The smallest GPU's size: the leaker must fit wherever it lands in its exclusive run.
		pw.GPUBytes = devs[0].MemoryBytes
		for _, d := range devs[1:] {
			pw.GPUBytes = min(pw.GPUBytes, d.MemoryBytes)
		}
		wl = pw
	}
	host, _ := os.Hostname()
	gpmEvery := *gpmInterval
	if gpmEvery == 0 {
		gpmEvery = -1 // the runner's "not read"
	}
	cfg := bench.Config{
		Seed: *seed, Arms: specs, Workloads: wl, OutDir: dir, ArmTimeout: *armTimeout, Workload: wprof, QueueLen: *queueLen, RefDir: refDir,
		Runner: bench.RunnerArms{Backend: b, ProbeWindow: *probeWindow, ProbeCap: pcap, Self: self, Borrow: *borrow, BorrowWait: *borrowWait,
			GPMInterval: gpmEvery, Logger: log, Progress: stderr, MPS: runner.MPSOptions{Root: *mpsRoot}},
		Command: "gpufrac-bench " + name + " " + strings.Join(args, " "),
		Machine: host, GPU: fmt.Sprintf("%d x %s (%s)", len(devs), devs[0].Model, devs[0].MemoryBytes),
		Driver: b.DriverVersion(), Backend: b.Kind(), Logger: log,
	}
	if *deadline > 0 {
		cfg.Deadline = start.Add(*deadline)
	}
	if *simContention >= 0 {
		cfg.BeforeArm = func(spec bench.ArmSpec) error {
			return setContention(b, devs, armContention(spec, *simContention, *simKernelSM))
		}
	}
	if calibrate {
		if cfg.Queue, err = bench.CalibrationQueueOf(*only); err != nil {
			fmt.Fprintf(stderr, "gpufrac-bench: --templates: %v\n", err)
			return 2
		}
	}
	if *profiles != "" {
		if cfg.Profiles, err = bench.LoadProfilesFor(*profiles, wprof); err != nil {
			fmt.Fprintf(stderr, "gpufrac-bench: --profiles: %v\n", err)
			return 2
		}
	}
	sum, runs, err := bench.Run(ctx, cfg)
	fmt.Fprint(stdout, bench.RenderRun(sum))
	if calibrate && len(runs) > 0 {
		cal := bench.RenderCalibration(sum, runs[0], filepath.Join(dir, specs[0].Label, "results"), jobEnv)
		fmt.Fprint(stdout, "\n"+cal)
		var perJob []bench.JobScore
		if len(sum.Scores) > 0 {
			perJob = sum.Scores[0].PerJob
		}
		if werr := writeCalibration(dir, cal, runs[0], perJob, wprof, cfg.Command); werr != nil {
			fmt.Fprintf(stderr, "gpufrac-bench: %v\n", werr)
			return 1
		}
	}
	fmt.Fprintf(stdout, "\nraw results: %s\n", dir)
	if err != nil {
		fmt.Fprintf(stderr, "gpufrac-bench: %v\n", err)
		return 1
	}
	for _, s := range sum.Scores {
		if s.Error != "" {
			return 1
		}
	}
	if len(sum.Skipped) > 0 {
		fmt.Fprintf(stderr, "gpufrac-bench: arms skipped: %s\n", strings.Join(sum.Skipped, ", "))
		return 3
	}
	return 0
}

// writeCalibration keeps the calibration table and the footprints the run measured beside the
// raw results: calibration.md and profiles-<profile>.json (for --profiles of warm arms).
func writeCalibration(dir, table string, run bench.ArmRun, perJob []bench.JobScore, p bench.WorkloadProfile, command string) error {
	if err := os.WriteFile(filepath.Join(dir, "calibration.md"), []byte(table), 0o644); err != nil {
		return fmt.Errorf("calibration.md: %w", err)
	}
	data, err := bench.CalibrationProfiles(run, perJob, p, "NVML peaks and GPM SM-active shares of each template alone: "+command)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "profiles-"+string(p)+".json"), data, 0o644)
}

func cmdReport(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	into := fs.String("into", "", "insert the tables at the end of the '## Packing benchmark' section of this markdown file")
	title := fs.String("title", "", "heading of the inserted block (default: the runs' dates)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "gpufrac-bench report: name at least one results directory (holding summary.json)")
		return 2
	}
	var sums []bench.Summary
	for _, d := range fs.Args() {
		s, err := bench.LoadResults(d)
		if err != nil {
			fmt.Fprintf(stderr, "gpufrac-bench report: %v\n", err)
			return 1
		}
		sums = append(sums, s)
	}
	var b strings.Builder
	t := *title
	if t == "" {
		t = "Run of " + sums[0].Started.UTC().Format("2006-01-02")
	}
	fmt.Fprintf(&b, "### %s\n\nRatio of completed jobs per GPU-hour to the mean of the same seed's complete exclusive runs (jobs completed in brackets; † marks a run that did not finish, left out of the mean).\n\n", t)
	b.WriteString(bench.RenderCombined(sums))
	for i, d := range fs.Args() {
		fmt.Fprintf(&b, "\n%s\n- raw: `%s`\n", bench.RenderRun(sums[i]), d)
	}
	if *into == "" {
		fmt.Fprint(stdout, b.String())
		return 0
	}
	doc, err := os.ReadFile(*into)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(stderr, "gpufrac-bench report: %v\n", err)
		return 1
	}
	if err := os.WriteFile(*into, []byte(bench.InsertIntoSection(string(doc), b.String())), 0o644); err != nil {
		fmt.Fprintf(stderr, "gpufrac-bench report: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "inserted into %s\n", *into)
	return 0
}

// cmdCompare checks every job result of one arm run against the same job's result in a
// reference run, with the benchmark's fixed tolerances: what `run` does within an invocation,
// for runs that came from different invocations (a seed's exclusive runs are usually two calls).
// Exit status: 0 all agree, 1 some differ or are missing, 2 usage.
func cmdCompare(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(stderr, "usage: gpufrac-bench compare REF_ARM_DIR ARM_DIR   (arm directories, e.g. docs/bench-results/<run>/exclusive)")
		return 2
	}
	dirs := [2]string{}
	for i, d := range args {
		if st, err := os.Stat(filepath.Join(d, "results")); err == nil && st.IsDir() {
			d = filepath.Join(d, "results")
		}
		dirs[i] = d
	}
	refs, err := filepath.Glob(filepath.Join(dirs[0], "*.json"))
	if err != nil || len(refs) == 0 {
		fmt.Fprintf(stderr, "gpufrac-bench compare: no job results (*.json) in %s\n", dirs[0])
		return 2
	}
	agree := 0
	for _, ref := range refs {
		name := filepath.Base(ref)
		if err := bench.CompareFiles(ref, filepath.Join(dirs[1], name)); err != nil {
			fmt.Fprintf(stdout, "%-24s differs: %v\n", strings.TrimSuffix(name, ".json"), err)
			continue
		}
		agree++
		fmt.Fprintf(stdout, "%-24s within tolerance\n", strings.TrimSuffix(name, ".json"))
	}
	fmt.Fprintf(stdout, "%d of %d jobs within tolerance\n", agree, len(refs))
	if agree != len(refs) {
		return 1
	}
	return 0
}

// armContention is the simulated contention of an arm: an mps arm's jobs share the SMs
// themselves, as MPS runs their kernels at once; the others' GPUs time-slice with kernelSM.
func armContention(spec bench.ArmSpec, cost, kernelSM float64) gpu.SimContention {
	if spec.Mode == string(policy.ModeMPS) {
		kernelSM = 0
	}
	return gpu.SimContention{SwitchCost: cost, KernelSM: kernelSM}
}

// setContention turns SM contention on for every simulated GPU: jobs whose demands sum past
// what a GPU can serve slow down (gpu.SimContention). A real GPU contends by itself.
func setContention(b gpu.Backend, devs []gpu.Device, c gpu.SimContention) error {
	sim, ok := b.(*gpu.Simulated)
	if !ok {
		return fmt.Errorf("the %s backend's GPUs contend for real: --sim-contention is for the simulated backend", b.Kind())
	}
	for _, d := range devs {
		if err := sim.SetContention(d.UUID, &c); err != nil {
			return err
		}
	}
	return nil
}
