package nomad_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpufrac/gpufrac/acctest/nomad/emulator"
	"github.com/gpufrac/gpufrac/controller"
	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu/simjob"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/internal/varserver"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// restartDelay stands for the restart policy's delay (Nomad's default is 15 s): the time the
// controller has to act before Nomad starts the task again in place. A short one here makes the
// race harder than in a fleet.
const restartDelay = time.Second

// TestRestartInPlaceAfterABrokenCap is what a task that broke its cap sees when Nomad's restart
// policy starts it again inside its allocation. Reserve is not called on such a restart, so the
// task comes back with the same token and units and would break them again for as long as the
// allocation lives. With the controller running, the ladder takes over before the restart delay
// runs out: the job is re-registered with more units (policy.Policy.Next, as in gpufrac run) and
// the allocation is stopped, so Nomad replaces it instead of restarting it in place. It must
// restart in place at most once; the test logs how long the task burned.
func TestRestartInPlaceAfterABrokenCap(t *testing.T) {
	// Two ways a task holds memory its fence never charged, as measured on the H200: a process
	// that dropped its token, and an allocator pool that keeps more than it was charged. Both
	// reach about 5 GiB on 3 units.
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"outside the fence", []string{"--peak", "1GiB", "--outside-fence", "4GiB"}},
		{"pool slack", []string{"--peak", "3GiB", "--pool-slack", "2GiB"}},
	} {
		t.Run(tc.name, func(t *testing.T) { restartInPlace(t, tc.args) })
	}
}

func restartInPlace(t *testing.T, leak []string) {
	vs := nomadAPI(t)
	dir := t.TempDir()
	_, ids, res := reservePublishing(t, vs, dir, "")
	const allocID = "7a1c0a9b-4d2e-4f3a-9b8c-7d6e5f4a3b2d"
	putTrainAlloc(vs, allocID, ids)
	uuid := res.GetEnvs()[enforcer.EnvGPUUUID]

	runController(t, vs)

	stopped := func() bool {
		a, ok := vs.Alloc(allocID)
		return ok && a.DesiredStatus == api.AllocDesiredStatusStop
	}
	// Nomad's client: the task, started again with the environment Reserve returned once,
	// restartDelay after each exit, until its allocation is stopped. Every run holds memory its
	// fence never charged past its 3 GiB, the same way.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	identified := filepath.Join(dir, "identified")
	runs := 0
	var firstExit time.Time
	for !stopped() {
		if runs == 4 {
			t.Fatalf("the task was restarted in place %d times and its allocation is still running", runs-1)
		}
		task := exec.Command(exe, append([]string{"--dir", filepath.Join(dir, "simgpu"), "--gpu", uuid, "--hold", "60s",
			"--after", identified}, leak...)...)
		task.Env = append(nomadEnv(allocID), simjob.EnvChild+"=1")
		for k, v := range res.GetEnvs() {
			task.Env = append(task.Env, k+"="+v)
		}
		exited := testutil.Start(t, task).Exited()
		runs++
		if runs == 1 {
			// The enforcer ties the reservation to its allocation at its next process scan; the
			// task takes its memory once it has.
			waitAllocLearnt(t, dir, allocID)
			if err := os.WriteFile(identified, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Fatal("the enforcer did not stop the task that broke its cap")
		}
		if runs == 1 {
			firstExit = time.Now()
		}
		for wait := time.Now().Add(restartDelay); time.Now().Before(wait) && !stopped(); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	burned := time.Since(firstExit)
	t.Logf("the task ran %d time(s) in its allocation; the ladder took over %.2fs after its first kill", runs, burned.Seconds())
	if runs > 2 {
		t.Errorf("the task was restarted in place %d times, want at most once", runs-1)
	}
	j, _ := vs.Job("default", "train")
	// It reached about 5 GiB.
	got := *j.TaskGroups[0].Tasks[0].Resources.Devices[0].Count
	low, high := uint64(policy.Default().Units(policy.Default().Cap(4*size.GiB))), uint64(policy.Default().Units(policy.Default().Cap(5*size.GiB)))
	if *j.Version != 1 || got < low || got > high || got <= 3 {
		t.Errorf("job version %d asks for %d units, want version 1 with %d to %d (the cap formula over what it reached)", *j.Version, got, low, high)
	}
	if j.Meta[controller.MetaAttempt+"g.main"] != "2" {
		t.Errorf("job meta %v: want attempt 2 recorded", j.Meta)
	}
}

// reservePublishing starts the plugin on one simulated H100 with state in dir, publishing
// violations to vs with the plugin's token (extra: more configuration), and reserves 3 units
// (ids).
func reservePublishing(t *testing.T, vs *varserver.Server, dir, extra string) (*emulator.Client, []string, *devicepb.ContainerReservation) {
	t.Helper()
	c := start(t, agentConfig(dir, `"H100=80GiB"`, extra+`
  violations {
    address = "`+vs.URL()+`"
    token   = "plugin-token"
  }`))
	ids, res := place(t, c, 3)
	return c, ids, res
}
