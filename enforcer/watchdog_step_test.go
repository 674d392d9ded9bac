package enforcer

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// helperProc is a process that holds a reservation's token and does nothing: the test sets the
// GPU memory the simulated GPU shows for it, so nothing depends on how fast a real job runs.
type helperProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (r *rig) helper(t *testing.T, token, name string) *helperProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envTestChild+"=stubborn", EnvReservation+"="+token, envNomadJob+"="+name)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("helper said %q, %v", line, err)
	}
	h := &helperProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(h.done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-h.done })
	return h
}

func (h *helperProc) use(t *testing.T, r *rig, b size.Bytes) {
	t.Helper()
	if err := r.sim.SetUsage(r.uuid, h.cmd.Process.Pid, b); err != nil {
		t.Fatal(err)
	}
}

// exit ends the helper as a job that failed inside itself would, and waits until it is gone.
func (h *helperProc) exit(t *testing.T) {
	t.Helper()
	_ = h.cmd.Process.Kill()
	<-h.done
}

// The watchdog's decisions sample by sample, over a clock of the test's and GPU usage the test
// sets: what the process-level tests cannot pin down on a loaded machine (how far past its cap a
// leaker got, how long its containment took, whether an MPS task was seen near its limit) is
// exact here.
func TestWatchdogSampleBySample(t *testing.T) {
	cap2 := 2 * size.GiB
	for _, tc := range []struct {
		name    string
		mode    policy.Mode
		usage   []size.Bytes // one per sample, while the task lives
		stopped bool         // the watchdog ends the task at its last sample (else it exits itself)
		signals []syscall.Signal
		action  string // of the violation recorded; "" = none
		peak    size.Bytes
		cross   int // the sample at which the violation began
	}{
		{name: "isolated: killed at the first sample past cap and allowance", mode: policy.ModeIsolated,
			usage: []size.Bytes{size.GiB, cap2 + 256*size.MiB, cap2 + 300*size.MiB}, stopped: true,
			signals: []syscall.Signal{syscall.SIGKILL}, action: ActionSIGKILL, peak: cap2 + 300*size.MiB, cross: 2},
		{name: "isolated: at cap and allowance is inside", mode: policy.ModeIsolated,
			usage: []size.Bytes{size.GiB, cap2 + 256*size.MiB}},
		{name: "mps: seen within 5% of its cap, then gone: out of memory in the process", mode: policy.ModeMPS,
			usage: []size.Bytes{size.GiB, cap2 - 50*size.MiB}, action: ActionOOMInProcess, peak: cap2 - 50*size.MiB, cross: 1},
		{name: "mps: gone far below its cap: an ordinary exit", mode: policy.ModeMPS,
			usage: []size.Bytes{size.GiB, cap2 / 2}},
		{name: "mps: near its cap, then back under it: not its limit", mode: policy.ModeMPS,
			usage: []size.Bytes{cap2 - 10*size.MiB, size.GiB}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := testutil.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			r := newRig(t, tc.mode, func(c *Config) { c.Now = clock.Now })
			res := r.reserve(cap2, "task")
			h := r.helper(t, res.Token, "task")
			for _, b := range tc.usage {
				h.use(t, r, b)
				r.enf.Tick(t.Context())
				clock.Advance(10 * time.Millisecond)
			}
			if tc.stopped {
				select {
				case <-h.done:
				case <-time.After(10 * time.Second):
					t.Fatal("the watchdog did not stop the task")
				}
			} else {
				h.exit(t)
			}
			r.enf.Tick(t.Context())
			if got := r.sent(h.cmd.Process.Pid); !slices.Equal(got, tc.signals) {
				t.Fatalf("signals %v, want %v", got, tc.signals)
			}
			vs := r.led.Violations()
			if tc.action == "" {
				if len(vs) != 0 {
					t.Fatalf("violations %+v, want none", vs)
				}
				return
			}
			if len(vs) != 1 {
				t.Fatalf("violations %+v, want one", vs)
			}
			v := vs[0]
			// Crossed at the first sample past the line, contained at the first sample without it.
			wantCrossed := clock.Now().Add(-time.Duration(len(tc.usage)-tc.cross) * 10 * time.Millisecond)
			if v.Action != tc.action || v.Token != res.Token || v.PeakBytes != tc.peak || v.CapBytes != cap2 ||
				!v.CrossedAt.Equal(wantCrossed) || !v.ContainedAt.Equal(clock.Now()) || v.Task.JobName != "task" {
				t.Fatalf("violation %+v: want %s, peak %s, crossed at %s, contained at %s", v, tc.action, tc.peak, wantCrossed, clock.Now())
			}
		})
	}
}

// When NVML cannot list a GPU's processes the watchdog cannot hold tasks there to their caps:
// the GPU goes unhealthy (the ledger admits nothing on it) and says why, and it comes back as
// soon as the GPU can be read again.
func TestUnreadableGPUAdmitsNothingUntilItReads(t *testing.T) {
	r := newRig(t, policy.ModeIsolated, nil)
	ch, unsub := r.enf.Subscribe()
	defer unsub()
	r.enf.Tick(t.Context())
	if err := r.sim.SetProcessesFault(r.uuid, "NVML_ERROR_UNKNOWN"); err != nil {
		t.Fatal(err)
	}
	r.enf.Tick(t.Context())
	st, err := r.led.State(r.uuid)
	if err != nil || st.Healthy || st.HealthReason != reasonUnreadable {
		t.Fatalf("GPU after an NVML error: healthy %v (%q), %v; want unhealthy: %s", st.Healthy, st.HealthReason, err, reasonUnreadable)
	}
	var de *ledger.DeniedError
	if _, err := r.led.ReserveBytes(r.uuid, size.GiB, ledger.Task{JobName: "x"}); !errors.As(err, &de) || de.Reason != ledger.ReasonUnhealthy {
		t.Fatalf("ReserveBytes on the unreadable GPU: %v, want a %s denial", err, ledger.ReasonUnhealthy)
	}
	if ev := <-ch; ev.Kind != EventGPUHealth || ev.Stage != "unhealthy" || ev.Message != reasonUnreadable {
		t.Fatalf("event %+v, want the GPU reported unhealthy", ev)
	}
	if !strings.Contains(r.logs.String(), "NVML_ERROR_UNKNOWN") {
		t.Errorf("the log does not carry NVML's error:\n%s", r.logs.String())
	}
	if err := r.sim.SetProcessesFault(r.uuid, ""); err != nil {
		t.Fatal(err)
	}
	r.enf.Tick(t.Context())
	if st, _ := r.led.State(r.uuid); !st.Healthy {
		t.Fatalf("GPU still unhealthy (%s) once it reads again", st.HealthReason)
	}
	if _, err := r.led.ReserveBytes(r.uuid, size.GiB, ledger.Task{JobName: "x"}); err != nil {
		t.Fatalf("ReserveBytes after recovery: %v", err)
	}
}

// A GPU this enforcer marked for a dead MPS daemon keeps that mark through an unreadable stretch:
// the unreadable mark is set only on a GPU with no mark, in one step with the check, and its heal
// then leaves the daemon's mark alone. (The MPS check runs beside the watchdog; between a check
// and a mark made apart, its mark was replaced and then healed with the unreadable one.)
func TestUnreadableGPUKeepsAnEarlierMark(t *testing.T) {
	r := newRig(t, policy.ModeIsolated, nil)
	r.enf.Tick(t.Context())
	r.enf.setUnhealthy(r.uuid, reasonMPSDied)
	if err := r.sim.SetProcessesFault(r.uuid, "NVML_ERROR_UNKNOWN"); err != nil {
		t.Fatal(err)
	}
	r.enf.Tick(t.Context())
	if err := r.sim.SetProcessesFault(r.uuid, ""); err != nil {
		t.Fatal(err)
	}
	r.enf.Tick(t.Context())
	if st, _ := r.led.State(r.uuid); st.Healthy || st.HealthReason != reasonMPSDied {
		t.Fatalf("GPU after an unreadable stretch: healthy %v (%q), want still drained: %s", st.Healthy, st.HealthReason, reasonMPSDied)
	}
}
