package nomad_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/internal/testutil"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/size"
)

func TestMPSModeReservation(t *testing.T) {
	control, root := testutil.FakeMPSControl(t), testutil.MPSRoot(t)
	c := start(t, agentConfig(t.TempDir(), `"H100=80GiB", "A100=40GiB"`, `gpu_modes   = { "1" = "mps" }
  mps_root    = "`+root+`"
  mps_control = "`+control+`"`))
	fp := c.Latest()
	if m := fp.GetDeviceGroup()[1].GetAttributes()["mode"].GetStringVal(); m != "mps" {
		t.Fatalf("GPU 1 mode attribute %q, want mps", m)
	}
	if m := fp.GetDeviceGroup()[0].GetAttributes()["mode"].GetStringVal(); m != "isolated" {
		t.Errorf("GPU 0 mode attribute %q, want isolated (the policy's default)", m)
	}
	g := fp.GetDeviceGroup()[1]
	uuid := g.GetAttributes()["uuid"].GetStringVal()
	var ids []string
	for _, d := range g.GetDevices()[:5] {
		ids = append(ids, d.GetID())
	}
	res, err := c.Reserve(ids)
	if err != nil {
		t.Fatal(err)
	}
	env := res.GetEnvs()
	pipe := env[enforcer.EnvMPSPipeDir]
	if !strings.HasPrefix(pipe, root) {
		t.Errorf("%s = %q, want a directory under %s", enforcer.EnvMPSPipeDir, pipe, root)
	}
	if want := uuid + "=" + strconv.Itoa(int(5*size.GiB/size.MiB)) + "M"; env[enforcer.EnvMPSMemLimit] != want {
		t.Errorf("%s = %q, want %q", enforcer.EnvMPSMemLimit, env[enforcer.EnvMPSMemLimit], want)
	}
	// The MPS pipe directory, the fence's directory (read-only) with the task's own accounting
	// directory (writable) on top, and the control copies (read-only: only the enforcer writes
	// them), each at the host's path.
	own := fence.AccountDir(env[fence.EnvDir], env[enforcer.EnvReservation])
	if err := samePathMounts(res.GetMounts(), pipe, env[fence.EnvDir], own, fence.ControlDir(env[fence.EnvDir])); err != nil {
		t.Error(err)
	}
	for _, m := range res.GetMounts() {
		if want := m.GetHostPath() != pipe && m.GetHostPath() != own; m.GetReadOnly() != want {
			t.Errorf("mount %v: read-only %v, want %v", m, m.GetReadOnly(), want)
		}
	}
	// Reserve wrote the task's cap into the fence before answering: a process of the task
	// attaches and sees it.
	fc, err := fence.Attach(env[fence.EnvDir], uuid, env[enforcer.EnvReservation])
	if err != nil {
		t.Fatalf("a task process cannot attach to the fence: %v", err)
	}
	defer fc.Detach()
	if capBytes, _, ok := fc.View(); !ok || capBytes != 5*size.GiB {
		t.Errorf("the fence holds the task to %s (ok %v), want its 5GiB cap", capBytes, ok)
	}
	// The control daemon was started for that GPU before Reserve returned.
	if _, err := os.Stat(filepath.Join(pipe, "daemon.pid")); err != nil {
		t.Errorf("no MPS control daemon for %s: %v", uuid, err)
	}
}

// samePathMounts checks that mounts are exactly paths, each mounted at the host's own path.
func samePathMounts(mounts []*devicepb.Mount, paths ...string) error {
	var got []string
	for _, m := range mounts {
		if m.GetHostPath() != m.GetTaskPath() {
			return fmt.Errorf("mount %v: the task must see the host's path", m)
		}
		got = append(got, m.GetHostPath())
	}
	if !slices.Equal(got, paths) || slices.Contains(paths, "") {
		return fmt.Errorf("mounts %q, want %q", got, paths)
	}
	return nil
}
