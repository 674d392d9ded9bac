package enforcer

import (
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
