// Command gpufrac runs queues of GPU jobs packed under measured memory caps on one machine
// (gpufrac run), measures a job's footprint (gpufrac probe), shows the ledger (gpufrac status)
// and does the cap arithmetic (gpufrac units). docs/cli.md documents every command and flag.
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

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/gpu/simjob"
	"github.com/hashicorp/go-hclog"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and something failed (a job, a probe)
	exitUsage = 2 // bad flags or arguments
)

// usageError marks errors that come from bad command lines.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, g *globals, args []string, stdout, stderr io.Writer) error
	hidden  bool
}

var commands = []command{
	{"run", "run a queue of jobs packed under measured caps (the embedded default)", cmdRun, false},
	{"probe", "measure a job's peak GPU memory and store it as its template's footprint", cmdProbe, false},
	{"status", "show the ledger: GPUs, reservations, violations, footprints", cmdStatus, false},
	{"units", "turn a peak into a cap and memory units", cmdUnits, false},
	{"controller", "re-register Nomad jobs whose task broke its cap, on a whole GPU", cmdController, false},
	{"version", "print the version", cmdVersion, false},
	{"simjob", "a simulated GPU job (for demos and tests)", nil, true},
}

// globals are the flags every command accepts, before or after its name.
type globals struct {
	stateDir      string
	backend       string
	simulatedGPUs string
	simDir        string
	ignoredXIDs   string
	xids          []uint64 // ignoredXIDs, parsed by setup
	logLevel      string
	// defaultLevel applies when --log-level is not given; commands may change it.
	defaultLevel string
	logger       hclog.Logger
	// stdout is where a help that was asked for goes (`gpufrac run --help | less`).
	stdout io.Writer
	// shown are the global flags' defaults as help shows them: a command's help must not show
	// a value given before the command's name as the default.
	shown map[string]string
}

func defaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/gpufrac"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "gpufrac")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "gpufrac")
	}
	return filepath.Join(os.TempDir(), "gpufrac-state")
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.stateDir, "state-dir", g.stateDir, "directory of the ledger and the local policy file")
	fs.StringVar(&g.backend, "gpu-backend", g.backend, "GPU backend: auto (NVML, else simulated), nvml or simulated")
	fs.StringVar(&g.simulatedGPUs, "simulated-gpus", g.simulatedGPUs, `simulated GPUs, e.g. "H100=80GiB" or "2xH100=80GiB"`)
	fs.StringVar(&g.simDir, "sim-dir", g.simDir, "state directory of the simulated GPUs (default $GPUFRAC_SIM_DIR or a temp dir)")
	fs.StringVar(&g.ignoredXIDs, "ignored-xids", g.ignoredXIDs, "critical XIDs that leave a GPU in service, comma-separated, e.g. 63,92 (default none)")
	fs.StringVar(&g.logLevel, "log-level", g.logLevel, "log level: error, warn, info, debug or trace (default warn; error for run, whose progress lines already report violations)")
	if g.shown == nil {
		g.shown = map[string]string{}
		fs.VisitAll(func(f *flag.Flag) { g.shown[f.Name] = f.DefValue })
	}
	for name, def := range g.shown {
		fs.Lookup(name).DefValue = def
	}
}

func (g *globals) setup(stderr io.Writer) error {
	level := g.logLevel
	if level == "" {
		level = g.defaultLevel
	}
	lvl := hclog.LevelFromString(level)
	if lvl == hclog.NoLevel {
		return usagef("--log-level %q: want error, warn, info, debug or trace", g.logLevel)
	}
	switch g.backend {
	case gpu.KindAuto, gpu.KindNVML, gpu.KindSimulated:
	default:
		return usagef("--gpu-backend %q: want auto, nvml or simulated", g.backend)
	}
	if g.simulatedGPUs != "" {
		// Checked for every command, also those that may never open the simulated backend.
		if _, err := gpu.ParseSimSpec(g.simulatedGPUs); err != nil {
			return usagef("--simulated-gpus: %w", err)
		}
	}
	xids, err := gpu.ParseXIDs(g.ignoredXIDs)
	if err != nil {
		return usagef("--ignored-xids: %w", err)
	}
	g.xids = xids
	// Jobs, the allocation fence inside them and simulated jobs find the ledger's fence tables
	// and the simulated GPUs by these paths, from their own working directory (a job's dir): a
	// relative path names another place there, and the fence, not finding its tables, left the
	// job to the watchdog alone.
	for _, p := range []*string{&g.stateDir, &g.simDir} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(expandHome(*p))
		if err != nil {
			return usagef("%q: %w", *p, err)
		}
		*p = abs
	}
	g.logger = hclog.New(&hclog.LoggerOptions{Name: "gpufrac", Level: lvl, Output: stderr})
	return nil
}

// openBackend opens the configured GPU backend; sim are the simulated GPUs to set up when no
// --simulated-gpus was given.
func (g *globals) openBackend(sim []string) (gpu.Backend, error) {
	var gpus []string
	if g.simulatedGPUs != "" {
		var err error
		if gpus, err = gpu.ParseSimSpec(g.simulatedGPUs); err != nil {
			return nil, usagef("--simulated-gpus: %w", err)
		}
	} else if len(sim) > 0 {
		for _, s := range sim {
			e, err := gpu.ParseSimSpec(s)
			if err != nil {
				return nil, err
			}
			gpus = append(gpus, e...)
		}
	}
	return gpu.Open(g.backend, gpu.OpenOptions{SimGPUs: gpus, SimDir: g.simDir, Logger: g.logger,
		Health: gpu.HealthOptions{IgnoredXIDs: g.xids}})
}

func realMain(args []string, stdout, stderr io.Writer) int {
	g := &globals{stateDir: defaultStateDir(), backend: gpu.KindAuto, defaultLevel: "warn", stdout: stdout}
	top := flag.NewFlagSet("gpufrac", flag.ContinueOnError)
	g.register(top)
	top.Usage = func() { topUsage(top.Output(), top) }
	if err := parseHelpful(top, args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	rest := top.Args()
	if len(rest) == 0 {
		topUsage(stderr, top)
		return exitUsage
	}
	name := rest[0]
	if name == "help" || name == "-h" {
		if len(rest) < 2 {
			topUsage(stdout, top)
			return exitOK
		}
		// `gpufrac help run` is `gpufrac run --help`, as go and git read it: gpufrac's own
		// usage does not list the command's flags.
		name, rest = rest[1], []string{rest[1], "--help"}
	}
	if name == "simjob" {
		return simjob.Main(rest[1:], stdout, stderr)
	}
	var cmd *command
	for i := range commands {
		if commands[i].name == name {
			cmd = &commands[i]
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "gpufrac: unknown command %q (commands: run, probe, status, units, controller, version)\n", name)
		return exitUsage
	}
	// A lost terminal (SIGHUP: an ssh drop) stops a run as Ctrl-C does: its jobs are stopped,
	// their reservations released and the results written.
	ctx, stop := stopOnSignals(context.Background())
	defer stop()
	// A closed stdout (`gpufrac run q.hcl | head`) must not kill the run and leave its jobs
	// behind: with SIGPIPE notified, writes to it fail with EPIPE and the run goes on.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	err := cmd.run(ctx, g, rest[1:], stdout, stderr)
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	// A command a signal ended has stopped cleanly (its jobs stopped, its outputs written);
	// "context canceled" would read as a failure of its own.
	var sig stoppedBy
	if errors.As(context.Cause(ctx), &sig) {
		fmt.Fprintf(stderr, "gpufrac %s: stopped by %s (exit status %d)\n", name, sig.String(), sig.exitCode())
		return sig.exitCode()
	}
	fmt.Fprintf(stderr, "gpufrac %s: %v\n", name, err)
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitFail
}

// stoppedBy is the cause of a command's context when a signal ended it.
type stoppedBy struct{ sig syscall.Signal }

func (s stoppedBy) Error() string { return s.String() + " received" }

// String is the signal's conventional name, SIGINT for Ctrl-C.
func (s stoppedBy) String() string {
	switch s.sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return s.sig.String()
}

// exitCode follows the shells' convention, 128 + the signal's number (130 for Ctrl-C), so a
// script can tell a stopped run from a failed one (1).
func (s stoppedBy) exitCode() int { return 128 + int(s.sig) }

// stopOnSignals is signal.NotifyContext for SIGINT, SIGTERM and SIGHUP, with a cause that says
// which signal came (NotifyContext's cause is an unexported type). Until stop, further signals
// are absorbed: a second Ctrl-C does not kill a run in the middle of its clean stop.
func stopOnSignals(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			if ss, ok := s.(syscall.Signal); ok {
				cancel(stoppedBy{ss})
			} else {
				cancel(fmt.Errorf("signal %v", s))
			}
		case <-done:
		}
	}()
	return ctx, func() {
		close(done)
		cancel(context.Canceled)
		signal.Stop(ch)
	}
}

func topUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "Usage: gpufrac [global flags] <command> [flags] [args]")
	fmt.Fprintln(w, "\nCommands:")
	width := 0
	for _, c := range commands {
		if !c.hidden {
			width = max(width, len(c.name))
		}
	}
	for _, c := range commands {
		if !c.hidden {
			fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
		}
	}
	fmt.Fprintln(w, "\nGlobal flags (also accepted after the command name):")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintln(w, "\nRun 'gpufrac <command> -h' for a command's flags. Documentation: "+docsURL)
}

// docsURL is where an installed gpufrac's users find the CLI reference: a path into the source
// tree means nothing to someone who installed only the binary.
const docsURL = "https://github.com/gpufrac/gpufrac/blob/main/docs/cli.md"

// newFlagSet makes a command's flag set with the global flags registered too.
func newFlagSet(name, usage string, g *globals, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gpufrac "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	g.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: gpufrac %s\n\nFlags:\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

// flagSet says whether the command line named flag name (a default is not the user's choice).
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// parseFlags parses a command's flags and checks the global ones.
func parseFlags(fs *flag.FlagSet, g *globals, args []string, stderr io.Writer) error {
	if err := parseHelpful(fs, args, g.stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	return g.setup(stderr)
}

// parseHelpful parses fs; a help asked for (-h, --help) goes to stdout, so that it pages and
// greps like any output, and a bad flag's message and the usage to stderr.
func parseHelpful(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
	case err != nil:
		fs.SetOutput(stderr)
		fmt.Fprintln(stderr, err)
		fs.Usage()
	}
	fs.SetOutput(stderr)
	return err
}

// simulatedBanner is the first line of output whenever the simulated backend is in use.
func simulatedBanner(b gpu.Backend) string {
	if b.Kind() == gpu.KindSimulated {
		dir := ""
		if s, ok := b.(*gpu.Simulated); ok {
			dir = " (state in " + s.Dir() + ")"
		}
		return "SIMULATED GPU backend" + dir + ": no real GPU is used; figures are illustrative"
	}
	return ""
}

func expandHome(p string) string {
	if strings.HasPrefix(p, "~/") {
		if h, err := os.UserHomeDir(); err == nil {
			return filepath.Join(h, p[2:])
		}
	}
	return p
}
