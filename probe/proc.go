package probe

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Proc is a job started in its own process group, so that the whole tree can be signalled and
// attributed at once.
type Proc struct {
	Cmd  *exec.Cmd
	PID  int
	done chan struct{}
	err  error
}

// Spec is how to start a job.
type Spec struct {
	Command []string
	// Env is the complete environment (os.Environ() plus the job's variables).
	Env            []string
	Dir            string
	Stdout, Stderr io.Writer
}

// Start runs the command in a session of its own, so in a process group of its own: a process
// may join only a group of its own session, and the watchdog ties a process that carries no
// token to the job whose group it is in. In the runner's session, a job's process could join a
// neighbour's group and be charged to it (TestAJobCannotJoinAnothersProcessGroup). On Linux the
// job is killed when the process that started it dies (a parent-death signal), so a runner
// killed outright leaves no job running on with no watchdog.
func Start(s Spec) (*Proc, error) {
	if len(s.Command) == 0 {
		return nil, errors.New("empty command")
	}
	cmd := exec.Command(s.Command[0], s.Command[1:]...)
	cmd.Env = s.Env
	cmd.Dir = s.Dir
	cmd.Stdout = s.Stdout
	cmd.Stderr = s.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	diesWithParent(cmd.SysProcAttr)
	// A writer that is not a file (the runner's stderr feeds the tail of the job's last words)
	// reaches the job through a pipe, and Wait waits for every holder of it: a helper the job
	// left running (`cmd &`, a daemon in a session of its own) held a job that had ended
	// "running" until the helper ended, and one out of the job's process group, which Stop's
	// SIGKILL does not reach, held a Ctrl-C'd run for good. The job is its first process; what
	// it wrote before it exited is in the pipe, read within the delay.
	cmd.WaitDelay = outputDrain
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %q: %w", s.Command[0], err)
	}
	p := &Proc{Cmd: cmd, PID: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// outputDrain is how long Wait reads a job's output pipes after its first process exited.
const outputDrain = 2 * time.Second

// Done is closed when the root process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// ExitCode is the root's exit status after Done: 128+signal when a signal ended it, -1 when
// it could not be started or waited for.
func (p *Proc) ExitCode() int {
	<-p.done
	// ErrWaitDelay: the job exited 0 and a helper it left still held its output (Start).
	if p.err == nil || errors.Is(p.err, exec.ErrWaitDelay) {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if sig, ok := p.Signaled(); ok {
			return 128 + int(sig)
		}
		return ee.ExitCode()
	}
	return -1
}

// Exited says whether the root has ended by now: reaped (Done), or only waiting to be, which
// Done cannot tell until Start's goroutine has run. A job that ended is not to be counted as
// one a signal stopped (Run's window).
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return exitPending(p.PID)
	}
}

func (p *Proc) root() int { return p.PID }

// Signaled is the signal that ended the root, after Done, if one did. ExitCode says 137 both
// for a SIGKILL and for a wrapper that exits 137; what a user reads should tell them apart.
func (p *Proc) Signaled() (syscall.Signal, bool) {
	<-p.done
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal(), true
		}
	}
	return 0, false
}

// Signal sends sig to the job's whole process group.
func (p *Proc) Signal(sig syscall.Signal) error {
	err := syscall.Kill(-p.PID, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Stop asks the job to end with SIGINT (Python turns it into an orderly exit, which under MPS
// does not fault neighbours), then SIGKILLs the group after grace. It returns when the root has
// exited; group members left behind are killed too.
func (p *Proc) Stop(grace time.Duration) {
	_ = p.Signal(syscall.SIGINT)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.Signal(syscall.SIGKILL)
		<-p.done
	}
	p.Reap()
}

// Reap ends whatever is left of the group after the root exited (helpers it forked): SIGINT
// first, because under MPS a SIGKILL of a busy client can fault its neighbours, then SIGKILL.
func (p *Proc) Reap() {
	if syscall.Kill(-p.PID, 0) != nil {
		return
	}
	_ = p.Signal(syscall.SIGINT)
	for range 40 {
		time.Sleep(50 * time.Millisecond)
		if syscall.Kill(-p.PID, 0) != nil {
			return
		}
	}
	_ = p.Signal(syscall.SIGKILL)
}

// Environ merges extra variables over os.Environ(); extra wins.
func Environ(extra map[string]string) []string {
	base := os.Environ()
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := extra[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range extra {
		out = append(out, k+"="+v)
	}
	return out
}
