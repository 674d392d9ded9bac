package testutil

import (
	"os/exec"
	"sort"
	"testing"
)

// Task is a child process standing in for a job's: the enforcer finds it by the environment it
// carries (a reservation's token), and the simulated GPU charges memory to its PID. It is
// reaped as soon as it exits, so the test can wait for the enforcer to stop it.
type Task struct {
	Cmd    *exec.Cmd
	exited chan struct{}
}

// StartTask runs `sleep` with env (a reservation's variables, plus extra entries "K=V" such as
// Nomad's) until the test ends. With neither, the child inherits the test's environment: a
// stranger to every reservation.
func StartTask(t testing.TB, env map[string]string, extra ...string) *Task {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.Env = append(cmd.Env, extra...)
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	return Start(t, cmd)
}

// Start starts cmd, reaps it when it exits, and kills it when the test ends, waiting until it
// has been reaped so that no child outlives the test.
func Start(t testing.TB, cmd *exec.Cmd) *Task {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	k := &Task{Cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(k.exited) }()
	t.Cleanup(k.Stop)
	return k
}

// PID is the child's process ID.
func (k *Task) PID() int { return k.Cmd.Process.Pid }

// Exited is closed once the child has exited and been reaped.
func (k *Task) Exited() <-chan struct{} { return k.exited }

// Stop kills the child and returns once it has been reaped.
func (k *Task) Stop() {
	_ = k.Cmd.Process.Kill()
	<-k.exited
}
