package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/probe"
	"github.com/gpufrac/gpufrac/size"
	"github.com/gpufrac/gpufrac/taskenv"
)

// probeOutput is what `gpufrac probe --json` prints.
type probeOutput struct {
	Template   string     `json:"template"`
	Backend    string     `json:"backend"`
	GPU        string     `json:"gpu"`
	GPUIndex   int        `json:"gpu_index"`
	PeakBytes  size.Bytes `json:"peak_bytes"`
	Peak       string     `json:"peak"`
	CapBytes   size.Bytes `json:"cap_bytes"`
	Cap        string     `json:"cap"`
	Units      int        `json:"units"`
	UnitBytes  size.Bytes `json:"unit_bytes"`
	Policy     string     `json:"policy"`
	Samples    int        `json:"samples"`
	DurationS  float64    `json:"duration_s"`
	WindowS    float64    `json:"window_s"` // 0: the probe watched the whole run
	Stopped    bool       `json:"stopped_at_window"`
	ExitCode   int        `json:"exit_code"`
	StoredIn   []string   `json:"stored_in"`
	MeasuredAt time.Time  `json:"measured_at"`

	// SMActivePercent is the share of the probe the SMs were active (GPM); null: unknown.
	SMActivePercent *float64 `json:"sm_active_percent"`
}

func cmdProbe(ctx context.Context, g *globals, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("probe", "probe --template NAME [--window DUR] [--json] -- CMD ARGS...", g, stderr)
	var sf storeFlags
	sf.register(fs)
	tmpl := fs.String("template", "", "template the job belongs to (required)")
	window := fs.Duration("window", 0, "stop the job this long after it first holds GPU memory (SIGINT, then SIGKILL) instead of waiting for it to end")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	gpuSel := fs.String("gpu", "", "GPU index or UUID to probe on (default: the idle GPU with the most budget)")
	noStore := fs.Bool("no-store", false, "measure and print only: record the footprint nowhere")
	interval := fs.Duration("interval", probe.DefaultInterval, "sampling period")
	var ff fenceFlags
	ff.register(fs)
	if err := parseFlags(fs, g, args, stderr); err != nil {
		return err
	}
	if err := ff.check(); err != nil {
		return err
	}
	cmdArgs := fs.Args()
	if *tmpl == "" {
		return usagef("--template is required: the footprint is stored under the template's name")
	}
	if err := (policy.Template{Name: *tmpl, PeakBytes: 1}).Validate(); err != nil {
		return usagef("--template %q: %w", *tmpl, err)
	}
	if len(cmdArgs) == 0 {
		return usagef("no command to probe: put it after --, e.g. gpufrac probe --template %s -- python3 train.py", *tmpl)
	}
	if *window < 0 {
		return usagef("--window %s must not be negative", *window)
	}
	if *interval < time.Millisecond {
		return usagef("--interval %s: want at least 1ms", *interval)
	}
	pol, _, err := sf.loadPolicy(ctx, g)
	if err != nil {
		return err
	}
	b, err := g.openBackend(nil)
	if err != nil {
		return err
	}
	defer b.Close()
	if banner := simulatedBanner(b); banner != "" {
		if *asJSON {
			fmt.Fprintln(stderr, banner)
		} else {
			fmt.Fprintln(stdout, banner)
		}
	}
	stateDir := expandHome(g.stateDir)
	_, simulated := b.(*gpu.Simulated)
	// The fence holds the job to the GPU's budget, so a probe that runs away cannot take the
	// headroom or what other users hold; it borrows nothing, holding the whole budget.
	fc, note, err := ff.resolve(stateDir, simulated)
	if err != nil {
		return err
	}
	fmt.Fprintln(stderr, note)
	// The probe holds its reservation as this process, so one it cannot end (a full disk, a
	// crash) is released by the next command that finds this process gone.
	n, err := node.Open(ctx, node.Options{Logger: g.logger, Backend: b, StateDir: stateDir, Hold: true, Policy: pol,
		Enforce: true, Enforcer: node.EnforcerConfig{Fence: fc, Borrow: node.Borrowing{Rule: node.BorrowOff}}})
	if err != nil {
		return err
	}
	defer n.Close(context.Background())
	for _, r := range n.Released {
		fmt.Fprintf(stderr, "gpufrac probe: released the reservation of %s on %s: its holder (%s) is gone%s\n", r.Task.JobName, r.GPU, r.Holder,
			node.LeftBehindNote(n.LeftBehind[r.Token]))
	}
	led := n.Ledger()
	st, err := pickProbeGPU(led, *gpuSel)
	if err != nil {
		return err
	}
	// The probe runs alone: it holds the GPU's whole budget so nothing else is admitted.
	whole := size.Bytes(st.Units) * st.UnitBytes
	a, err := n.Admit(ctx, node.Request{GPU: st.UUID, Cap: whole, Alone: true,
		Task: ledger.Task{JobName: *tmpl, TaskName: "probe", Template: *tmpl}})
	if err != nil {
		return fmt.Errorf("GPU%d cannot be probed on now (a probe needs the GPU alone): %w", st.Index, err)
	}
	res := a.Reservation
	defer func() {
		if err := n.Release(res.Token, "probe over"); err != nil {
			fmt.Fprintf(stderr, "gpufrac probe: the probe's reservation on GPU%d stays in the ledger until a later command finds this probe gone: %v\n", st.Index, err)
		}
	}()
	env := a.Env
	env[taskenv.Template] = *tmpl
	env[taskenv.Job] = *tmpl + "-probe"
	if sim, ok := b.(*gpu.Simulated); ok {
		env[gpu.EnvSimDir] = sim.Dir()
	}
	command := append([]string(nil), cmdArgs...)
	if command[0] == "gpufrac" {
		if exe, err := os.Executable(); err == nil {
			command[0] = exe
		}
	}
	line := newLiveLine(stderr, *asJSON)
	what := "its whole run"
	if *window > 0 {
		what = "a " + window.String() + " window"
	}
	line.printf("probing %q on GPU%d (%s %s) for %s, sampling every %s", *tmpl, st.Index, st.Model, st.TotalBytes, what, *interval)
	var lastPlain time.Time
	result, perr := probe.Run(ctx, probe.Config{
		Backend: b, GPU: st.UUID, Command: command, Env: probe.Environ(env), Token: res.Token,
		Window: *window, Interval: *interval, GPMInterval: probe.DefaultGPMInterval, Stdout: line, Stderr: line, Logger: g.logger,
		OnSample: func(s probe.Sample) {
			if line.tty {
				line.update("%s %5.1fs  now %-9s peak %s", *tmpl, s.At.Seconds(), s.Bytes, s.Peak)
			} else if time.Since(lastPlain) >= time.Second {
				lastPlain = time.Now()
				line.printf("%5.1fs  now %s  peak %s", s.At.Seconds(), s.Bytes, s.Peak)
			}
		},
	})
	line.done()
	// What the job started out of its process group (setsid, a daemon) outlives it; once the
	// probe's reservation is released it would hold GPU memory unknown to the ledger. It carries
	// the reservation's token, which names it for certain.
	if left := node.StopLeftBehind([]ledger.Reservation{{Token: res.Token}})[res.Token]; len(left) > 0 {
		fmt.Fprintf(stderr, "gpufrac probe: %s\n", strings.TrimPrefix(node.LeftBehindNote(left), "; "))
	}
	// A job that failed is told as a failure first, even before it took GPU memory: there the
	// probe's own error ("no GPU memory was attributed") would hide a job that never ran.
	failed := result.ExitCode != 0 && !result.Stopped
	if perr != nil && !(failed && errors.Is(perr, probe.ErrNoMemory)) {
		return perr
	}
	if failed {
		return fmt.Errorf("the job exited with code %d after %.1fs (peak so far %s): a failed run is no footprint; nothing was stored",
			result.ExitCode, result.Duration.Seconds(), result.Peak)
	}
	fp := probe.Earned(pol, result.Peak)
	outp := probeOutput{
		Template: *tmpl, Backend: b.Kind(), GPU: st.UUID, GPUIndex: st.Index, PeakBytes: fp.Peak, Peak: fp.Peak.String(),
		CapBytes: fp.Cap, Cap: fp.Cap.String(), Units: fp.Units, UnitBytes: pol.UnitBytes, Policy: pol.Name,
		Samples: result.Samples, DurationS: result.Duration.Seconds(), WindowS: window.Seconds(), Stopped: result.Stopped,
		ExitCode: result.ExitCode, MeasuredAt: time.Now().UTC(), StoredIn: []string{}, SMActivePercent: result.SMActivePercent,
	}
	if !*noStore {
		prof := ledger.Profile{Template: *tmpl, PeakBytes: result.Peak, Samples: result.Samples, Duration: result.Duration,
			MeasuredAt: outp.MeasuredAt, Source: ledger.ProfileProbe, SMActivePercent: result.SMActivePercent}
		if err := led.RecordProfile(prof); err != nil {
			return fmt.Errorf("recording the profile in the ledger: %w", err)
		}
		outp.StoredIn = append(outp.StoredIn, "ledger "+stateDir)
		store, where, err := sf.open(g)
		if err != nil {
			return err
		}
		if err := probe.StoreTemplate(ctx, store, *tmpl, pol.Name, result.Peak, result.SMActivePercent); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		outp.StoredIn = append(outp.StoredIn, where)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(outp)
	}
	how := "whole run"
	if result.Stopped {
		how = "stopped at the " + window.String() + " window"
	}
	fmt.Fprintf(stdout, "template %s: peak %s over %.1fs (%d samples, %s, exit %d)\n", *tmpl, result.Peak,
		result.Duration.Seconds(), result.Samples, how, result.ExitCode)
	fmt.Fprintf(stdout, "cap under policy %q: %s = %s -> %d units of %s\n", pol.Name, fp.Cap, pol.CapFormula(fp.Peak.String()),
		fp.Units, pol.UnitBytes)
	if sm := result.SMActivePercent; sm != nil {
		fmt.Fprintf(stdout, "SM active %.1f%% of the run (GPM): its demand for a policy's sm_budget_percent\n", *sm)
	} else {
		fmt.Fprintln(stdout, "SM active: unknown (the GPU has no performance monitor)")
	}
	if len(outp.StoredIn) > 0 {
		fmt.Fprintf(stdout, "footprint stored in: %s\n", strings.Join(outp.StoredIn, ", "))
	} else {
		fmt.Fprintln(stdout, "footprint not stored (--no-store)")
	}
	return nil
}

// pickProbeGPU returns the GPU named by sel, or the healthy GPU with no reservations and the
// largest budget.
func pickProbeGPU(led *ledger.Ledger, sel string) (ledger.GPUState, error) {
	states := led.States()
	if sel != "" {
		for _, s := range states {
			if s.UUID == sel || fmt.Sprint(s.Index) == sel {
				if !s.Healthy {
					return s, fmt.Errorf("--gpu %q is unhealthy: %s", sel, s.HealthReason)
				}
				return s, nil
			}
		}
		return ledger.GPUState{}, usagef("--gpu %q is neither the index nor the UUID of one of the %d GPUs (%s)", sel, len(states),
			gpusThere(states, func(s ledger.GPUState) (int, string) { return s.Index, s.UUID }))
	}
	var ok []ledger.GPUState
	for _, s := range states {
		if s.Healthy && len(s.Reservations) == 0 {
			ok = append(ok, s)
		}
	}
	if len(ok) == 0 {
		return ledger.GPUState{}, fmt.Errorf("no idle healthy GPU among %d: a probe needs a GPU alone (see gpufrac status)", len(states))
	}
	sort.SliceStable(ok, func(i, j int) bool { return ok[i].BudgetBytes > ok[j].BudgetBytes })
	return ok[0], nil
}
