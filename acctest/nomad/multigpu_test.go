package nomad_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpufrac/gpufrac/acctest/nomad/emulator"
	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/size"
)

// unitIDs are the first n instance IDs of a group.
func unitIDs(g *devicepb.DeviceGroup, n int) []string {
	var ids []string
	for _, d := range g.GetDevices()[:n] {
		ids = append(ids, d.GetID())
	}
	return ids
}

// A node of four identical GPUs: one device group per GPU with its own UUID, memory and units,
// and a fraction reserved on GPU 1 is told GPU 1 (and, with GPU 1 in mps mode, GPU 1's MPS
// daemon and a pinned limit naming GPU 1).
func TestFourGPUNode(t *testing.T) {
	control := testutil.FakeMPSControl(t)
	for _, mode := range []string{"isolated", "mps"} {
		t.Run(mode, func(t *testing.T) {
			root := testutil.MPSRoot(t)
			c := start(t, agentConfig(t.TempDir(), `"H100=80GiB", "H100=80GiB", "H100=80GiB", "H100=80GiB"`,
				`gpu_modes   = { "1" = "`+mode+`" }
  mps_root    = "`+root+`"
  mps_control = "`+control+`"`))
			fp := c.Latest()
			groups := fp.GetDeviceGroup()
			if len(groups) != 4 {
				t.Fatalf("%d device groups, want one per GPU (4)", len(groups))
			}
			seen := map[string]bool{}
			for i, g := range groups {
				a := g.GetAttributes()
				uuid := a["uuid"].GetStringVal()
				if uuid != gpu.SimUUID(i, a["model"].GetStringVal()) || seen[uuid] {
					t.Errorf("group %d: uuid %q, want GPU %d's own (%s)", i, uuid, i, gpu.SimUUID(i, a["model"].GetStringVal()))
				}
				seen[uuid] = true
				if g.GetDeviceName() != "h100-"+strconv.Itoa(i) || attr(g, "index") != int64(i) {
					t.Errorf("group %d: name %q index %d", i, g.GetDeviceName(), attr(g, "index"))
				}
				// 80 GiB less the default 2 GiB headroom, in 1 GiB units
				if attr(g, "memory") != 80*1024 || attr(g, "budget") != 78*1024 || attr(g, "units") != 78 || len(g.GetDevices()) != 78 || emulator.HealthyCount(g) != 78 {
					t.Errorf("group %d: memory %d MiB, budget %d MiB, units %d, %d instances (%d healthy); want 81920, 79872, 78, 78 (78)",
						i, attr(g, "memory"), attr(g, "budget"), attr(g, "units"), len(g.GetDevices()), emulator.HealthyCount(g))
				}
				for k, d := range g.GetDevices() {
					if d.GetID() != ledger.InstanceID(uuid, k) {
						t.Errorf("group %d instance %d is %s, want %s", i, k, d.GetID(), ledger.InstanceID(uuid, k))
						break
					}
				}
				wantMode := "isolated"
				if i == 1 {
					wantMode = mode
				}
				if m := a["mode"].GetStringVal(); m != wantMode {
					t.Errorf("group %d: mode %q, want %q", i, m, wantMode)
				}
			}

			uuid1 := groups[1].GetAttributes()["uuid"].GetStringVal()
			res, err := c.Reserve(unitIDs(groups[1], 5))
			if err != nil {
				t.Fatal(err)
			}
			env := res.GetEnvs()
			tok := env[enforcer.EnvReservation]
			want := map[string]string{
				enforcer.EnvCUDADevices:        uuid1,
				enforcer.EnvGPUUUID:            uuid1,
				enforcer.EnvCapBytes:           strconv.FormatUint(uint64(5*size.GiB), 10),
				enforcer.ReservationKey(uuid1): tok,
				enforcer.EnvMode:               mode,
				enforcer.EnvMPSPipeDir:         "",
				enforcer.EnvMPSMemLimit:        "",
				enforcer.ReservationKey(groups[0].GetAttributes()["uuid"].GetStringVal()): "",
			}
			pipe := filepath.Join(root, uuid1, "pipe")
			if mode == "mps" {
				want[enforcer.EnvMPSPipeDir] = pipe
				want[enforcer.EnvMPSMemLimit] = uuid1 + "=5120M"
			}
			for k, v := range want {
				if env[k] != v {
					t.Errorf("%s = %q, want %q", k, env[k], v)
				}
			}
			if tok == "" {
				t.Error("no reservation token")
			}
			// The MPS daemon runs for GPU 1 only.
			for i, g := range groups {
				_, err := os.Stat(filepath.Join(root, g.GetAttributes()["uuid"].GetStringVal(), "pipe", "daemon.pid"))
				if running := err == nil; running != (mode == "mps" && i == 1) {
					t.Errorf("GPU %d: MPS control daemon running %v", i, running)
				}
			}
			mounts := []string{env[fence.EnvDir], fence.AccountDir(env[fence.EnvDir], tok), fence.LiveDir(env[fence.EnvDir], tok), fence.ControlDir(env[fence.EnvDir])}
			if mode == "mps" {
				mounts = append([]string{pipe}, mounts...)
			}
			if err := samePathMounts(res.GetMounts(), mounts...); err != nil {
				t.Error(err)
			}
		})
	}
}

// A task with two device blocks gets one Reserve per block; Nomad merges the environments in
// order, a later one winning on a shared key. The merged environment names the last GPU in
// CUDA_VISIBLE_DEVICES and GPUFRAC_RESERVATION, and carries both reservations in their per-GPU
// keys, by which the watchdog ties the task's processes on each GPU to that GPU's reservation.
func TestTwoDeviceBlocksOnTwoGPUs(t *testing.T) {
	c := start(t, agentConfig(t.TempDir(), `"3xH100=80GiB"`, ""))
	groups := c.Latest().GetDeviceGroup()
	merged := map[string]string{}
	var toks, uuids []string
	for _, b := range []struct{ gpu, units int }{{1, 3}, {2, 4}} {
		res, err := c.Reserve(unitIDs(groups[b.gpu], b.units))
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, res.GetEnvs()[enforcer.EnvReservation])
		uuids = append(uuids, groups[b.gpu].GetAttributes()["uuid"].GetStringVal())
		for k, v := range res.GetEnvs() {
			merged[k] = v
		}
	}
	if toks[0] == toks[1] || toks[0] == "" {
		t.Fatalf("tokens %q: want two reservations", toks)
	}
	want := map[string]string{
		enforcer.EnvCUDADevices:           uuids[1],
		enforcer.EnvReservation:           toks[1],
		enforcer.EnvCapBytes:              strconv.FormatUint(uint64(4*size.GiB), 10),
		enforcer.ReservationKey(uuids[0]): toks[0],
		enforcer.ReservationKey(uuids[1]): toks[1],
	}
	for k, v := range want {
		if merged[k] != v {
			t.Errorf("merged %s = %q, want %q", k, merged[k], v)
		}
	}
}

// TestSplitWithNomadDeviceNvidia: beside nomad-device-nvidia each GPU must belong to one plugin,
// or Nomad could place a whole-GPU job on a GPU that is being shared. gpufrac ignores the GPUs
// the nvidia plugin keeps (by index or UUID); they disappear from its fingerprint and no
// instance ID of theirs is admitted.
func TestSplitWithNomadDeviceNvidia(t *testing.T) {
	dir := t.TempDir()
	uuid2, uuid3 := gpu.SimUUID(2, "H100"), gpu.SimUUID(3, "H100")

	c := start(t, agentConfig(dir, `"4xH100=80GiB"`, `ignored_gpu_ids = ["2", "`+uuid3+`"]`))
	fp := c.Latest()
	var kept []string
	for _, g := range fp.GetDeviceGroup() {
		kept = append(kept, g.GetDeviceName())
		if u := g.GetAttributes()["uuid"].GetStringVal(); u == uuid2 || u == uuid3 {
			t.Errorf("ignored GPU %s advertised as %s", u, g.GetDeviceName())
		}
	}
	if strings.Join(kept, ",") != "h100-0,h100-1" {
		t.Fatalf("gpufrac advertises %v, want only h100-0 and h100-1", kept)
	}
	// A whole-GPU request through gpufrac (count = the GPU's units) still fits one shared GPU.
	_, ids, err := c.Schedule(78)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reserve(ids); err != nil {
		t.Fatalf("whole GPU through gpufrac: %v", err)
	}
	// The nvidia plugin's GPUs cannot be reserved through gpufrac, even by a hand-made call.
	if _, err := c.ReserveRaw([]string{uuid2 + "-0"}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "is listed in ignored_gpu_ids") {
		t.Errorf("Reserve on an ignored GPU: %v, want an InvalidArgument refusal naming ignored_gpu_ids", err)
	}
}
