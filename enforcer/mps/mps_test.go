package mps

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/size"
)

const uuid = "GPU-mps-test"

// daemonProcs is the process table as far as the fake daemon goes: the one the fake control
// program wrote its PID for, running as `fake-mps-control -d-loop` with the pipe directory.
type daemonProcs struct{ pipe string }

func (p daemonProcs) pid() int {
	b, err := os.ReadFile(filepath.Join(p.pipe, "daemon.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func (p daemonProcs) Alive(pid int) error {
	if pid != p.pid() {
		return errors.New("gone")
	}
	return nil
}

func (p daemonProcs) List() ([]Process, error) {
	pid := p.pid()
	if pid == 0 {
		return nil, nil
	}
	return []Process{{PID: pid + 1, Argv: []string{"sh", "other", "-d"}, PipeDir: p.pipe},
		{PID: pid, Argv: []string{"/bin/sh", "/x/fake-mps-control", "-d-loop"}, PipeDir: p.pipe}}, nil
}

func testEnv(uuid, pipe, logDir string) []string {
	return []string{"CUDA_VISIBLE_DEVICES=" + uuid, "CUDA_MPS_PIPE_DIRECTORY=" + pipe, "CUDA_MPS_LOG_DIRECTORY=" + logDir}
}

func newManager(t *testing.T, timeout time.Duration) (*Manager, daemonProcs) {
	t.Helper()
	o := Options{ControlBinary: testutil.FakeMPSControl(t), Root: testutil.MPSRoot(t), Timeout: timeout}
	procs := daemonProcs{pipe: filepath.Join(o.Root, uuid, "pipe")}
	return New(o, procs, testEnv, hclog.NewNullLogger()), procs
}

func commands(t *testing.T, p daemonProcs) string {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(p.pipe, "commands.log"))
	return string(b)
}

// A daemon started, adopted by a second manager (a restarted plugin), given a new ceiling and
// stopped: every step shows in the commands the control program received.
func TestEnsureAdoptUpdateStop(t *testing.T) {
	m, procs := newManager(t, 2*time.Second)
	ctx := t.Context()
	pid, adopted, err := m.Ensure(ctx, uuid, 40*size.GiB)
	if err != nil || adopted || pid == 0 || pid != procs.pid() {
		t.Fatalf("Ensure = pid %d, adopted %v, %v; want the started daemon's pid %d", pid, adopted, err, procs.pid())
	}
	if got := commands(t, procs); !strings.Contains(got, "daemon "+uuid) || !strings.Contains(got, "set_default_device_pinned_mem_limit 0 40960M") {
		t.Fatalf("commands:\n%s", got)
	}
	if pipe, logDir := m.Dirs(uuid); pipe != procs.pipe || filepath.Dir(logDir) != filepath.Dir(pipe) {
		t.Fatalf("Dirs = %s, %s", pipe, logDir)
	}
	if got := m.Running(); !slices.Equal(got, []string{uuid}) {
		t.Fatalf("Running = %v", got)
	}
	if err := m.Check(ctx, uuid); err != nil {
		t.Fatalf("Check of a live daemon: %v", err)
	}

	again := New(m.opts, procs, testEnv, hclog.NewNullLogger()) // the same node: the same pipe directories
	apid, adopted, err := again.Adopt(ctx, uuid, 40*size.GiB)
	if err != nil || !adopted || apid != pid {
		t.Fatalf("Adopt = pid %d, adopted %v, %v; want the running daemon %d adopted", apid, adopted, err, pid)
	}
	if n := strings.Count(commands(t, procs), "daemon "); n != 1 {
		t.Fatalf("%d daemons started, want 1", n)
	}
	if err := again.UpdateLimit(ctx, uuid, 30*size.GiB); err != nil {
		t.Fatal(err)
	}
	if got := commands(t, procs); !strings.Contains(got, "set_default_device_pinned_mem_limit 0 30720M") {
		t.Fatalf("the new ceiling was not set:\n%s", got)
	}
	if err := again.Stop(ctx, uuid); err != nil {
		t.Fatal(err)
	}
	if len(again.Running()) != 0 || procs.pid() != 0 {
		t.Fatalf("after Stop: running %v, daemon pid %d", again.Running(), procs.pid())
	}
	if err := m.Check(ctx, uuid); err == nil {
		t.Fatal("Check of a stopped daemon succeeded")
	}
}

// Adopt starts nothing: with no daemon answering there is nothing to adopt.
func TestAdoptWithoutDaemon(t *testing.T) {
	m, procs := newManager(t, 2*time.Second)
	if err := os.MkdirAll(procs.pipe, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, adopted, err := m.Adopt(t.Context(), uuid, size.GiB); adopted || err != nil {
		t.Fatalf("Adopt = adopted %v, %v; want nothing adopted", adopted, err)
	}
	if len(m.Running()) != 0 || strings.Contains(commands(t, procs), "daemon ") {
		t.Fatalf("Adopt started a daemon: %v\n%s", m.Running(), commands(t, procs))
	}
}

// A control command that hangs is cut off at the timeout, naming it.
func TestControlTimeout(t *testing.T) {
	// The start has all the time a loaded machine needs; only the hung command below is timed.
	m, procs := newManager(t, 10*time.Second)
	if _, _, err := m.Ensure(t.Context(), uuid, size.GiB); err != nil {
		t.Fatal(err)
	}
	m.opts.Timeout = 300 * time.Millisecond
	if err := os.WriteFile(filepath.Join(procs.pipe, "hang"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	err := m.Check(context.Background(), uuid)
	if !errors.Is(err, ErrControl) || !strings.Contains(err.Error(), "no answer within 300ms") {
		t.Fatalf("err = %v", err)
	}
	if el := time.Since(t0); el > 2*time.Second {
		t.Fatalf("a hung control command held the caller for %s", el)
	}
}

func TestStartFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		binary string
		setup  func(t *testing.T, pipe string)
		want   string
	}{
		{name: "refused", want: "start refused", setup: func(t *testing.T, pipe string) {
			if err := os.MkdirAll(pipe, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(pipe, "fail-start"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "missing binary", binary: "/nonexistent/nvidia-cuda-mps-control", want: "/nonexistent/nvidia-cuda-mps-control"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, procs := newManager(t, 2*time.Second)
			if tc.binary != "" {
				m.opts.ControlBinary = tc.binary
			}
			if tc.setup != nil {
				tc.setup(t, procs.pipe)
			}
			_, _, err := m.Ensure(t.Context(), uuid, size.GiB)
			if !errors.Is(err, ErrControl) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrControl naming %q", err, tc.want)
			}
			if len(m.Running()) != 0 {
				t.Fatalf("a daemon that did not start is listed running: %v", m.Running())
			}
		})
	}
}

func TestPinnedLimit(t *testing.T) {
	cases := []struct {
		v    string
		want size.Bytes
		ok   bool
	}{
		{"GPU-a=4096M", 4 * size.GiB, true},
		{"0=4G", 4 * size.GiB, true},
		{"GPU-b=1G,GPU-a=512M", 512 * size.MiB, true},
		{"GPU-b=1G", 0, false},
		{"", 0, false},
		{"GPU-a=4096", 0, false},
		{"GPU-a=xM", 0, false},
	}
	for _, tc := range cases {
		got, ok := PinnedLimit(tc.v, "GPU-a")
		if got != tc.want || ok != tc.ok {
			t.Errorf("PinnedLimit(%q) = %s, %v; want %s, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

// The daemon, and the servers it starts, carry no task's token even where gpufrac itself runs
// inside a task: the watchdog takes a process with a token for that task's, whatever its name,
// and the server would be charged to it.
func TestControlCarriesNoToken(t *testing.T) {
	m, procs := newManager(t, 2*time.Second)
	dump := filepath.Join(t.TempDir(), "control-env")
	script := filepath.Join(t.TempDir(), "env-control")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nenv > "+dump+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	m.opts.ControlBinary = script
	t.Setenv("GPUFRAC_RESERVATION", "outer-token")
	t.Setenv("GPUFRAC_RESERVATION_GPU_1", "outer-gpu-token")
	t.Setenv("GPUFRAC_KEEP", "kept")
	if _, err := m.control(t.Context(), m.daemon(uuid), "", "-d"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	env := string(b)
	if strings.Contains(env, "outer-") || !strings.Contains(env, "GPUFRAC_KEEP=kept") ||
		!strings.Contains(env, "CUDA_MPS_PIPE_DIRECTORY="+procs.pipe) {
		t.Fatalf("the control command's environment: %s", env)
	}
}
