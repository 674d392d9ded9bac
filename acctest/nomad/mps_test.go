package nomad_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/size"
)

func TestMPSModeReservation(t *testing.T) {
	control, err := filepath.Abs("../../enforcer/testdata/fake-mps-control")
	if err != nil {
		t.Fatal(err)
	}
	// MPS pipes are unix sockets, so the root needs a short path.
	root, err := os.MkdirTemp("", "gfmps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The fake daemon exits once its pid file is gone.
		pids, _ := filepath.Glob(filepath.Join(root, "*", "pipe", "daemon.pid"))
		for _, f := range pids {
			os.Remove(f)
		}
		os.RemoveAll(root)
	})
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
	if len(res.GetMounts()) != 1 || res.GetMounts()[0].GetHostPath() != pipe || res.GetMounts()[0].GetTaskPath() != pipe {
		t.Errorf("mounts %v, want the pipe directory %s at the same path", res.GetMounts(), pipe)
	}
	// The control daemon was started for that GPU before Reserve returned.
	if _, err := os.Stat(filepath.Join(pipe, "daemon.pid")); err != nil {
		t.Errorf("no MPS control daemon for %s: %v", uuid, err)
	}
}
