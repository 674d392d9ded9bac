package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/record"
)

// Help that was asked for is output: on stdout, exit 0, for gpufrac and every command, and
// it shows the global flags' defaults, not values given before the command's name.
func TestHelpOnStdout(t *testing.T) {
	calls := [][]string{{"--help"}, {"-h"}, {"help"}}
	for _, c := range commands {
		calls = append(calls, []string{c.name, "--help"}, []string{"--state-dir", "/given/state", "--log-level", "trace", c.name, "-h"})
	}
	for _, args := range calls {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var o, e strings.Builder
			code := realMain(args, &o, &e)
			if code != exitOK || !strings.Contains(o.String(), "Usage") || e.Len() != 0 {
				t.Fatalf("exit %d (want 0), stdout %q, stderr %q: want the help on stdout only", code, o.String(), e.String())
			}
			if strings.Contains(o.String(), "/given/state") || strings.Contains(o.String(), `"trace"`) {
				t.Errorf("the help shows a flag given on the command line as its default:\n%s", o.String())
			}
		})
	}
	// A bad flag is an error: its message and the usage go to stderr, exit 2.
	var o, e strings.Builder
	if code := realMain([]string{"run", "--bogus"}, &o, &e); code != exitUsage || o.Len() != 0 || !strings.Contains(e.String(), "-bogus") {
		t.Errorf("run --bogus: exit %d, stdout %q, stderr %q: want 2 and the error on stderr", code, o.String(), e.String())
	}
}

// The command list is a column: every summary starts where the others do, however long the
// longest name.
func TestCommandListAligned(t *testing.T) {
	var o, e strings.Builder
	realMain([]string{"help"}, &o, &e)
	cols := map[int][]string{}
	for _, c := range commands {
		if c.hidden {
			continue
		}
		for _, l := range strings.Split(o.String(), "\n") {
			if rest, ok := strings.CutPrefix(l, "  "+c.name+" "); ok && strings.HasSuffix(l, c.summary) {
				col := len(l) - len(strings.TrimLeft(rest, " "))
				cols[col] = append(cols[col], c.name)
			}
		}
	}
	if len(cols) != 1 {
		t.Errorf("summaries start at columns %v, want one column:\n%s", cols, o.String())
	}
}

// `run --help` names every arm the runner knows.
func TestArmHelpListsEveryArm(t *testing.T) {
	var o, e strings.Builder
	realMain([]string{"run", "--help"}, &o, &e)
	var help string
	for _, l := range strings.Split(o.String(), "\n\n") {
		if strings.Contains(l, "-arm string") {
			help = l
		}
	}
	for _, a := range record.Arms {
		if !strings.Contains(help, string(a)) {
			t.Errorf("-arm help %q does not name the arm %q", help, a)
		}
	}
}

// Ctrl-C or SIGTERM stops a run cleanly: the outputs are written and the run says it was
// stopped, with the shells' status for the signal, not an error of its own.
func TestRunStoppedBySignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			c := newCLI(t)
			out := filepath.Join(t.TempDir(), "out")
			b := c.startRun(t, "--out", out, writeQueue(t, longQueue))
			c.jobOnGPU(t)
			if err := b.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			data := make(chan string, 1)
			go func() {
				var sb strings.Builder
				buf := make([]byte, 4096)
				for {
					n, err := b.stdout.Read(buf)
					sb.Write(buf[:n])
					if err != nil {
						data <- sb.String()
						return
					}
				}
			}()
			b.wait(t)
			text := <-data
			want := 128 + int(sig)
			if code := b.cmd.ProcessState.ExitCode(); code != want {
				t.Errorf("exit status %d, want %d (128 + %d)\n%s", code, want, int(sig), text)
			}
			name := map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}[sig]
			if line := fmt.Sprintf("gpufrac run: stopped by %s (exit status %d)", name, want); !strings.Contains(text, line) {
				t.Errorf("output lacks %q:\n%s", line, text)
			}
			if strings.Contains(text, "context canceled") {
				t.Errorf("output says %q:\n%s", "context canceled", text)
			}
			if _, err := os.Stat(filepath.Join(out, record.ResultsFile)); err != nil {
				t.Errorf("no results after %v: %v", sig, err)
			}
		})
	}
}

// The queue file's problems are the run's first words: an unused template is a warning on
// stderr and the run goes on; a result that is the run's own output is refused before anything
// runs, also when written as an absolute path into --out.
func TestRunChecksTheQueueAgainstItsOutputs(t *testing.T) {
	c := newCLI(t)
	out := filepath.Join(t.TempDir(), "out")
	q := writeQueue(t, `
template "unused" {}
job "a" {
  command = ["gpufrac", "simjob", "--peak", "1GiB", "--hold", "50ms"]
}
`)
	code, stdout, stderr := c.run("run", "--out", out, q)
	warn := "gpufrac run: warning: " + q + `:2,1: Unused template: template "unused" is used by no job`
	if code != 0 || !strings.HasPrefix(stderr, warn) {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s\nwant 0 and stderr starting with %q", code, stdout, stderr, warn)
	}
	abs := filepath.Join(out, "attempts.csv")
	q = writeQueue(t, `
job "a" {
  command = ["gpufrac", "simjob", "--peak", "1GiB", "--hold", "50ms"]
  result  = "`+abs+`"
}
`)
	code, stdout, stderr = c.run("run", "--out", out, q)
	want := fmt.Sprintf(`gpufrac run: %s:4,13: Result overwrites the run's outputs: job "a": result = %q is the run's own attempts.csv`, q, abs)
	if code != exitFail || !strings.Contains(stderr, want) || stdout != "" {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s\nwant 1, nothing run, and %q", code, stdout, stderr, want)
	}
}

// The top-level help points at documentation an installed binary's user can open, not at a
// path that exists only in a source checkout.
func TestHelpLinksTheDocs(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}} {
		var o, e bytes.Buffer
		if code := realMain(args, &o, &e); code != 0 {
			t.Fatalf("gpufrac %s: exit %d\n%s", args[0], code, e.String())
		}
		help := o.String() + e.String()
		if !strings.Contains(help, docsURL) {
			t.Errorf("gpufrac %s does not link %s:\n%s", args[0], docsURL, help)
		}
		if m := regexp.MustCompile(`(^|\s)docs/\S+`).FindString(help); m != "" {
			t.Errorf("gpufrac %s names a source-tree path %q", args[0], strings.TrimSpace(m))
		}
	}
}

// `gpufrac help COMMAND` is that command's help, as in go and git: it printed gpufrac's own
// usage, which does not list the command's flags. An unknown command and a stray argument are
// usage errors (exit 2) in every command: `gpufrac version extra` exited 0, `help bogus` too.
func TestHelpOfACommandAndStrayArguments(t *testing.T) {
	for _, c := range commands {
		if c.hidden {
			continue
		}
		var o, e strings.Builder
		code := realMain([]string{"help", c.name}, &o, &e)
		if want := "Usage: gpufrac " + c.name; code != exitOK || !strings.HasPrefix(o.String(), want) || e.Len() != 0 {
			t.Errorf("help %s: exit %d, stdout %q, stderr %q: want %q on stdout, exit 0", c.name, code, o.String(), e.String(), want)
		}
	}
	for _, args := range [][]string{{"help", "bogus"}, {"version", "extra"}} {
		var o, e strings.Builder
		code := realMain(args, &o, &e)
		if code != exitUsage || o.Len() != 0 || !strings.Contains(e.String(), `"`+args[1]+`"`) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q: want exit 2 and an error naming %q", args, code, o.String(), e.String(), args[1])
		}
	}
}

// A job's dir that is missing, or is a file, is refused before anything runs at its place in
// the queue file, as every other bad value is: the run named only the job and the resolved
// path, which left the reader to find the line, and the relative path written there.
func TestRunNamesAMissingDirWhereTheFileSaysIt(t *testing.T) {
	c := newCLI(t)
	out := filepath.Join(t.TempDir(), "out")
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	q := writeQueue(t, `
job "a" {
  command = ["gpufrac", "simjob", "--peak", "1GiB", "--hold", "50ms"]
  dir     = "no-such-dir"
}
job "b" {
  command = ["gpufrac", "simjob", "--peak", "1GiB", "--hold", "50ms"]
  dir     = "`+file+`"
}
`)
	code, stdout, stderr := c.run("run", "--out", out, q)
	for _, want := range []string{
		fmt.Sprintf(`gpufrac run: %s:4,13: Missing directory: job "a": dir = "no-such-dir" (%s) does not exist`, q, filepath.Join(filepath.Dir(q), "no-such-dir")),
		fmt.Sprintf(`%s:8,13: Missing directory: job "b": dir = %q is not a directory`, q, file),
	} {
		if code != exitFail || !strings.Contains(stderr, want) || stdout != "" {
			t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s\nwant 1, nothing run, and %q", code, stdout, stderr, want)
		}
	}
}

// A program that cannot be found is refused before anything runs, at its line: it surfaced as
// a failed attempt (`exec: "pyhton3": executable file not found in $PATH`) only once the job was
// admitted, which in a long queue is hours in. A program found, "gpufrac" (this binary), and one
// relative to the job's dir start as before.
func TestRunRefusesAProgramThatIsNotThere(t *testing.T) {
	c := newCLI(t)
	out := filepath.Join(t.TempDir(), "out")
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "run.sh"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "data.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	q := writeQueue(t, `
job "typo" {
  command = ["pyhton3", "train.py"]
}
job "missing" {
  command = ["./nope.sh"]
  dir     = "`+work+`"
}
job "not-executable" {
  command = ["./data.txt"]
  dir     = "`+work+`"
}
job "found" {
  command = ["./run.sh"]
  dir     = "`+work+`"
}
job "self" {
  command = ["gpufrac", "simjob", "--peak", "1GiB", "--hold", "50ms"]
}
`)
	code, stdout, stderr := c.run("run", "--out", out, q)
	for _, want := range []string{
		fmt.Sprintf(`gpufrac run: %s:3,13: Program not found: job "typo": command = ["pyhton3", ...]: "pyhton3" is not in $PATH`, q),
		fmt.Sprintf(`%s:6,13: Program not found: job "missing": command = ["./nope.sh"]: %s does not exist`, q, filepath.Join(work, "nope.sh")),
		fmt.Sprintf(`%s:10,13: Program not found: job "not-executable": command = ["./data.txt"]: %s is not executable`, q, filepath.Join(work, "data.txt")),
	} {
		if code != exitFail || !strings.Contains(stderr, want) || stdout != "" {
			t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s\nwant 1, nothing run, and %q", code, stdout, stderr, want)
		}
	}
	if strings.Contains(stderr, `"found"`) || strings.Contains(stderr, `"self"`) {
		t.Errorf("a program that is there was refused:\n%s", stderr)
	}
}

// gpufrac probe stops what the probed job left running out of its process group (setsid, a
// daemon), by the token it carries, and says so: the helper held the probe until it ended, and
// once the probe's reservation was released it would have run on unknown to the ledger.
func TestProbeStopsWhatItsJobLeftRunning(t *testing.T) {
	c := newCLI(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "helper.pid")
	script := `setsid sh -c 'echo $$ > "$1"; exec sleep 600' sh "$1" & while [ ! -s "$1" ]; do sleep 0.05; done; exec "$2" simjob --peak 1GiB --hold 100ms`
	code, _, stderr := c.run("probe", "--template", "t", "--no-store", "--", "sh", "-c", script, "sh", pidFile, exe)
	helper := testutil.LeftPID(t, pidFile)
	if want := "gpufrac probe: stopped the 1 process(es) its job left running without it (pid " + strconv.Itoa(helper) + ")"; code != 0 || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr:\n%s\nwant 0 and %q", code, stderr, want)
	}
	testutil.Ended(t, helper, "the helper to be stopped")
}
