package node_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/node/nodetest"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// The node's own answer to every case of the table both front ends are held to, with the
// reason each refusal gives.
func TestAdmitTable(t *testing.T) {
	nodetest.Run(t, func(t *testing.T, c nodetest.Case, s nodetest.Setup) (ledger.Reservation, bool, error) {
		a, err := s.Node.Admit(context.Background(), node.Request{GPU: nodetest.GPU, Cap: c.Cap, Borrow: true,
			Task: ledger.Task{JobName: "j", TaskName: "j"}})
		return a.Reservation, err == nil, err
	})
}

// A task that may not borrow gets no limit, whatever the node's rule.
func TestAdmitWithoutBorrowing(t *testing.T) {
	s := nodetest.Cases()[0].Setup(t)
	a, err := s.Node.Admit(context.Background(), node.Request{GPU: nodetest.GPU, Cap: 4 * size.GiB})
	if err != nil {
		t.Fatal(err)
	}
	if a.Reservation.LimitBytes != 0 {
		t.Fatalf("limit %s for a task that may not borrow", a.Reservation.LimitBytes)
	}
}

// dirs is an enforcer whose fence and MPS daemon live at fixed paths.
type dirs struct{ synced []ledger.GPUState }

func (d *dirs) PrepareGPU(context.Context, string) error { return nil }
func (d *dirs) EnvOptions(string) enforcer.EnvOptions {
	return enforcer.EnvOptions{FenceDir: "/f/tables", FenceLibrary: "/f/lib/libgpufrac-fence.so", MPSPipeDir: "/m/pipe", MPSLogDir: "/m/log"}
}
func (d *dirs) SyncFence(st ledger.GPUState) error { d.synced = append(d.synced, st); return nil }
func (d *dirs) SyncFenceOr(st ledger.GPUState, _ func(error) error) error {
	return d.SyncFence(st)
}
func (d *dirs) FenceUse(string) (size.Bytes, bool)       { return 0, false }
func (d *dirs) FenceWaiters(string) ([]string, []string) { return nil, nil }
func (d *dirs) Fenced() bool                             { return true }

// A task gets the fence's directory read-only with its own accounting directory writable on
// top, its own lock directory writable, the control copies and its library read-only as mounts, the MPS pipe
// in mps mode only, and an environment that names them; a probe (Alone) no MPS settings; and
// an attempt with no cap no fence.
func TestAdmitEnvAndMounts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   policy.Mode
		req    node.Request
		mounts []string // task paths, ro marked; "own" is the task's accounting directory, "live" its lock directory
		has    []string
		lacks  []string
	}{
		{"isolated", policy.ModeIsolated, node.Request{}, []string{"/f/tables ro", "own", "live", "/f/tables-caps ro", "/f/lib ro"},
			[]string{"LD_PRELOAD", "GPUFRAC_RESERVATION", "NVIDIA_VISIBLE_DEVICES"}, []string{"CUDA_MPS_PIPE_DIRECTORY"}},
		{"mps", policy.ModeMPS, node.Request{}, []string{"/m/pipe", "/f/tables ro", "own", "live", "/f/tables-caps ro", "/f/lib ro"},
			[]string{"CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"}, nil},
		{"mps, alone", policy.ModeMPS, node.Request{Alone: true}, []string{"/f/tables ro", "own", "live", "/f/tables-caps ro", "/f/lib ro"},
			[]string{"LD_PRELOAD"}, []string{"CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"}},
		{"unfenced", policy.ModeIsolated, node.Request{Unfenced: true}, nil,
			[]string{"GPUFRAC_RESERVATION"}, []string{"LD_PRELOAD", "GPUFRAC_FENCE_DIR"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := nodetest.Cases()[0].Setup(t)
			if err := s.Ledger.SetMode(nodetest.GPU, tc.mode); err != nil {
				t.Fatal(err)
			}
			enf := &dirs{}
			n := node.New(s.Ledger, enf, node.Config{DockerRuntime: true})
			req := tc.req
			req.GPU, req.Cap = nodetest.GPU, 4*size.GiB
			a, err := n.Admit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range a.Mounts {
				p := m.TaskPath
				if m.HostPath != m.TaskPath {
					t.Fatalf("mount %+v: the task sees another path than the host's", m)
				}
				if m.ReadOnly {
					p += " ro"
				}
				got = append(got, filepath.ToSlash(p))
			}
			want := slices.Clone(tc.mounts)
			if i := slices.Index(want, "own"); i >= 0 {
				want[i] = filepath.ToSlash(fence.AccountDir("/f/tables", a.Reservation.Token))
			}
			if i := slices.Index(want, "live"); i >= 0 {
				want[i] = filepath.ToSlash(fence.LiveDir("/f/tables", a.Reservation.Token))
			}
			if !slices.Equal(got, want) {
				t.Fatalf("mounts %v, want %v", got, want)
			}
			for _, k := range tc.has {
				if a.Env[k] == "" {
					t.Fatalf("environment lacks %s: %v", k, a.Env)
				}
			}
			for _, k := range tc.lacks {
				if v, ok := a.Env[k]; ok {
					t.Fatalf("environment has %s=%s", k, v)
				}
			}
			if len(enf.synced) != 1 || len(enf.synced[0].Reservations) != 1 {
				t.Fatalf("fence tables written %d times, want once with the task in it", len(enf.synced))
			}
		})
	}
}

// Release ends the reservation and writes the GPU's table at once, without the task.
func TestReleaseWritesTheFence(t *testing.T) {
	s := nodetest.Cases()[0].Setup(t)
	enf := &dirs{}
	n := node.New(s.Ledger, enf, node.Config{})
	a, err := n.Admit(context.Background(), node.Request{GPU: nodetest.GPU, Cap: 4 * size.GiB})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Release(a.Reservation.Token, "done"); err != nil {
		t.Fatal(err)
	}
	if len(enf.synced) != 2 || len(enf.synced[1].Reservations) != 0 {
		t.Fatalf("tables written %d times; want the release to write one without the task", len(enf.synced))
	}
	if err := n.Release(a.Reservation.Token, "again"); !errors.Is(err, ledger.ErrNoReservation) {
		t.Fatalf("a second release: %v, want ErrNoReservation", err)
	}
}

// One default for both front ends, and the same decision from the same facts.
func TestPlanBorrowing(t *testing.T) {
	for _, tc := range []struct {
		asked  string
		fenced bool
		mode   policy.Mode
		offWhy string
		rule   string
		note   string
	}{
		{"", true, policy.ModeIsolated, "", node.BorrowWait, "waits up to 5m0s"},
		{node.BorrowAuto, true, "", "", node.BorrowWait, "borrowing: on"},
		{node.DefaultBorrow, false, policy.ModeIsolated, "", node.BorrowOff, "the allocation fence is off"},
		{node.BorrowNow, true, policy.ModeIsolated, "", node.BorrowNow, "fails inside the job"},
		{node.BorrowLend, true, policy.ModeIsolated, "", node.BorrowLend, "lending"},
		{node.BorrowAuto, true, policy.ModeMPS, "", node.BorrowOff, "mps mode"},
		{node.BorrowWait, true, policy.ModeMPS, "", node.BorrowWait, "on under mps, asked for"},
		{node.BorrowNow, true, policy.ModeMPS, "", node.BorrowNow, "fails inside the job"},
		{node.BorrowLend, true, policy.ModeMPS, "", node.BorrowOff, "lend stops borrowers"},
		{node.BorrowWait, false, policy.ModeMPS, "", node.BorrowOff, "the allocation fence is off"},
		{node.BorrowWait, true, policy.ModeIsolated, "the static arm", node.BorrowOff, "the static arm"},
		{node.BorrowOff, true, policy.ModeIsolated, "", node.BorrowOff, "asked for"},
	} {
		b := node.PlanBorrowing(tc.asked, tc.fenced, tc.mode, 0, tc.offWhy)
		if b.Rule != tc.rule || !strings.Contains(b.Note, tc.note) || b.On() != (tc.rule != node.BorrowOff) {
			t.Errorf("PlanBorrowing(%q, fenced %v, %q, %q) = %+v, want rule %s and a note saying %q", tc.asked, tc.fenced, tc.mode, tc.offWhy, b, tc.rule, tc.note)
		}
		if b.On() && tc.rule != node.BorrowNow && b.Wait != node.DefaultBorrowWait {
			t.Errorf("%q: wait %s, want the default %s", tc.asked, b.Wait, node.DefaultBorrowWait)
		}
		if b.MPS != (b.On() && tc.mode == policy.ModeMPS) {
			t.Errorf("PlanBorrowing(%q, %q): MPS %v, want it only where it borrows under mps", tc.asked, tc.mode, b.MPS)
		}
	}
	for _, bad := range []string{"always", "Wait"} {
		if err := node.CheckBorrow(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("CheckBorrow(%q) = %v, want an error naming it", bad, err)
		}
	}
}

// Open assembles a whole node on the simulated backend: the GPUs in the ledger, the enforcer
// and its watchdog, and Close gives everything up (the ledger can be opened again).
func TestOpenStartClose(t *testing.T) {
	sim, devs := testutil.NewSim(t, "H100=80GiB", "H100=80GiB")
	dir := t.TempDir()
	n, err := node.Open(context.Background(), node.Options{Backend: sim, StateDir: dir, Hold: true, Policy: policy.Default(), Enforce: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Devices) != len(devs) || len(n.Ledger().States()) != 2 || n.Enforcer() == nil || n.Borrows() {
		t.Fatalf("opened %d devices, %d GPUs in the ledger, enforcer %v, borrows %v", len(n.Devices), len(n.Ledger().States()), n.Enforcer(), n.Borrows())
	}
	a, err := n.Admit(context.Background(), node.Request{GPU: devs[1].UUID, Cap: 10 * size.GiB})
	if err != nil {
		t.Fatal(err)
	}
	if h := a.Reservation.Holder; h == nil || !node.HolderAlive(*h) {
		t.Fatalf("holder %v: want this live process", h)
	}
	n.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := ledger.Open(dir, ledger.Options{})
	if err != nil {
		t.Fatalf("the ledger stayed locked after Close: %v", err)
	}
	defer again.Close()
	if len(again.Reservations()) != 1 {
		t.Fatalf("reservations after Close: %d, want the admitted one kept", len(again.Reservations()))
	}
}

// EnvLater admits without building what the task needs (gpufrac run builds it at the start);
// with an enforcer the fence's table still takes the cap at admission.
func TestAdmitEnvLater(t *testing.T) {
	for _, fenced := range []bool{false, true} {
		s := nodetest.Cases()[0].Setup(t)
		enf := &dirs{}
		var e node.Enforcer
		if fenced {
			e = enf
		}
		n := node.New(s.Ledger, e, node.Config{})
		a, err := n.Admit(context.Background(), node.Request{GPU: nodetest.GPU, Cap: 4 * size.GiB, EnvLater: true})
		if err != nil {
			t.Fatal(err)
		}
		if a.Reservation.Token == "" || a.Env != nil || a.Mounts != nil {
			t.Fatalf("fenced %v: reservation %q, env %v, mounts %v: want a reservation and nothing built", fenced, a.Reservation.Token, a.Env, a.Mounts)
		}
		if fenced && len(enf.synced) != 1 {
			t.Fatalf("the fence's table was written %d times at admission, want once", len(enf.synced))
		}
		env, err := n.Env(a.Reservation, false)
		if err != nil || env["GPUFRAC_RESERVATION"] != a.Reservation.Token {
			t.Fatalf("the environment built later: %v, %v", env, err)
		}
	}
}
