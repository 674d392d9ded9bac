package enforcer

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/mps"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/procfs"
	"github.com/gpufrac/gpufrac/size"
)

func (r *rig) pipeFile(name string) string {
	return filepath.Join(r.cfg.MPS.Root, r.uuid, "pipe", name)
}

func (r *rig) commands() string {
	b, _ := os.ReadFile(r.pipeFile("commands.log"))
	return string(b)
}

func (r *rig) daemonPID() int {
	b, err := os.ReadFile(r.pipeFile("daemon.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func TestMPSStartAdoptStop(t *testing.T) {
	r := newRig(t, policy.ModeMPS, nil)
	ch, unsub := r.enf.Subscribe()
	defer unsub()
	if err := r.enf.PrepareGPU(t.Context(), r.uuid); err != nil {
		t.Fatal(err)
	}
	st, _ := r.led.State(r.uuid)
	limit := "set_default_device_pinned_mem_limit 0 " + strconv.FormatUint(uint64(st.BudgetBytes/size.MiB), 10) + "M"
	if got := r.commands(); !strings.Contains(got, "daemon "+r.uuid) || !strings.Contains(got, limit) {
		t.Fatalf("control commands:\n%s\nwant a daemon for %s and %q", got, r.uuid, limit)
	}
	ev := <-ch
	if ev.Kind != EventMPS || ev.Stage != "started" || len(ev.PIDs) != 1 || ev.PIDs[0] != r.daemonPID() {
		t.Fatalf("event %+v, daemon pid %d", ev, r.daemonPID())
	}
	opts := r.enf.EnvOptions(r.uuid)
	if opts.MPSPipeDir != filepath.Dir(r.pipeFile("x")) || opts.MPSLogDir == "" {
		t.Fatalf("env options %+v", opts)
	}

	// A new enforcer (the plugin restarted) adopts the daemon: no second daemon starts.
	r.newEnforcer()
	ch2, unsub2 := r.enf.Subscribe()
	defer unsub2()
	if err := r.enf.PrepareGPU(t.Context(), r.uuid); err != nil {
		t.Fatal(err)
	}
	if ev := <-ch2; ev.Stage != "adopted" {
		t.Fatalf("event %+v, want adopted", ev)
	}
	if n := strings.Count(r.commands(), "daemon "); n != 1 {
		t.Fatalf("%d daemons started", n)
	}

	// Shutdown leaves the daemon while a client holds GPU memory, and stops it once none does.
	client := testutil.StartTask(t, nil)
	if err := r.sim.SetUsage(r.uuid, client.PID(), size.GiB); err != nil {
		t.Fatal(err)
	}
	if err := r.enf.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r.daemonPID() == 0 {
		t.Fatal("Shutdown stopped a daemon with a client")
	}
	client.Stop()
	if err := r.enf.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.commands(), "quit") || r.daemonPID() != 0 {
		t.Fatalf("daemon not stopped; commands:\n%s", r.commands())
	}
}

// A daemon that outlived an earlier plugin is adopted by Run alone, before any PrepareGPU, so its
// health is watched from the start.
func TestRunAdoptsDaemon(t *testing.T) {
	r := newRig(t, policy.ModeMPS, nil)
	if err := r.enf.PrepareGPU(t.Context(), r.uuid); err != nil {
		t.Fatal(err)
	}
	r.newEnforcer()
	r.start()
	ev := r.event("adopted", func(e Event) bool { return e.Kind == EventMPS && e.Stage == "adopted" })
	if len(ev.PIDs) != 1 || ev.PIDs[0] != r.daemonPID() {
		t.Fatalf("event %+v, daemon pid %d", ev, r.daemonPID())
	}
	if n := strings.Count(r.commands(), "daemon "); n != 1 {
		t.Fatalf("%d daemons started", n)
	}
}

func TestIsolatedGPUNeedsNoDaemon(t *testing.T) {
	r := newRig(t, policy.ModeIsolated, nil)
	if err := r.enf.PrepareGPU(t.Context(), r.uuid); err != nil {
		t.Fatal(err)
	}
	if r.commands() != "" || r.enf.EnvOptions(r.uuid) != (EnvOptions{}) {
		t.Fatalf("isolated GPU got MPS: %q %+v", r.commands(), r.enf.EnvOptions(r.uuid))
	}
	if err := r.enf.PrepareGPU(t.Context(), "GPU-nope"); err == nil {
		t.Fatal("unknown GPU accepted")
	}
}

// killDaemonUnderClient starts a client process on the mps GPU, as its memory shows, and
// SIGKILLs the GPU's daemon under it: the client and the PID the daemon had.
func (r *rig) killDaemonUnderClient(t *testing.T) (*testutil.Task, int) {
	t.Helper()
	client := testutil.StartTask(t, nil)
	if err := r.sim.SetUsage(r.uuid, client.PID(), size.GiB); err != nil {
		t.Fatal(err)
	}
	daemon := r.daemonPID()
	if err := syscall.Kill(daemon, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	return client, daemon
}

func TestMPSDaemonDies(t *testing.T) {
	r := newRig(t, policy.ModeMPS, nil)
	if err := r.enf.PrepareGPU(t.Context(), r.uuid); err != nil {
		t.Fatal(err)
	}
	r.start()
	// With a client on the GPU, a dead daemon is a GPU-wide event and is not restarted.
	client, first := r.killDaemonUnderClient(t)
	r.event("mps died", func(e Event) bool { return e.Kind == EventMPS && e.Stage == "died" })
	st, _ := r.led.State(r.uuid)
	if st.Healthy || st.HealthReason != reasonMPSDied {
		t.Fatalf("GPU health %v %q", st.Healthy, st.HealthReason)
	}
	if n := strings.Count(r.commands(), "daemon "); n != 1 {
		t.Fatalf("restarted under a running client (%d daemons)", n)
	}
	// Once the client is gone the daemon is restarted and the GPU is healthy again.
	client.Stop()
	r.event("mps restarted", func(e Event) bool { return e.Kind == EventMPS && e.Stage == "restarted" })
	testutil.Eventually(t, waitLong, "healthy GPU", func() bool { st, _ := r.led.State(r.uuid); return st.Healthy })
	if pid := r.daemonPID(); pid == 0 || pid == first {
		t.Fatalf("daemon pid %d after restart (was %d)", pid, first)
	}
}

// A task's preparation that finds its daemon dead while a client runs must not start another
// under that client (the health pass's rule): it is refused, the GPU drained, and once the
// client has exited the next preparation restarts the daemon.
func TestPrepareDoesNotReplaceADeadDaemonUnderClients(t *testing.T) {
	r := newRig(t, policy.ModeMPS, nil)
	if err := r.enf.PrepareGPU(t.Context(), r.uuid); err != nil {
		t.Fatal(err)
	}
	client, first := r.killDaemonUnderClient(t)
	testutil.Eventually(t, waitLong, "the daemon dead", func() bool {
		_, running, err := procfs.Running(procfs.Linux(""), first)
		return err == nil && !running
	})
	err := r.enf.PrepareGPU(t.Context(), r.uuid)
	if !errors.Is(err, ErrMPSDied) {
		t.Fatalf("PrepareGPU with a dead daemon and a client: %v, want ErrMPSDied", err)
	}
	if st, _ := r.led.State(r.uuid); st.Healthy || st.HealthReason != reasonMPSDied {
		t.Fatalf("GPU health %v %q, want drained", st.Healthy, st.HealthReason)
	}
	if n := strings.Count(r.commands(), "daemon "); n != 1 {
		t.Fatalf("%d daemons started, want the first only:\n%s", n, r.commands())
	}
	client.Stop()
	testutil.Eventually(t, waitLong, "the client gone from the GPU", func() bool {
		procs, err := r.sim.Processes(t.Context(), r.uuid)
		return err == nil && len(procs) == 0
	})
	if err := r.enf.PrepareGPU(t.Context(), r.uuid); err != nil {
		t.Fatalf("PrepareGPU once the client exited: %v", err)
	}
	if st, _ := r.led.State(r.uuid); !st.Healthy || r.daemonPID() == first {
		t.Fatalf("after the client: healthy %v, daemon %d (was %d): want a restarted daemon", st.Healthy, r.daemonPID(), first)
	}
}

// A Reserve on an mps GPU whose daemon runs asks it once whether it answers (its limit, already
// set to the budget, is not sent again), and reports no "started" event for it; it asked twice.
func TestPrepareARunningDaemonAsksItOnce(t *testing.T) {
	r := newRig(t, policy.ModeMPS, nil)
	if err := r.enf.PrepareGPU(t.Context(), r.uuid); err != nil {
		t.Fatal(err)
	}
	ch, unsub := r.enf.Subscribe()
	defer unsub()
	before := strings.Count(r.commands(), "\n")
	if err := r.enf.PrepareGPU(t.Context(), r.uuid); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(r.commands()), "\n")[before:]
	if len(got) != 1 || !strings.HasPrefix(got[0], "get_server_list") {
		t.Fatalf("control commands of the second PrepareGPU: %q, want one get_server_list", got)
	}
	select {
	case ev := <-ch:
		t.Fatalf("event %+v for a daemon that was already running", ev)
	default:
	}
}

func TestMPSMissingBinary(t *testing.T) {
	r := newRig(t, policy.ModeMPS, func(c *Config) { c.MPS.ControlBinary = "/nonexistent/nvidia-cuda-mps-control" })
	err := r.enf.PrepareGPU(t.Context(), r.uuid)
	if !errors.Is(err, mps.ErrControl) || !strings.Contains(err.Error(), "/nonexistent/nvidia-cuda-mps-control") {
		t.Fatalf("err = %v", err)
	}
}

// The plugin readies an mps GPU in the background while a Reserve readies it too: two
// PrepareGPU calls on one GPU at once start one daemon, both succeed, and (under -race) neither
// reads the daemon's PID while the other sets it.
func TestPrepareGPUConcurrently(t *testing.T) {
	r := newRig(t, policy.ModeMPS, nil)
	ch, unsub := r.enf.Subscribe()
	defer unsub()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { errs[i] = r.enf.PrepareGPU(t.Context(), r.uuid) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("PrepareGPU %d: %v", i, err)
		}
	}
	if n := strings.Count(r.commands(), "daemon "); n != 1 {
		t.Fatalf("%d daemons started for one GPU, want 1:\n%s", n, r.commands())
	}
	// Every report of it carries its PID (the events were sent before PrepareGPU returned).
	started := 0
	for {
		select {
		case ev := <-ch:
			if ev.Kind == EventMPS && ev.Stage == "started" {
				started++
				if len(ev.PIDs) != 1 || ev.PIDs[0] != r.daemonPID() {
					t.Errorf("started event %+v, daemon pid %d", ev, r.daemonPID())
				}
			}
		default:
			if started == 0 {
				t.Fatal("no event reported the daemon started")
			}
			return
		}
	}
}
