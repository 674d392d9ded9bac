package testutil

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// FakeMPSControl is the absolute path of enforcer/testdata/fake-mps-control, the stand-in for
// nvidia-cuda-mps-control that the enforcer's, the plugin's and the acceptance tests run.
func FakeMPSControl(t testing.TB) string {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("testutil: cannot find its own source, so not the repository's testdata either")
	}
	return filepath.Join(filepath.Dir(self), "..", "..", "enforcer", "testdata", "fake-mps-control")
}

// MPSRoot is a directory for MPS pipe directories with a short path: MPS pipes are Unix
// sockets, whose paths are limited to about 100 bytes, too few for t.TempDir's. It is removed
// when the test ends, and every fake control daemon under it is stopped first (one exits once
// its pid file is gone), so none outlives the test.
func MPSRoot(t testing.TB) string {
	t.Helper()
	root, err := os.MkdirTemp("", "gfmps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pids, _ := filepath.Glob(filepath.Join(root, "*", "pipe", "daemon.pid"))
		for _, f := range pids {
			os.Remove(f)
		}
		os.RemoveAll(root)
	})
	return root
}
