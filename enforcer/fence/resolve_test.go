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

// sharedLib builds testdata/<name>.c into a shared library with extra link arguments.
func sharedLib(t *testing.T, name string, extra ...string) string {
	t.Helper()
	fencetest.Build(t) // a C compiler, or a skip outside CI
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	out := filepath.Join(t.TempDir(), name+".so")
	args := append([]string{"-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared", "-o", out,
		filepath.Join(fencetest.Sources(), "testdata", name+".c")}, extra...)
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", cc, args, err, b)
	}
	return out
}

// plugin builds testdata/plugin.c, a library linked against the fake libcuda.so.1.
func plugin(t *testing.T, k fencetest.Kit) string {
	t.Helper()
	return sharedLib(t, "plugin", "-L", k.DriverDir, "-l:libcuda.so.1")
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

// Another preloaded library listed after the fence (a task that sets its own LD_PRELOAD keeps
// the fence first) runs its constructor before the fence's, and a dlsym(RTLD_NEXT, ...) there
// reaches the fence's dlsym before the fence found the real one. It was then answered relative
// to the fence, which is before that library: it got its own definition back, and the process
// recursed until its stack ran out at the wrapped function's first call.
func TestPreloadAfterTheFenceFindsTheNextDefinition(t *testing.T) {
	k := fencetest.Build(t)
	lib := sharedLib(t, "interposer", "-ldl")
	dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
	env := k.Env(dir, tokA)
	env[0] = "LD_PRELOAD=" + k.Library + ":" + lib
	c := k.Start(t, env)
	want(t, c.Do("alloc 100M"), "ok 0", "an allocation, answered through the interposer's fflush")
	if u := snap(t, tb, tokA); u.Used != 100*size.MiB {
		t.Fatalf("the process is fenced as before: %+v", u)
	}
}

// What cuGetProcAddress and its _v2 hand out, for every flags value (default, legacy stream,
// per-thread default stream) and the cudaVersions runtimes ask with: the fence's wrapper wherever
// the driver answers with the ABI the fence wraps (the memory calls from CUDA 3.2 on,
// cuGetProcAddress by its version, the 32-bit cuDeviceTotalMem of 3.0 with a wrapper of its own),
// and the driver's own entry point where it answers with another ABI (the 32-bit calls before
// 3.2) or one the fence does not wrap.
func TestGetProcAddressByVersionAndFlags(t *testing.T) {
	k := fencetest.Build(t)
	dir, _ := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
	c := k.Start(t, k.Env(dir, tokA))
	fenced, driver := filepath.Base(k.Library), "libcuda.so.1"
	for _, gpa := range []string{"1", "2"} {
		for _, flags := range []string{"0", "1", "2"} {
			for _, tc := range []struct{ name, version, from string }{
				{"cuMemAlloc", "3020", fenced},
				{"cuMemAlloc", "12080", fenced},
				{"cuMemAlloc", "3010", driver},
				{"cuMemFree", "3020", fenced},
				{"cuMemGetInfo", "11040", fenced},
				{"cuMemGetInfo", "3000", driver},
				{"cuMemAllocPitch", "12000", fenced},
				{"cuMemAllocManaged", "6000", fenced},
				{"cuMemAllocAsync", "11020", fenced},
				{"cuMemFreeAsync", "11020", fenced},
				{"cuMemAllocFromPoolAsync", "11020", fenced},
				{"cuMemCreate", "10020", fenced},
				{"cuMemRelease", "10020", fenced},
				{"cuArrayCreate", "12000", fenced},
				{"cuMipmappedArrayCreate", "12000", fenced},
				{"cuMemPoolTrimTo", "11020", fenced},
				{"cuDeviceTotalMem", "3000", fenced},
				{"cuDeviceTotalMem", "12000", fenced},
				{"cuGetProcAddress", "11030", fenced},
				{"cuGetProcAddress", "12000", fenced},
				{"cuCtxGetDevice", "12000", driver},
			} {
				cmd := fmt.Sprintf("gpa %s %s %s %s", gpa, tc.name, tc.version, flags)
				want(t, c.Do(cmd), "from "+tc.from, cmd)
			}
		}
	}
}
