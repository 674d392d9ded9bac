package simjob_test

import (
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/gpu/simjob"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/size"
)

// --outside-fence and --pool-slack hold memory NVML counts for the job but the fence never
// charged: the simulated GPU sees the job's use plus that, the fence table its use alone.
func TestMemoryTheFenceDoesNotSee(t *testing.T) {
	const fenced = 4*size.GiB - 500*size.MiB // the peak less the context, which no fenced call takes
	for _, tc := range []struct {
		name    string
		args    []string
		visible size.Bytes // what NVML shows at the hold
		charged size.Bytes // what the fence charged (all but the 500MiB context)
	}{
		{"outside the fence", []string{"--outside-fence", "3GiB"}, 7 * size.GiB, fenced},
		{"pool slack", []string{"--pool-slack", "1GiB"}, 5 * size.GiB, fenced},
		{"pool slack is at most the fenced use", []string{"--pool-slack", "10GiB"}, 4*size.GiB + fenced, fenced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, uuid := newSim(t)
			dir := t.TempDir()
			table, err := fence.Create(dir, uuid, 80*size.GiB, 78*size.GiB)
			if err != nil {
				t.Skipf("no fence here: %v", err)
			}
			t.Cleanup(func() { table.Close() })
			const token = "0123456789abcdef0123456789abcdef"
			if err := table.SetTasks([]fence.Task{{Token: token, Cap: 20 * size.GiB}}, 78*size.GiB); err != nil {
				t.Fatal(err)
			}
			env := []string{fence.EnvDir + "=" + dir, "GPUFRAC_GPU_UUID=" + uuid, "GPUFRAC_RESERVATION=" + token}
			r := start(t, env, append([]string{"--dir", s.Dir(), "--gpu", uuid, "--context", "500MiB", "--peak", "4GiB",
				"--ramp", "100ms", "--hold", "30s"}, tc.args...)...)
			pid := r.cmd.Process.Pid
			var seen size.Bytes
			testutil.Eventually(t, waitLong, "the job to hold its peak and what the fence does not see", func() bool {
				for _, p := range procs(t, s, uuid) {
					if p.PID == pid {
						seen = p.UsedBytes
					}
				}
				if seen > tc.visible {
					t.Fatalf("NVML sees %s, more than %s", seen, tc.visible)
				}
				return seen == tc.visible
			})
			snap, err := table.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			// The fence charges in its own granules: a little over the bytes asked.
			if u, ok := snap.Task(token); !ok || u.Used < tc.charged || u.Used > tc.charged+64*size.MiB {
				t.Errorf("the fence charged %s (task seen %v), want %s: the unfenced memory must not be charged", u.Used, ok, tc.charged)
			}
			r.cmd.Process.Kill()
			if code := r.wait(t); code == simjob.ExitOK {
				t.Errorf("a killed job exited 0")
			}
		})
	}
}
