package simjob

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"

	"github.com/gpufrac/gpufrac/taskenv"
)

// EnvChild marks a process started by Command as a simulated job.
const EnvChild = taskenv.SimJob

// IsChild reports whether this process was started by Command to run a simulated job.
func IsChild() bool { return os.Getenv(EnvChild) == "1" }

// RunIfChild runs Main and exits when IsChild; call it first in TestMain.
func RunIfChild() {
	if IsChild() {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
}

// Command runs the current executable as a simulated job with args. The executable must call
// RunIfChild at start (test binaries do it in TestMain). The caller sets Stdout, Stderr and Env
// as needed; Env, when set, should keep EnvChild=1 (Command puts it into Env already).
func Command(ctx context.Context, args ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("simjob: cannot find the current executable: %w", err)
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), EnvChild+"=1")
	return cmd, nil
}

// selfArgs returns the command line that re-runs this job with different arguments: the
// executable and whatever came before args on its command line (for example "simjob" when run as
// `gpufrac simjob ...`).
func selfArgs(args []string) (string, []string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, fmt.Errorf("cannot find the current executable: %w", err)
	}
	all := os.Args[1:]
	if len(args) > len(all) || !slices.Equal(all[len(all)-len(args):], args) {
		return "", nil, fmt.Errorf("--procs needs simjob.Main to be called with the tail of the process's own arguments")
	}
	return exe, slices.Clone(all[:len(all)-len(args)]), nil
}
