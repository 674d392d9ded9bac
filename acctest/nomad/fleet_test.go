package nomad_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpufrac/gpufrac/controller"
	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/gpufrac/gpufrac/ledger"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/violations"
	"github.com/gpufrac/gpufrac/size"
)

// TestEscalationLoopEndToEnd is the fleet's "breaks its cap, runs again on a whole GPU": the
// emulated agent launches the plugin, a task reserves 3 units and leaks, the enforcer stops it,
// the plugin publishes the violation (with the guide's ACL policy for the plugin), the
// controller re-registers the job with the ladder's larger guarantee (the cap formula over the
// 5 GiB it reached), and the next Reserve gets those units.
func TestEscalationLoopEndToEnd(t *testing.T) {
	vs := nomadAPI(t)

	dir := t.TempDir()
	port := testutil.FreePort(t)
	c, ids, res := reservePublishing(t, vs, dir, `metrics_addr = ":`+port+`"`)
	token := res.GetEnvs()[enforcer.EnvReservation]

	const allocID = "5e1c0a9b-4d2e-4f3a-9b8c-7d6e5f4a3b2c"
	putTrainAlloc(vs, allocID, ids)

	// The task: a real process with the reservation's environment and Nomad's, leaking past
	// its 3 GiB cap on the simulated GPU.
	task := testutil.StartTask(t, res.GetEnvs(), nomadEnv(allocID)...)
	waitAllocLearnt(t, dir, allocID)
	uuid := res.GetEnvs()[enforcer.EnvGPUUUID]
	if err := simAt(t, dir).SetUsage(uuid, task.PID(), 5*size.GiB); err != nil {
		t.Fatal(err)
	}
	select {
	case <-task.Exited():
	case <-time.After(30 * time.Second):
		t.Fatal("the enforcer did not stop the task that broke its cap")
	}

	runController(t, vs)

	var raised uint64
	deadline := time.Now().Add(30 * time.Second)
	for raised == 0 {
		if j, ok := vs.Job("default", "train"); ok && *j.Version > 0 {
			raised = *j.TaskGroups[0].Tasks[0].Resources.Devices[0].Count
		} else if time.Now().After(deadline) {
			t.Fatalf("the job was not re-registered within 30s; variables: %v", vs.List())
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if want := uint64(policy.Default().Units(policy.Default().Cap(5 * size.GiB))); raised != want {
		t.Fatalf("re-registered with %d units, want %d (the cap formula over the 5GiB it reached)", raised, want)
	}
	for _, v := range vs.List() {
		for k, val := range v.Items {
			if strings.Contains(val, token) || strings.Contains(v.Path, token[:16]) {
				t.Errorf("variable %s item %s carries the reservation token", v.Path, k)
			}
		}
		if strings.HasPrefix(v.Path, violations.PathPrefix) && (v.Items[violations.KeyAlloc] != allocID || v.Items[violations.KeyTask] != "main" ||
			v.Items[violations.KeyCapBytes] != strconv.FormatUint(uint64(3*size.GiB), 10)) {
			t.Errorf("violation %s items %v", v.Path, v.Items)
		}
	}

	// The plugin's metrics count the violation and its time to containment.
	resp, err := http.Get("http://127.0.0.1:" + port + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`gpufrac_violations_total{action="sigkill",gpu="` + uuid + `"} 1`, "gpufrac_violation_containment_seconds_count 1"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("plugin metrics lack %q", want)
		}
	}

	// Nomad replaces the allocation: the old one's units are free again and the new one asks
	// for the raised count.
	c.Unschedule(ids)
	_, res2 := place(t, c, int(raised))
	if got, want := res2.GetEnvs()[enforcer.EnvCapBytes], strconv.FormatUint(raised*uint64(size.GiB), 10); got != want {
		t.Errorf("cap of the re-run %s, want %s", got, want)
	}
}

// TestEscalationToAWholeGPUEndToEnd is the ladder's top through the real plugin: a job allowed
// two attempts breaks its 3 units, the controller re-registers it with the whole GPU (its last
// attempt gets the most room), the next Reserve of that count is granted with the whole budget
// as its cap, and when the re-run breaks a whole GPU too the controller reports it and
// registers nothing more.
func TestEscalationToAWholeGPUEndToEnd(t *testing.T) {
	vs := nomadAPI(t)
	dir := t.TempDir()
	c, ids, res := reservePublishing(t, vs, dir, "")
	count := uint64(3)
	job := vs.PutJob(&api.Job{ID: strPtr("train"), Name: strPtr("train"), Type: strPtr("batch"),
		Meta: map[string]string{controller.MetaMaxAttempts: "2"}, TaskGroups: []*api.TaskGroup{{
			Name: strPtr("g"), Tasks: []*api.Task{{Name: "main", Driver: "exec",
				Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpumem", Count: &count}}}}},
		}}})
	putAlloc := func(id string, job *api.Job, ids []string) {
		vs.PutAlloc(&api.Allocation{ID: id, Namespace: "default", JobID: "train", TaskGroup: "g", Job: job, ClientStatus: api.AllocClientStatusRunning,
			AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"main": {
				Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpumem", Name: "h100-0", DeviceIDs: ids}}}}}})
	}
	// leak runs the task of allocation allocID and takes it past its cap to used.
	leak := func(allocID string, res *devicepb.ContainerReservation, used size.Bytes) {
		t.Helper()
		task := testutil.StartTask(t, res.GetEnvs(), nomadEnv(allocID)...)
		testutil.Eventually(t, 20*time.Second, "the reservation to learn its allocation", func() bool {
			snap, err := ledger.ReadSnapshot(dir)
			if err != nil {
				return false
			}
			for _, r := range snap.Reservations {
				if r.Token == res.GetEnvs()[enforcer.EnvReservation] {
					return r.Task.AllocID == allocID
				}
			}
			return false
		})
		if err := simAt(t, dir).SetUsage(res.GetEnvs()[enforcer.EnvGPUUUID], task.PID(), used); err != nil {
			t.Fatal(err)
		}
		select {
		case <-task.Exited():
		case <-time.After(30 * time.Second):
			t.Fatal("the enforcer did not stop the task that broke its cap")
		}
	}
	const first, second = "5e1c0a9b-4d2e-4f3a-9b8c-7d6e5f4a3b2c", "6f2d1b0c-5e3f-4a4b-8c9d-8e7f6a5b4c3d"
	putAlloc(first, job, ids)
	leak(first, res, 5*size.GiB)
	runController(t, vs)

	units := uint64(attr(c.Latest().GetDeviceGroup()[0], "units"))
	var j *api.Job
	testutil.Eventually(t, 30*time.Second, "the job re-registered", func() bool {
		var ok bool
		j, ok = vs.Job("default", "train")
		return ok && *j.Version > 0
	})
	if got := *j.TaskGroups[0].Tasks[0].Resources.Devices[0].Count; got != units {
		t.Fatalf("re-registered with %d units, want the whole GPU's %d (the last of 2 attempts)", got, units)
	}
	c.Unschedule(ids)
	ids2, res2 := place(t, c, int(units))
	if got, want := res2.GetEnvs()[enforcer.EnvCapBytes], strconv.FormatUint(units*uint64(size.GiB), 10); got != want {
		t.Fatalf("cap of the whole-GPU re-run %s, want %s", got, want)
	}
	putAlloc(second, j, ids2)
	leak(second, res2, size.Bytes(units+1)*size.GiB)
	testutil.Eventually(t, 30*time.Second, "the whole-GPU violation reported exhausted", func() bool {
		for _, v := range vs.List() {
			if v.Items[violations.KeyAlloc] == second && strings.HasPrefix(v.Items[violations.KeyHandled], "exhausted") {
				return true
			}
		}
		return false
	})
	if j, _ := vs.Job("default", "train"); *j.Version != 1 {
		t.Errorf("job version %d after the whole GPU broke, want still 1", *j.Version)
	}
}

func strPtr(s string) *string { return &s }

// nomadAPI is a stand-in for Nomad's API whose tokens for the plugin and the controller carry
// the ACL policies docs/plugin.md tells operators to create: if the guide's policies fall
// short, the escalation loop stops there.
func nomadAPI(t *testing.T) *varserver.Server {
	vs := varserver.New(varserver.Options{MaxWait: 2 * time.Second})
	t.Cleanup(vs.Close)
	vs.SetToken("plugin-token", docACL(t, "gpufrac-plugin")...)
	vs.SetToken("controller-token", docACL(t, "gpufrac-controller")...)
	return vs
}

// putTrainAlloc is Nomad's view of the reservation: job "train" asks for 3 units, and its
// running allocation allocID holds ids.
func putTrainAlloc(vs *varserver.Server, allocID string, ids []string) {
	count := uint64(3)
	job := vs.PutJob(&api.Job{ID: strPtr("train"), Name: strPtr("train"), Type: strPtr("batch"), TaskGroups: []*api.TaskGroup{{
		Name: strPtr("g"), Tasks: []*api.Task{{Name: "main", Driver: "exec",
			Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpumem", Count: &count}}}}},
	}}})
	vs.PutAlloc(&api.Allocation{ID: allocID, Namespace: "default", JobID: "train", TaskGroup: "g", Job: job, ClientStatus: api.AllocClientStatusRunning,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{"main": {
			Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpumem", Name: "h100-0", DeviceIDs: ids}}}}}})
}

// nomadEnv is the environment Nomad gives job "train"'s task "main" in allocation allocID.
func nomadEnv(allocID string) []string {
	return []string{"NOMAD_ALLOC_ID=" + allocID, "NOMAD_JOB_NAME=train", "NOMAD_TASK_NAME=main"}
}

// waitAllocLearnt waits until the plugin's only reservation is tied to allocation allocID:
// the enforcer learns a task's Nomad identity at its next process scan (every second), and a
// real task runs that long before it takes its memory.
func waitAllocLearnt(t *testing.T, dir, allocID string) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, "the reservation to learn its allocation", func() bool {
		snap, err := ledger.ReadSnapshot(dir)
		return err == nil && len(snap.Reservations) == 1 && snap.Reservations[0].Task.AllocID == allocID
	})
}

// runController runs the controller against vs with its guide token until the test ends.
func runController(t *testing.T, vs *varserver.Server) {
	t.Helper()
	ctl, err := controller.New(controller.Config{Client: vs.Client(t, "controller-token"), Retry: 100 * time.Millisecond, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}
