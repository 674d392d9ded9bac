package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpufrac/gpufrac/attribution"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/probe"
	"github.com/gpufrac/gpufrac/procfs"
	"github.com/gpufrac/gpufrac/progress"
	"github.com/gpufrac/gpufrac/runstatus"
	"github.com/gpufrac/gpufrac/size"
)

// statusOutput is what `gpufrac status --json` prints.
type statusOutput struct {
	StateDir   string            `json:"state_dir"`
	Backend    string            `json:"backend,omitempty"`
	WrittenAt  time.Time         `json:"written_at"`
	Generation uint64            `json:"generation"`
	Policy     any               `json:"policy"`
	GPUs       []statusGPU       `json:"gpus"`
	Violations []statusViolation `json:"violations"`
	Profiles   []statusProfile   `json:"profiles"`
	// Run is the progress of a gpufrac run on this state directory, while one runs.
	Run *runstatus.Status `json:"run,omitempty"`
	// RunGone says that the run of Run has ended without removing its progress (it was killed
	// outright): its figures are its last, and nothing of it runs.
	RunGone bool `json:"run_gone,omitempty"`
}

type statusGPU struct {
	ledger.GPUState
	Reservations []statusReservation `json:"reservations"`
}

type statusReservation struct {
	Token    string      `json:"token_prefix"`
	Task     ledger.Task `json:"task"`
	CapBytes size.Bytes  `json:"cap_bytes"` // its guarantee
	// LimitBytes is the most it may hold when it may borrow past its guarantee; 0 when not.
	LimitBytes size.Bytes `json:"limit_bytes"`
	// StagedForBytes is the guarantee a staged job (gpufrac run --stage) waits for; 0 when not.
	StagedForBytes size.Bytes `json:"staged_for_bytes,omitempty"`
	Units          int        `json:"units"`
	Source         string     `json:"source"`
	CreatedAt      time.Time  `json:"created_at"`
	// SeenAt is when a live process last carried it, as stored (it lags by up to a quarter of
	// the grace period); zero when none has yet.
	SeenAt time.Time `json:"seen_at"`
	// UsageBytes is the memory its processes hold now; nil when it could not be measured.
	UsageBytes *size.Bytes `json:"usage_bytes"`
}

type statusViolation struct {
	ledger.Violation
	Token string `json:"token"`
	// ContainmentS is the time from crossing the cap to no process holding memory.
	ContainmentS float64 `json:"containment_s"`
}

type statusProfile struct {
	ledger.Profile
	CapBytes size.Bytes `json:"cap_bytes"`
	Units    int        `json:"units"`
}

func cmdStatus(ctx context.Context, g *globals, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", "status [--json] [--no-usage] [--watch [--interval DUR]]", g, stderr)
	asJSON := fs.Bool("json", false, "print the ledger as JSON")
	noUsage := fs.Bool("no-usage", false, "do not open the GPU backend to measure each reservation's usage")
	watch := fs.Bool("watch", false, "redraw the status every --interval until interrupted, like watch(1)")
	interval := fs.Duration("interval", 2*time.Second, "how often --watch redraws")
	if err := parseFlags(fs, g, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if !*watch {
		if flagSet(fs, "interval") {
			return usagef("--interval %s: it is how often --watch redraws; add --watch, or leave --interval out for one status", *interval)
		}
		return showStatus(ctx, g, *asJSON, *noUsage, stdout, stderr)
	}
	if *asJSON {
		return usagef("--watch redraws the table for people; for JSON, call gpufrac status --json in a loop")
	}
	if *interval < 100*time.Millisecond {
		return usagef("--interval %s: must be at least 100ms", *interval)
	}
	return watchStatus(ctx, *interval, stdout, func(w io.Writer) error { return showStatus(ctx, g, false, *noUsage, w, stderr) })
}

// showStatus prints the status once.
func showStatus(ctx context.Context, g *globals, asJSON, noUsage bool, stdout, stderr io.Writer) error {
	dir := expandHome(g.stateDir)
	snap, err := ledger.ReadSnapshot(dir)
	if errors.Is(err, os.ErrNotExist) {
		// A fresh state directory: an empty ledger is an answer, but a damaged run.json beside it
		// is said as it is where the ledger has entries.
		if _, _, err := runstatus.Read(dir); err != nil {
			fmt.Fprintf(stderr, "gpufrac status: %v\n", err)
		}
		return emptyStatus(stdout, dir, asJSON)
	}
	if err != nil {
		return err
	}
	if snap.Damage != "" {
		fmt.Fprintf(stderr, "gpufrac status: warning: %s\n", snap.Damage)
	}
	out := statusOutput{StateDir: dir, WrittenAt: snap.WrittenAt, Generation: snap.Generation, Policy: snap.Policy,
		GPUs: []statusGPU{}, Violations: []statusViolation{}, Profiles: []statusProfile{}}
	if rs, ok, err := runstatus.Read(dir); err != nil {
		fmt.Fprintf(stderr, "gpufrac status: %v\n", err)
	} else if ok {
		out.Run, out.RunGone = &rs, runGone(rs)
	}
	var b gpu.Backend
	if !noUsage {
		b = g.attachBackend()
	}
	banner := ""
	if b != nil {
		defer b.Close()
		out.Backend = b.Kind()
		banner = simulatedBanner(b)
	}
	usages := measureUsage(ctx, b, procfs.Linux(""), snap.GPUs, stderr)
	for _, gs := range snap.GPUs {
		sg := statusGPU{GPUState: gs, Reservations: []statusReservation{}}
		usage := usages[gs.UUID]
		for _, r := range gs.Reservations {
			sr := statusReservation{Token: tokenPrefix(r.Token), Task: r.Task, CapBytes: r.CapBytes, Units: len(r.InstanceIDs),
				LimitBytes: r.LimitBytes, StagedForBytes: r.StagedFor,
				Source: r.Source, CreatedAt: r.CreatedAt, SeenAt: r.SeenAt}
			if usage != nil {
				u := usage[r.Token]
				sr.UsageBytes = &u
			}
			sg.Reservations = append(sg.Reservations, sr)
		}
		sg.GPUState.Reservations = nil
		sg.GPUState.Instances = nil
		out.GPUs = append(out.GPUs, sg)
	}
	for _, v := range snap.Violations {
		sv := statusViolation{Violation: v, Token: tokenPrefix(v.Token)}
		sv.Violation.Token = ""
		if !v.ContainedAt.IsZero() && !v.CrossedAt.IsZero() {
			sv.ContainmentS = v.ContainedAt.Sub(v.CrossedAt).Seconds()
		}
		out.Violations = append(out.Violations, sv)
	}
	for _, p := range snap.Profiles {
		fp := probe.Earned(snap.Policy, p.PeakBytes)
		out.Profiles = append(out.Profiles, statusProfile{Profile: p, CapBytes: fp.Cap, Units: fp.Units})
	}
	if asJSON {
		if banner != "" {
			fmt.Fprintln(stderr, banner)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if banner != "" {
		fmt.Fprintln(stdout, banner)
	}
	writeStatus(stdout, out, snap)
	return nil
}

// emptyStatus answers for a state directory where nothing has been recorded yet.
func emptyStatus(w io.Writer, dir string, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(statusOutput{StateDir: dir, GPUs: []statusGPU{}, Violations: []statusViolation{}, Profiles: []statusProfile{}})
	}
	_, err := fmt.Fprintf(w, "ledger %s: empty (nothing recorded yet: no GPUs, reservations, violations or footprints)\n", dir)
	return err
}

func writeStatus(w io.Writer, out statusOutput, snap ledger.Snapshot) {
	p := snap.Policy
	fmt.Fprintf(w, "ledger %s (written %s ago), policy %q: headroom %s, cap = %s, unit %s, at most %d tasks per GPU\n",
		out.StateDir, ago(out.WrittenAt), p.Name, p.HeadroomBytes, p.CapFormula("peak"), p.UnitBytes, p.MaxTasksPerGPU)
	if p.Name == queuePolicyName {
		fmt.Fprintln(w, `  (policy "queue" is the policy block of the queue file that the last gpufrac run on this state directory read)`)
	}
	fmt.Fprintln(w, lockHolder(out.StateDir))
	if out.Run != nil {
		writeRun(w, *out.Run, out.RunGone)
	}
	for _, g := range out.GPUs {
		health := "healthy"
		if !g.Healthy {
			health = "UNHEALTHY: " + g.HealthReason
		}
		fmt.Fprintf(w, "\nGPU%d %s %s  mode %s  %s\n", g.Index, g.Model, g.UUID, g.Mode, health)
		var borrowed size.Bytes
		for _, r := range g.Reservations {
			if r.UsageBytes != nil && r.LimitBytes > r.CapBytes {
				borrowed += sub(min(*r.UsageBytes, r.LimitBytes), r.CapBytes)
			}
		}
		// What borrowers hold counts as taken for admission, as the guarantees do.
		fmt.Fprintf(w, "  total %s - headroom %s - unmanaged %s = budget %s (%d units of %s); guarantees %s by %d task(s), borrowed %s, free %s\n",
			g.TotalBytes, g.HeadroomBytes, g.UnmanagedBytes, g.BudgetBytes, g.Units, g.UnitBytes, g.ReservedBytes,
			len(g.Reservations), borrowed, sub(g.BudgetBytes, g.ReservedBytes+borrowed))
		if len(g.Reservations) == 0 {
			continue
		}
		var buf bytes.Buffer
		tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  TOKEN\tTASK\tTEMPLATE\tGUARANTEE\tLIMIT\tUNITS\tUSAGE\tSOURCE\tAGE\tSEEN\tEXPIRES")
		for _, r := range g.Reservations {
			seen, expires := expiry(r.CreatedAt, r.SeenAt, time.Now(), snap.Grace)
			guarantee, limit := r.CapBytes.String(), max(r.CapBytes, r.LimitBytes)
			if r.StagedForBytes > 0 {
				// It borrows nothing until its guarantee is granted.
				guarantee, limit = fmt.Sprintf("%s (staged for %s)", r.CapBytes, r.StagedForBytes), r.CapBytes
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Token, taskLabel(r.Task), dash(r.Task.Template), guarantee,
				limit, r.Units, reservationUsage(r), r.Source, ago(r.CreatedAt), seen, expires)
		}
		tw.Flush()
		w.Write(buf.Bytes())
	}
	fmt.Fprintf(w, "\nviolations (%d kept):\n", len(out.Violations))
	if len(out.Violations) == 0 {
		fmt.Fprintln(w, "  none")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  WHEN\tGPU\tTASK\tMODE\tCAP\tPEAK SEEN\tACTION\tCONTAINED IN")
		from := max(0, len(out.Violations)-10)
		for _, v := range out.Violations[from:] {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.CrossedAt.Local().Format("01-02 15:04:05"), shortGPU(v.GPU),
				taskLabel(v.Task), v.Mode, v.CapBytes, v.PeakBytes, v.Action, seconds(v.ContainmentS))
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "\nfootprints (%d templates):\n", len(out.Profiles))
	if len(out.Profiles) == 0 {
		fmt.Fprintln(w, "  none yet: gpufrac probe --template NAME -- CMD, or gpufrac run")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  TEMPLATE\tPEAK\tCAP\tUNITS\tSOURCE\tMEASURED")
	for _, pr := range out.Profiles {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%s ago\n", pr.Template, pr.PeakBytes, pr.CapBytes, pr.Units, pr.Source, ago(pr.MeasuredAt))
	}
	tw.Flush()
}

// reservationUsage is a reservation's usage for the table: what it holds past its guarantee is
// said as borrowed while it stays within its limit, so a borrower does not read as a broken cap.
func reservationUsage(r statusReservation) string {
	if r.UsageBytes == nil {
		return "-"
	}
	u := *r.UsageBytes
	switch {
	case u <= r.CapBytes:
		return u.String()
	case u <= r.LimitBytes:
		return fmt.Sprintf("%s (%s borrowed)", u, u-r.CapBytes)
	case r.LimitBytes > r.CapBytes:
		return fmt.Sprintf("%s (past its %s limit)", u, r.LimitBytes)
	default:
		return fmt.Sprintf("%s (past its cap)", u)
	}
}

// attachBackend opens the backend for reading usage without setting anything up: NVML when it
// works (auto or nvml), else the simulated GPUs already recorded in the simulated state dir.
func (g *globals) attachBackend() gpu.Backend {
	if g.backend != gpu.KindSimulated {
		if b, err := gpu.NewNVML(g.logger); err == nil {
			return b
		}
		if g.backend == gpu.KindNVML {
			return nil
		}
	}
	b, err := gpu.NewSimulated(gpu.SimConfig{Dir: g.simDir, Logger: g.logger})
	if err != nil {
		return nil
	}
	return b
}

// processLister is the part of a gpu.Backend that status measures usage with.
type processLister interface {
	Processes(ctx context.Context, uuid string) ([]gpu.Process, error)
}

// measureUsage is each GPU's usage by reservation token, its processes tied to their tasks as
// the enforcer's watchdog ties them: a token scan of every process first, then a pass per GPU.
// Without the scan a process that only its cgroup ties to its task (a worker whose environment
// was scrubbed, whose token carrier holds no GPU memory) would count for no reservation here
// while the watchdog charges it to one. A GPU the backend cannot list has no entry, and with no
// backend there is none at all. It reads the process table and writes nothing: status must not
// do what the ledger's writer does with a scan (mark reservations seen, expire the others).
func measureUsage(ctx context.Context, b processLister, src procfs.Source, gpus []ledger.GPUState, stderr io.Writer) map[string]map[string]size.Bytes {
	if b == nil {
		return nil
	}
	attr := attribution.New(src)
	if _, err := attr.Scan(); err != nil {
		fmt.Fprintf(stderr, "gpufrac status: warning: cannot scan the processes for reservation tokens, so a process tied to its task by its cgroup alone counts for none: %v\n", err)
	}
	out := map[string]map[string]size.Bytes{}
	for _, gs := range gpus {
		procs, err := b.Processes(ctx, gs.UUID)
		if err != nil {
			continue
		}
		attr.NewPass()
		out[gs.UUID] = usageOf(attr, gs, procs)
	}
	return out
}

func usageOf(attr *attribution.Attributor, gs ledger.GPUState, procs []gpu.Process) map[string]size.Bytes {
	out := map[string]size.Bytes{}
	for tok, ps := range attr.Split(gs.UUID, procs, attribution.Reserved(gs.Reservations)).ByTask() {
		for _, p := range ps {
			out[tok] += p.Bytes
		}
	}
	return out
}

// tokenPrefix is the start of a reservation token that status prints: ledger.RedactToken's cut
// without its ellipsis, because the JSON field is token_prefix, characters a token starts with.
func tokenPrefix(tok string) string {
	if len(tok) > 8 {
		return tok[:8]
	}
	return tok
}

func shortGPU(u string) string {
	if len(u) > 12 {
		return u[:12]
	}
	return u
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func sub(a, b size.Bytes) size.Bytes {
	if b > a {
		return 0
	}
	return a - b
}

func seconds(s float64) string {
	if s <= 0 {
		return "-"
	}
	return strconv.FormatFloat(s, 'f', 2, 64) + "s"
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	d := time.Since(t).Round(time.Second)
	if d < 0 {
		d = 0
	}
	return d.String()
}

// queuePolicyName is the name gpufrac run gives the policy block of a queue file.
const queuePolicyName = "queue"

// taskLabel is a task's name for the tables: "job/task", or just the job when the two are
// the same (a gpufrac run job), with the allocation when there is one.
func taskLabel(t ledger.Task) string {
	s := t.String()
	if t.JobName != "" && t.TaskName == t.JobName {
		s = strings.Replace(s, t.JobName+"/"+t.TaskName, t.JobName, 1)
	}
	return s
}

// expiry says when a reservation was last seen carried by a live process and when it ends if
// none carries it again: the ledger's writer ends a reservation unseen for its grace (counted
// from its creation when it was never seen); for a ledger file that does not say its grace
// (written before it did), ledger.DefaultGrace, the writers' default.
func expiry(created, seen, now time.Time, grace time.Duration) (string, string) {
	if grace <= 0 {
		grace = ledger.DefaultGrace
	}
	last, seenS := seen, "never"
	if seen.IsZero() {
		last = created
	} else {
		seenS = ago(seen) + " ago"
	}
	left := last.Add(grace).Sub(now).Round(time.Second)
	if left <= 0 {
		return seenS, "overdue: at the writer's next sweep"
	}
	return seenS, "in " + left.String() + " unless seen"
}

// lockHolder says which process holds the ledger's writer lock, from the PID its holder writes
// into the lock file (a hint: the lock itself is an flock, dropped when the holder dies).
func lockHolder(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, ledger.LockFile))
	pid := strings.TrimSpace(string(data))
	if err != nil || pid == "" {
		return "  writer: none has locked this ledger"
	}
	n, err := strconv.Atoi(pid)
	if err != nil {
		return "  writer: the lock file names no pid (" + strconv.Quote(pid) + ")"
	}
	// A zombie has no command line and holds no lock: it has exited, whatever its parent does.
	_, running, err := procfs.Running(procfs.Linux(""), n)
	cmd, cerr := procfs.Linux("").Cmdline(n)
	if err != nil || !running || cerr != nil {
		return "  writer: none now (the last was pid " + pid + ", which has exited)"
	}
	args := strings.Fields(strings.Join(cmd, " "))
	if len(args) > 4 {
		args = append(args[:4], "...")
	}
	if len(args) > 0 {
		args[0] = filepath.Base(args[0])
	}
	return "  writer: pid " + pid + " (" + strings.Join(args, " ") + ") holds the ledger lock"
}

// watchStatus draws the status every interval until ctx ends, like watch(1): on a terminal
// each frame replaces the last; otherwise frames follow one another under a time stamp. A first
// frame that cannot be drawn ends it with the error (a wrong state directory); a later one is
// shown as that frame, and the watch goes on: the ledger's writer may be repairing or replacing
// a file at that moment, and an operator watching a node wants the next frame, not a prompt.
func watchStatus(ctx context.Context, interval time.Duration, w io.Writer, draw func(io.Writer) error) error {
	tty := progress.IsTerminal(w)
	t := time.NewTicker(interval)
	defer t.Stop()
	for first := true; ; first = false {
		var frame bytes.Buffer
		if err := draw(&frame); err != nil {
			if first {
				return err
			}
			frame.Reset()
			fmt.Fprintf(&frame, "cannot read the status now: %v\n(trying again every %s)\n", err, interval)
		}
		head := fmt.Sprintf("every %s: gpufrac status    %s\n\n", interval, time.Now().Format("2006-01-02 15:04:05"))
		if tty {
			head = "\033[H\033[2J" + head
		}
		if _, err := io.WriteString(w, head+frame.String()+"\n"); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil // interrupted: the way a watch ends
		case <-t.C:
		}
	}
}

// runGone says whether the run whose progress rs is has ended without removing it (killed
// outright, or a zombie its parent has not reaped yet): then nothing of it runs.
func runGone(rs runstatus.Status) bool {
	_, running, err := procfs.Running(procfs.Linux(""), rs.PID)
	return err != nil || !running
}

// writeRun shows a running queue's progress (gone: its run has ended without removing it, as
// runGone found): jobs done, running and waiting; per GPU the guarantees held, what is borrowed
// past them and what is free, with each attempt running there; the jobs the ladder stopped; and
// what the waiting ones wait for. Memory a job holds past its guarantee is shown as borrowed,
// apart from the guarantee, so that a borrower never reads as a job over its cap; only use past
// the limit (the most it may hold) is called that.
func writeRun(w io.Writer, rs runstatus.Status, gone bool) {
	if gone {
		fmt.Fprintf(w, "  run of %s: pid %d left its progress %s ago and is gone (it ended without cleaning up)\n",
			rs.Queue, rs.PID, ago(rs.UpdatedAt))
		return
	}
	fmt.Fprintf(w, "\nrun of %s (pid %d, arm %s, started %s ago, progress %s old, results in %s):\n",
		rs.Queue, rs.PID, rs.Arm, ago(rs.Start), ago(rs.UpdatedAt), rs.OutDir)
	fmt.Fprintf(w, "  done %d of %d (%d not ok), running %d, waiting %d\n", rs.Done, rs.Jobs, rs.Failed, rs.Running, rs.Waiting)
	for _, g := range rs.GPUs {
		// What borrowers hold counts as taken for admission, as the guarantees do.
		fmt.Fprintf(w, "  %s, free %s\n", g, sub(g.BudgetBytes, g.ReservedBytes+g.BorrowedBytes))
		writeAttempts(w, rs.Attempts, g.Index)
	}
	if len(rs.Stopped) > 0 {
		fmt.Fprintf(w, "  stopped by the ladder (%d):\n", len(rs.Stopped))
		for _, s := range rs.Stopped {
			fmt.Fprintf(w, "    %s: %s\n", s.Job, dash(s.Reason))
		}
	}
	for _, wg := range rs.Waits {
		names := strings.Join(wg.Jobs, ", ")
		if wg.Count > len(wg.Jobs) {
			names += fmt.Sprintf(" and %d more", wg.Count-len(wg.Jobs))
		}
		fmt.Fprintf(w, "  %d waiting for %s: %s\n", wg.Count, wg.Reason, names)
	}
}

// writeAttempts is a table of the attempts running on one GPU. BORROWED is "-" for an attempt
// that may not borrow (its limit is its guarantee), as in the run's summary.
func writeAttempts(w io.Writer, attempts []runstatus.Attempt, gpu int) {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "    JOB\tATTEMPT\tGUARANTEE\tBORROWED\tUSING\tLIMIT")
	n := 0
	for _, a := range attempts {
		if a.GPUIndex != gpu {
			continue
		}
		n++
		borrowed := "-"
		if a.LimitBytes > a.GuaranteeBytes {
			borrowed = a.BorrowedBytes.String()
		}
		using := a.UsedBytes.String()
		if a.LimitBytes > 0 && a.UsedBytes > a.LimitBytes {
			using += " (past its limit)"
		}
		fmt.Fprintf(tw, "    %s\t%d of %d\t%s\t%s\t%s\t%s\n", a.Job, a.Attempt, a.MaxAttempts, dash(a.Room), borrowed, using, a.LimitBytes)
	}
	tw.Flush()
	if n > 0 {
		w.Write(buf.Bytes())
	}
}
