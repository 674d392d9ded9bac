package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/bench/arms"
	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/report"
	"github.com/gpufrac/gpufrac/runner"
	"github.com/gpufrac/gpufrac/size"
)

func cmdRun(ctx context.Context, g *globals, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", "run [flags] QUEUE.hcl", g, stderr)
	var sf storeFlags
	sf.register(fs)
	arm := fs.String("arm", "", "admission rules: "+armList(" (default)"))
	mode := fs.String("mode", "", "enforcement mode of the packed and static arms: mps or isolated (default: the policy's)")
	profiles := fs.String("profiles", "", "footprints: warm (reuse stored ones, default) or cold (probe every template again)")
	out := fs.String("out", "", "results directory (default gpufrac-results/<time>-<arm>)")
	maxConc := fs.Int("max-concurrent", 0, "at most this many jobs at once on all GPUs together (0: the arm's rule)")
	window := fs.Duration("probe-window", 0, "probe templates for this long instead of their whole first run")
	probeCap := fs.String("probe-cap", "", "protective cap of in-place probes, e.g. 30GiB (default: half the GPU's budget; a template's probe_cap wins)")
	gpus := fs.String("gpus", "", "comma-separated GPU indexes or UUIDs to use (default: all healthy GPUs)")
	mpsControl := fs.String("mps-control", "", "path of nvidia-cuda-mps-control (mps mode; default: found on PATH)")
	asJSON := fs.Bool("json", false, "print the results as JSON on stdout (progress goes to stderr)")
	var ff fenceFlags
	ff.register(fs)
	borrow := fs.String("borrow", node.BorrowAuto, "past its cap a job may use memory no other job's guarantee covers: auto (wait where the fence holds caps in isolated mode), wait, now (fail at once when none is free), lend (wait, and also use a starting job's guarantee until its use passes a small keep) or off")
	borrowWait := fs.Duration("borrow-wait", 0, "how long a borrower's allocation may wait for memory to come free (default 5m)")
	stage := fs.Int("stage", runner.DefaultStage, "start up to this many jobs a GPU before their memory is free (staged): each holds 1GiB for its CUDA context while it starts up, and its first large allocation waits for its guarantee (0: none; isolated mode with the fence, not with --borrow lend)")
	probeGuarantee := fs.String("probe-guarantee", "small", "what a probe that borrows is guaranteed: small (its CUDA context's margin, borrowing the rest) or known (where a job already borrows on its GPU, the median of the caps known then, at most half the budget, where it fits)")
	g.defaultLevel = "error"
	if err := parseFlags(fs, g, args, stderr); err != nil {
		return err
	}
	if err := ff.check(); err != nil {
		return err
	}
	if err := node.CheckBorrow(*borrow); err != nil {
		return usagef("--%w", err)
	}
	if flagSet(fs, "borrow-wait") && (*borrowWait <= 0 || *borrowWait > queue.MaxBorrowWait) {
		// The runner reads 0 as "not given": --borrow-wait 0 ran with the queue's borrow_wait,
		// else 5 minutes, the opposite of what it says.
		return usagef("--borrow-wait %s: want more than 0s and at most %s, as the queue file's borrow_wait (for no wait at all: --borrow now)",
			*borrowWait, queue.MaxBorrowWait)
	}
	if *stage < 0 || *stage > 16 {
		return usagef("--stage %d: want 0 (none) to 16 jobs a GPU", *stage)
	}
	if *probeGuarantee != "small" && *probeGuarantee != "known" {
		return usagef("--probe-guarantee %q: want small or known", *probeGuarantee)
	}
	if fs.NArg() != 1 {
		return usagef("want exactly one queue file, got %d arguments %q", fs.NArg(), fs.Args())
	}
	if err := checkRunFlags(*arm, *mode, *profiles, *maxConc, *window); err != nil {
		return err
	}
	var pcap size.Bytes
	if *probeCap != "" {
		c, err := size.Parse(*probeCap)
		if err != nil {
			// The parser says why (negative, a fraction of a byte, an unknown unit), as for --peak.
			return usagef("--probe-cap: %w", err)
		}
		if c == 0 {
			return usagef("--probe-cap %q: want a size such as 30GiB", *probeCap)
		}
		pcap = c
	}
	q, err := queue.Load(fs.Arg(0))
	if err != nil {
		return err
	}
	if err := q.CheckSimulated(gpu.ParseSimSpec); err != nil {
		return err
	}
	if err := q.CheckDirs(); err != nil {
		return err
	}
	if err := q.CheckCommands(); err != nil {
		return err
	}
	// Before the run's own lines: like an error, a warning is about the file, not the run.
	for _, w := range q.Warnings {
		fmt.Fprintf(stderr, "gpufrac run: warning: %s\n", w)
	}
	b, err := g.openBackend(q.SimulatedGPUs)
	if err != nil {
		return err
	}
	defer b.Close()
	progress := stdout
	if *asJSON {
		progress = stderr
	}
	o := runner.Options{
		Arm: record.Arm(*arm), Mode: policy.Mode(*mode), Profiles: record.Profiles(*profiles), Backend: b,
		StateDir: expandHome(g.stateDir), OutDir: *out, Logger: g.logger, Progress: progress,
		MaxConcurrent: *maxConc, ProbeWindow: *window, MPS: runner.MPSOptions{ControlBinary: *mpsControl},
		Fence: enforcer.FenceMode(*ff.mode), FenceLibrary: *ff.library, Borrow: *borrow, BorrowWait: *borrowWait, Stage: *stage,
		StageByDefault: !flagSet(fs, "stage"), ProbeKnown: *probeGuarantee == "known",
	}
	o.ProbeCap = pcap
	if sf.explicit() {
		p, _, err := sf.loadPolicy(ctx, g)
		if err != nil {
			return err
		}
		o.Policy = p
	} else if _, _, err := sf.loadPolicy(ctx, g); err != nil {
		// The state directory's policy file is not this run's policy (the queue's block is,
		// docs/run.md), but a damaged policy in it is refused here as by probe and units,
		// which use it, not passed over.
		return err
	}
	if err := templatesFromStore(ctx, g, &sf, &q); err != nil {
		return err
	}
	if *gpus != "" {
		if o.GPUs, err = resolveGPUs(ctx, b, *gpus); err != nil {
			return err
		}
	}
	a := o.Arm
	if a == "" {
		a = q.Arm
	}
	if a == "" {
		a = record.ArmPacked
	}
	// A baseline's rules are the benchmark's (bench/arms); the runner's own is packed.
	if o, err = arms.Options(o, a); err != nil {
		return err
	}
	if o.OutDir == "" {
		o.OutDir = filepath.Join("gpufrac-results", time.Now().Format("20060102-150405")+"-"+string(a))
	}
	if err := q.CheckOutDir(o.OutDir); err != nil {
		return err
	}
	res, err := runner.Run(ctx, q, o)
	if res != nil && *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(res); jerr != nil {
			return jerr
		}
	}
	if err != nil {
		return err
	}
	if res.Completed < len(res.Jobs) {
		return fmt.Errorf("%d of %d jobs did not complete (see %s)", len(res.Jobs)-res.Completed, len(res.Jobs),
			filepath.Join(res.OutDir, report.File))
	}
	return nil
}

// checkRunFlags refuses bad values of run's flags as usage errors (exit 2), before anything runs.
func checkRunFlags(arm, mode, profiles string, maxConc int, window time.Duration) error {
	switch {
	case arm != "" && record.Arm(arm).Check() != nil:
		return usagef("--arm %q: want one of %s", arm, armList(""))
	case mode != "" && mode != string(policy.ModeMPS) && mode != string(policy.ModeIsolated):
		return usagef("--mode %q: want mps or isolated", mode)
	case profiles != "" && record.Profiles(profiles).Check() != nil:
		return usagef("--profiles %q: want %s or %s", profiles, record.ProfilesWarm, record.ProfilesCold)
	case maxConc < 0:
		return usagef("--max-concurrent %d: want 0 (the arm's rule) or more", maxConc)
	case window < 0:
		return usagef("--probe-window %s: must not be negative", window)
	}
	return nil
}

// armList names every arm, packed first as the default, from record.Arms, so that a new arm
// cannot be missing from the help.
func armList(packedNote string) string {
	names := []string{string(record.ArmPacked) + packedNote}
	for _, a := range record.Arms {
		if a != record.ArmPacked {
			names = append(names, string(a))
		}
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// templatesFromStore fills the queue's templates with footprints declared in the policy store
// (gpufrac_template in Terraform, or an earlier `gpufrac probe`), when the queue does not.
func templatesFromStore(ctx context.Context, g *globals, sf *storeFlags, q *queue.Queue) error {
	st, where, err := sf.open(g)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, j := range q.Jobs {
		if seen[j.Template] {
			continue
		}
		seen[j.Template] = true
		t, _, err := st.GetTemplate(ctx, j.Template)
		if err != nil {
			// No store file, or no such template, is normal; a damaged file is refused here as
			// by probe and units, not passed over for the defaults.
			if errors.Is(err, policy.ErrNotFound) || (!sf.explicit() && errors.Is(err, os.ErrNotExist)) {
				continue
			}
			return fmt.Errorf("template %q from the %s: %w", j.Template, where, err)
		}
		spec := q.Templates[j.Template]
		spec.Name = j.Template
		if spec.PeakBytes == 0 {
			spec.PeakBytes = t.PeakBytes
		}
		if spec.CapBytes == 0 {
			spec.CapBytes = t.CapOverrideBytes
		}
		if q.Templates == nil {
			q.Templates = map[string]queue.TemplateSpec{}
		}
		q.Templates[j.Template] = spec
	}
	return nil
}

// gpusThere lists the GPUs there are ("0 = GPU-..., 1 = GPU-..."), for an error about a GPU
// selection that names none of them, so the next try can be right.
func gpusThere[T any](gpus []T, id func(T) (int, string)) string {
	here := make([]string, len(gpus))
	for i, g := range gpus {
		index, uuid := id(g)
		here[i] = fmt.Sprintf("%d = %s", index, uuid)
	}
	return strings.Join(here, ", ")
}

// resolveGPUs turns "0,1" or UUIDs into UUIDs, naming a bad entry.
func resolveGPUs(ctx context.Context, b gpu.Backend, spec string) ([]string, error) {
	devs, err := b.Devices(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range strings.Split(spec, ",") {
		s = strings.TrimSpace(s)
		found := ""
		for _, d := range devs {
			if d.UUID == s || strconv.Itoa(d.Index) == s {
				found = d.UUID
			}
		}
		if found == "" {
			return nil, usagef("--gpus: %q is neither the index nor the UUID of one of the %d GPUs (%s)", s, len(devs),
				gpusThere(devs, func(d gpu.Device) (int, string) { return d.Index, d.UUID }))
		}
		if slices.Contains(out, found) {
			// A GPU named twice is one GPU: whoever wrote it meant another.
			return nil, usagef("--gpus %q names GPU %s twice (%q names it again)", spec, found, s)
		}
		out = append(out, found)
	}
	return out, nil
}
