package fence_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// plugin builds testdata/plugin.c, a library linked against the fake libcuda.so.1.
func plugin(t *testing.T, k fencetest.Kit) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	out := filepath.Join(t.TempDir(), "plugin.so")
	args := []string{"-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared", "-o", out,
		filepath.Join(fencetest.Sources(), "testdata", "plugin.c"), "-L", k.DriverDir, "-l:libcuda.so.1"}
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", cc, args, err, b)
	}
	return out
}

// A library linked against libcuda and opened without RTLD_GLOBAL (a Python extension that calls
// the driver by name: PyCUDA's, vLLM's cumem allocator) brings the driver in for itself alone,
// and its calls bind to the fence's exported names, which come first in the global scope. The
// fence found the driver behind those names with RTLD_NEXT, which searches the global scope
// only: every such call failed with CUDA_ERROR_NOT_INITIALIZED (3), and the library with it.
func TestLibraryOpenedWithoutRTLDGlobalIsFenced(t *testing.T) {
	k := fencetest.Build(t)
	lib := plugin(t, k)
	for _, p := range []struct{ big, small string }{
		{"alloc 700M", "alloc 300M"},
		{"create 700M", "create 300M"},
		{"async 700M", "async 300M"},
		{"array 1M 175", "array 1M 75"},
	} {
		t.Run(p.big, func(t *testing.T) {
			dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
			c := k.Start(t, k.Env(dir, tokA, "CLIENT_PLUGIN="+lib), "plugin")
			want(t, c.Do(p.big), "ok 0", "first allocation under the cap")
			want(t, c.Do(p.big), "err 2", "allocation past the cap")
			want(t, c.Do(p.small), "ok 1", "allocation that still fits")
			want(t, c.Do("info"), fmt.Sprintf("info %d %d", 24*size.MiB, size.GiB), "the task's view of the GPU")
			want(t, c.Do("total"), fmt.Sprintf("total %d", size.GiB), "the task's total")
			want(t, c.Do("free 0"), "ok", "free")
			if u := snap(t, tb, tokA); u.Used != 300*size.MiB || u.Refused != 1 || u.Procs != 1 {
				t.Fatalf("table after 700M+300M, one refusal and a free of the 700M: %+v", u)
			}
		})
	}
}
