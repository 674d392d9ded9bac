package enforcer

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu/simjob"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// neighbour is a well-behaved job: 1 GiB for ~1.5 s, then a deterministic result.
func (r *rig) neighbour(seed string) (*job, ledger.Reservation) {
	res := r.reserve(2*size.GiB, "neighbour")
	return r.run(res, "neighbour", "--peak", "1GiB", "--ramp", "100ms", "--hold", "1500ms", "--seed", seed), res
}

func (j *job) checkResult(t *testing.T, seed int64) {
	t.Helper()
	if code := j.wait(t); code != 0 {
		t.Fatalf("neighbour exit %d; output:\n%s", code, j.out.String())
	}
	b, err := os.ReadFile(j.result)
	if err != nil {
		t.Fatal(err)
	}
	var got simjob.Result
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("neighbour result %q: %v", b, err)
	}
	if want := simjob.ResultFor(seed); !reflect.DeepEqual(got, want) {
		t.Fatalf("neighbour result %+v, want its solo result %+v", got, want)
	}
}

func (r *rig) violation(token string) ledger.Violation {
	r.t.Helper()
	var v ledger.Violation
	testutil.Eventually(r.t, waitLong, "a violation in the ledger", func() bool {
		for _, x := range r.led.Violations() {
			if x.Token == token {
				v = x
				return true
			}
		}
		return false
	})
	return v
}

func TestIsolatedLeakerKilledNeighbourFinishes(t *testing.T) {
	r := newRig(t, policy.ModeIsolated, nil)
	r.start()
	nb, _ := r.neighbour("7")
	res := r.reserve(2*size.GiB, "leaker")
	leak := r.run(res, "leaker", "--peak", "1GiB", "--ramp", "50ms", "--leak-to", "20GiB", "--leak-rate", "8GiB")
	leak.wait(t)
	if sig := leak.killedBy(); sig != syscall.SIGKILL {
		t.Fatalf("leaker ended by %v, want SIGKILL; output:\n%s", sig, leak.out.String())
	}
	v := r.violation(res.Token)
	if v.Action != ActionSIGKILL || v.Mode != policy.ModeIsolated || v.CapBytes != 2*size.GiB {
		t.Fatalf("violation %+v", v)
	}
	// How far past the line a real leaker gets depends on how often a loaded machine lets the
	// watchdog run; TestWatchdogSampleBySample pins the exact peak and times.
	if limit := 2*size.GiB + r.cfg.Allowance; v.PeakBytes <= limit || v.ContainedAt.Before(v.CrossedAt) {
		t.Fatalf("violation %+v: want a peak past cap+allowance %s, contained after it crossed", v, limit)
	}
	if v.Task.JobName != "leaker" || v.Task.Template != "tmpl-leaker" || v.Task.Namespace != "ns-leaker" {
		t.Fatalf("task identity %+v, want it read from the process environment", v.Task)
	}
	nb.checkResult(t, 7)
	if s := r.sent(nb.cmd.Process.Pid); len(s) != 0 {
		t.Fatalf("neighbour was sent %v", s)
	}
}

func TestMPSLeakerFailsInProcess(t *testing.T) {
	r := newRig(t, policy.ModeMPS, nil)
	if err := r.enf.PrepareGPU(t.Context(), r.uuid); err != nil {
		t.Fatal(err)
	}
	r.start()
	nb, _ := r.neighbour("3")
	res := r.reserve(2*size.GiB, "leaker")
	// 1 GiB/s with 20 ms steps: the job spends ~100 ms within 5% of its pinned limit.
	leak := r.run(res, "leaker", "--peak", "1GiB", "--ramp", "50ms", "--leak-to", "20GiB", "--leak-rate", "1GiB")
	if code := leak.wait(t); code != simjob.ExitFail {
		t.Fatalf("leaker exit %d, want %d (out of memory at its MPS limit); output:\n%s", code, simjob.ExitFail, leak.out.String())
	}
	if s := r.sent(leak.cmd.Process.Pid); len(s) != 0 {
		t.Fatalf("the watchdog signalled the leaker (%v): the pinned limit should have stopped it", s)
	}
	nb.checkResult(t, 3)
	// The watchdog names the exit oom-in-process only when a sample caught the leaker within 5%
	// of its limit, which a loaded machine can skip: TestWatchdogSampleBySample covers that
	// rule. Here, what it recorded must be that and nothing harsher.
	checkOOMInProcess(t, r, res.Token)
}

// checkOOMInProcess fails when the watchdog recorded anything but an in-process out-of-memory
// exit under MPS for token.
func checkOOMInProcess(t *testing.T, r *rig, token string) {
	t.Helper()
	for _, v := range r.led.Violations() {
		if v.Token == token && (v.Action != ActionOOMInProcess || v.Mode != policy.ModeMPS) {
			t.Fatalf("violation %+v, want at most an oom-in-process record", v)
		}
	}
}

func TestTaskOfTwoProcessesOverItsSum(t *testing.T) {
	for _, mode := range []policy.Mode{policy.ModeIsolated, policy.ModeMPS} {
		t.Run(string(mode), func(t *testing.T) {
			r := newRig(t, mode, nil)
			r.start()
			res := r.reserve(3*size.GiB, "pair")
			// Each process stays under its own (MPS) limit; together they pass the cap.
			j := r.run(res, "pair", "--procs", "2", "--peak", "2GiB", "--ramp", "200ms", "--hold", "20s")
			j.wait(t)
			v := r.violation(res.Token)
			if v.PeakBytes < 3*size.GiB+2*r.cfg.Allowance {
				t.Fatalf("peak %s is not past cap + 2 allowances", v.PeakBytes)
			}
			want := ActionSIGKILL
			if mode == policy.ModeMPS {
				want = ActionSIGINT // simjob leaves on SIGINT, so no forced stop
				if code := j.cmd.ProcessState.ExitCode(); code != simjob.ExitINT {
					t.Fatalf("exit %d, want %d after SIGINT; output:\n%s", code, simjob.ExitINT, j.out.String())
				}
				// Even an orderly stop of a busy MPS client faulted a neighbour on the H200, so
				// the GPU is drained while the task's clients leave, then healthy again.
				r.event("drained", func(e Event) bool {
					return e.Kind == EventGPUHealth && e.Stage == "unhealthy" && e.Message == reasonStopped
				})
				r.event("healthy again", func(e Event) bool { return e.Kind == EventGPUHealth && e.Stage == "healthy" })
				if st, _ := r.led.State(r.uuid); !st.Healthy {
					t.Fatalf("GPU still unhealthy (%s) after the stopped task's clients left", st.HealthReason)
				}
			}
			if v.Action != want {
				t.Fatalf("action %q, want %q (%s)", v.Action, want, v.Detail)
			}
		})
	}
}

func TestUnmanagedShrinksBudgetAndStop(t *testing.T) {
	r := newRig(t, policy.ModeIsolated, nil)
	before, _ := r.led.State(r.uuid)
	r.start()
	j := r.run(ledger.Reservation{}, "rogue", "--peak", "3GiB", "--hold", "30s")
	ev := r.event("unmanaged", func(e Event) bool { return e.Kind == EventUnmanaged && slices.Contains(e.PIDs, j.cmd.Process.Pid) })
	if ev.GPU != r.uuid {
		t.Fatalf("event %+v", ev)
	}
	testutil.Eventually(t, waitLong, "fewer units", func() bool {
		st, _ := r.led.State(r.uuid)
		return st.UnmanagedBytes >= 3*size.GiB && st.Units <= before.Units-3
	})
	if s := r.sent(j.cmd.Process.Pid); len(s) != 0 {
		t.Fatalf("policy report must not stop it, sent %v", s)
	}
	p := r.led.Policy()
	p.Unmanaged = policy.UnmanagedStop
	if err := r.led.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	j.wait(t)
	if sig := j.killedBy(); sig != syscall.SIGKILL {
		t.Fatalf("unmanaged job ended by %v, want SIGKILL", sig)
	}
	testutil.Eventually(t, waitLong, "units back", func() bool {
		st, _ := r.led.State(r.uuid)
		return st.UnmanagedBytes == 0 && st.Units == before.Units
	})
}

// A new enforcer over the same ledger directory finishes a stop the old one began: here a task
// under MPS that ignores SIGINT, so the stop ends forced and the GPU goes unhealthy until it drains.
func TestRestartMidViolation(t *testing.T) {
	r := newRig(t, policy.ModeMPS, func(c *Config) { c.StopGrace = time.Minute })
	r.start()
	res := r.reserve(2*size.GiB, "stubborn")
	h := r.helper(t, res.Token, "stubborn")
	pid := h.cmd.Process.Pid
	testutil.Eventually(t, waitLong, "the helper to report usage", func() bool { return r.sim.SetUsage(r.uuid, pid, 3*size.GiB) == nil })
	r.event("stopping", func(e Event) bool { return e.Stage == "stopping" && e.Token == res.Token })

	// The plugin restarts: the old enforcer and ledger go, new ones open the same directory.
	r.stop()
	r.led.Close()
	r.openLedger()
	r.cfg.StopGrace = 200 * time.Millisecond
	r.newEnforcer()
	r.start()
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the new enforcer did not stop the violator")
	}
	// A pass that still sees the killed process (on a loaded machine its exit can take longer
	// than a pass) sends SIGKILL again: harmless, so any further signal must be SIGKILL too.
	got := r.sent(pid)
	want := []syscall.Signal{syscall.SIGINT, syscall.SIGINT, syscall.SIGKILL}
	if len(got) < len(want) || !slices.Equal(got[:len(want)], want) || slices.ContainsFunc(got[len(want):], func(s syscall.Signal) bool { return s != syscall.SIGKILL }) {
		t.Fatalf("signals %v, want SIGINT (old), SIGINT then SIGKILL (new), then SIGKILL only", got)
	}
	v := r.violation(res.Token)
	if v.Action != ActionSIGKILL || v.Task.JobName != "stubborn" {
		t.Fatalf("violation %+v", v)
	}
	r.event("forced stop marks the GPU", func(e Event) bool { return e.Kind == EventGPUHealth && e.Stage == "unhealthy" })
	testutil.Eventually(t, waitLong, "GPU healthy once its clients are gone", func() bool {
		st, _ := r.led.State(r.uuid)
		return st.Healthy
	})
}

// Under MPS a single client is left to its pinned limit, but one that raised its own limit past its
// cap is not held by the driver: the watchdog stops it (SIGINT first, which a simulated job obeys).
func TestMPSRaisedLimitIsStopped(t *testing.T) {
	r := newRig(t, policy.ModeMPS, nil)
	r.start()
	res := r.reserve(2*size.GiB, "raiser")
	j := r.runEnv(res, "raiser", []string{EnvMPSMemLimit + "=" + r.uuid + "=10240M"},
		"--peak", "1GiB", "--ramp", "50ms", "--leak-to", "20GiB", "--leak-rate", "4GiB")
	if code := j.wait(t); code != simjob.ExitINT {
		t.Fatalf("exit %d, want %d (stopped by SIGINT); output:\n%s", code, simjob.ExitINT, j.out.String())
	}
	v := r.violation(res.Token)
	if v.Action != ActionSIGINT || v.PeakBytes <= 2*size.GiB+r.cfg.Allowance {
		t.Fatalf("violation %+v", v)
	}
	if got := r.sent(j.cmd.Process.Pid); !slices.Equal(got, []syscall.Signal{syscall.SIGINT}) {
		t.Fatalf("signals %v, want one SIGINT", got)
	}
}

func TestTaskUsageAndLastSample(t *testing.T) {
	r := newRig(t, policy.ModeIsolated, nil)
	r.start()
	res := r.reserve(4*size.GiB, "steady")
	j := r.run(res, "steady", "--peak", "1GiB", "--hold", "800ms")
	testutil.Eventually(t, waitLong, "usage of the task", func() bool {
		b, ok := r.enf.TaskUsage(res.Token)
		return ok && b == size.GiB
	})
	s, ok := r.enf.LastSample(r.uuid)
	if !ok || len(s.Processes) != 1 || s.Processes[0].Token != res.Token || s.Processes[0].Via != viaEnviron ||
		s.Processes[0].PID != j.cmd.Process.Pid || s.Mode != policy.ModeIsolated {
		t.Fatalf("sample %+v", s)
	}
	if code := j.wait(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
	testutil.Eventually(t, waitLong, "usage gone", func() bool { _, ok := r.enf.TaskUsage(res.Token); return !ok })
	if _, ok := r.enf.TaskUsage("no-such-token"); ok {
		t.Fatal("usage for an unknown token")
	}
	// The scan filled the reservation's task from the process's environment.
	got, _ := r.led.Reservation(res.Token)
	if got.Task.JobName != "steady" || got.Task.Template != "tmpl-steady" || got.Task.Namespace != "ns-steady" || got.SeenAt.IsZero() {
		t.Fatalf("reservation task %+v seen %v", got.Task, got.SeenAt)
	}
	if len(r.led.Violations()) != 0 {
		t.Fatalf("a job within its cap was recorded: %+v", r.led.Violations())
	}
}

var fourGPUs = []string{"H100=80GiB", "H100=80GiB", "H100=80GiB", "H100=80GiB"}

// tokenOn is the reservation the watchdog's last sample of gpu ties pid to ("" = unmanaged or
// not on that GPU), and how.
func (r *rig) tokenOn(gpu string, pid int) (tok, via string, seen bool) {
	s, ok := r.enf.LastSample(gpu)
	if !ok {
		return "", "", false
	}
	for _, p := range s.Processes {
		if p.PID == pid {
			return p.Token, p.Via, true
		}
	}
	return "", "", false
}

// A leaker on GPU 2 is stopped (isolated: SIGKILL; mps: its pinned limit for GPU 2) while
// jobs on GPUs 0, 1 and 2 run; every process is tied to its own GPU's reservation and the
// others finish with their solo results, never signalled.
func TestLeakerOnGPU2OthersUntouched(t *testing.T) {
	for _, tc := range []struct {
		mode     policy.Mode
		action   string
		exit     int
		signaled syscall.Signal
	}{
		{policy.ModeIsolated, ActionSIGKILL, -1, syscall.SIGKILL},
		{policy.ModeMPS, ActionOOMInProcess, simjob.ExitFail, 0},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			r := newRigGPUs(t, tc.mode, fourGPUs, nil)
			if tc.mode == policy.ModeMPS {
				for _, u := range r.uuids {
					if err := r.enf.PrepareGPU(t.Context(), u); err != nil {
						t.Fatal(err)
					}
				}
			}
			r.start()
			type placed struct {
				j    *job
				res  ledger.Reservation
				gpu  int
				seed int64
			}
			var good []placed
			for i, g := range []int{0, 1, 2} {
				res := r.reserveOn(r.uuids[g], 2*size.GiB, "neighbour")
				seed := int64(10 + i)
				j := r.runTask([]ledger.Reservation{res}, "neighbour", nil, "--peak", "1GiB", "--ramp", "100ms", "--hold", "2500ms",
					"--seed", strconv.FormatInt(seed, 10))
				good = append(good, placed{j, res, g, seed})
			}
			lres := r.reserveOn(r.uuids[2], 2*size.GiB, "leaker")
			// 1 GiB/s after a 1s hold: every process is on its GPU for a while before the leak.
			leak := r.runTask([]ledger.Reservation{lres}, "leaker", nil, "--peak", "1GiB", "--ramp", "50ms", "--hold", "1s",
				"--leak-to", "20GiB", "--leak-rate", "1GiB")

			all := append(good, placed{leak, lres, 2, 0})
			testutil.Eventually(t, waitLong, "every process tied to its own GPU's reservation", func() bool {
				for _, p := range all {
					for g, u := range r.uuids {
						tok, via, seen := r.tokenOn(u, p.j.cmd.Process.Pid)
						if g == p.gpu && (!seen || tok != p.res.Token || via != viaEnviron) {
							return false
						}
						if g != p.gpu && seen {
							t.Fatalf("pid %d of GPU %d seen on GPU %d", p.j.cmd.Process.Pid, p.gpu, g)
						}
					}
				}
				return true
			})

			code := leak.wait(t)
			if tc.mode == policy.ModeMPS && code != tc.exit {
				t.Fatalf("leaker exit %d, want %d; output:\n%s", code, tc.exit, leak.out.String())
			}
			if sig := leak.killedBy(); sig != tc.signaled {
				t.Fatalf("leaker ended by signal %v, want %v; output:\n%s", sig, tc.signaled, leak.out.String())
			}
			if tc.mode == policy.ModeMPS {
				// The pinned limit stopped it inside; whether a sample saw it near the limit
				// depends on the machine's load (TestWatchdogSampleBySample has the rule).
				checkOOMInProcess(t, r, lres.Token)
			} else if v := r.violation(lres.Token); v.GPU != r.uuids[2] || v.Action != tc.action || v.Task.JobName != "leaker" {
				t.Fatalf("violation %+v, want %s on GPU 2 (%s) for the leaker", v, tc.action, r.uuids[2])
			}
			for _, p := range good {
				p.j.checkResult(t, p.seed)
				if s := r.sent(p.j.cmd.Process.Pid); len(s) != 0 {
					t.Errorf("the job on GPU %d was sent %v", p.gpu, s)
				}
			}
			for _, v := range r.led.Violations() {
				if v.Token != lres.Token {
					t.Errorf("violation %+v of a job other than the leaker", v)
				}
			}
			for g, u := range r.uuids {
				if st, _ := r.led.State(u); !st.Healthy || st.UnmanagedBytes != 0 {
					t.Errorf("GPU %d: healthy %v (%s), unmanaged %s", g, st.Healthy, st.HealthReason, st.UnmanagedBytes)
				}
			}
		})
	}
}

// A task of two device requests holds a reservation on GPU 1 and one on GPU 2. Nomad merges the
// two environments and the later one wins: the process carries GPU 2's GPUFRAC_RESERVATION and
// CUDA_VISIBLE_DEVICES. If it uses GPU 1 too (it set CUDA_VISIBLE_DEVICES itself), its memory
// there must count against its GPU 1 reservation, not as unmanaged use; that reservation must
// not expire while the task lives; and an overshoot on GPU 1 is GPU 1's violation.
func TestTaskWithReservationsOnTwoGPUs(t *testing.T) {
	r := newRigGPUs(t, policy.ModeIsolated, fourGPUs, nil)
	r.led.Close()
	led, err := ledger.Open(r.dir, ledger.Options{Grace: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.led = led
	// Were the task's memory on GPU 1 unmanaged, this would stop it.
	p := testPolicy(policy.ModeIsolated)
	p.Unmanaged = policy.UnmanagedStop
	if err := r.led.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	r.newEnforcer()
	r.start()

	g1, g2 := r.uuids[1], r.uuids[2]
	resA := r.reserveOn(g1, 2*size.GiB, "two-gpu")
	resB := r.reserveOn(g2, 4*size.GiB, "two-gpu")
	j := r.runTask([]ledger.Reservation{resA, resB}, "two-gpu", nil, "--peak", "1GiB", "--ramp", "50ms", "--hold", "20s")
	pid := j.cmd.Process.Pid
	if err := r.sim.SetUsage(g1, pid, size.GiB); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitLong, "the task's process tied to A on GPU 1 and to B on GPU 2", func() bool {
		tokA, viaA, _ := r.tokenOn(g1, pid)
		tokB, viaB, _ := r.tokenOn(g2, pid)
		return tokA == resA.Token && viaA == viaEnviron && tokB == resB.Token && viaB == viaEnviron
	})
	if u, ok := r.enf.TaskUsage(resA.Token); !ok || u != size.GiB {
		t.Errorf("TaskUsage(A) = %s, %v: want the 1GiB on GPU 1", u, ok)
	}
	// Three graces later both reservations live: the process carries both tokens. A scan seen
	// after that long proves it, however slowly the machine runs the scans.
	past := time.Now().Add(3 * 400 * time.Millisecond)
	testutil.Eventually(t, waitLong, "a token scan three graces on", func() bool {
		a, okA := r.led.Reservation(resA.Token)
		b, okB := r.led.Reservation(resB.Token)
		if !okA || !okB {
			t.Fatalf("reservations: A held %v, B held %v; want both kept by the live task", okA, okB)
		}
		return a.SeenAt.After(past) && b.SeenAt.After(past)
	})
	if st, _ := r.led.State(g1); st.UnmanagedBytes != 0 {
		t.Fatalf("GPU 1 counts %s of the task as unmanaged", st.UnmanagedBytes)
	}
	if s := r.sent(pid); len(s) != 0 {
		t.Fatalf("the task was sent %v while inside both caps", s)
	}
	// Past A's cap on GPU 1, far inside B's on GPU 2: GPU 1's watchdog stops it, as A's violation.
	if err := r.sim.SetUsage(g1, pid, 3*size.GiB); err != nil {
		t.Fatal(err)
	}
	j.wait(t)
	if sig := j.killedBy(); sig != syscall.SIGKILL {
		t.Fatalf("task ended by %v, want SIGKILL", sig)
	}
	v := r.violation(resA.Token)
	if v.GPU != g1 || v.Action != ActionSIGKILL || v.CapBytes != 2*size.GiB {
		t.Fatalf("violation %+v, want A's on GPU 1", v)
	}
	for _, v := range r.led.Violations() {
		if v.Token == resB.Token {
			t.Errorf("B was charged with a violation too: %+v", v)
		}
	}
}
