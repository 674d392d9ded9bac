package fence_test

import (
	"bytes"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// musl builds src (testdata) with musl-gcc. Without musl-gcc it skips, except in CI (CI or
// GPUFRAC_REQUIRE_MUSL set), where a missing compiler is a failure: scripts/install-tools.sh
// installs Debian's musl-tools.
func musl(t *testing.T, out string, args ...string) {
	t.Helper()
	mcc, err := exec.LookPath("musl-gcc")
	if err != nil {
		if os.Getenv("CI") != "" || os.Getenv("GPUFRAC_REQUIRE_MUSL") != "" {
			t.Fatal("musl-gcc not found on PATH in CI: run scripts/install-tools.sh (Debian's musl-tools)")
		}
		t.Skip("musl-gcc not found on PATH (scripts/install-tools.sh installs Debian's musl-tools; CI=true makes this a failure)")
	}
	cmd := append([]string{"-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", out}, args...)
	if b, err := exec.Command(mcc, cmd...).CombinedOutput(); err != nil {
		t.Fatalf("musl-gcc %s: %v\n%s", strings.Join(cmd, " "), err, b)
	}
}

// runBounded runs a command with stdin and a bound: a hang fails in seconds.
func runBounded(t *testing.T, env []string, stdin string, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish within 20 s (stderr: %s)", name, e.String())
	}
	return o.String(), e.String(), err
}

// A musl process under the preload starts and runs: the fence needs no glibc-only symbol, keeps
// the process's dlsym working, stays silent in a process that never reaches for the driver, and
// in one that does says once that it is passive there (unfenced; the watchdog watches it).
func TestMuslProcessRunsUnderThePreload(t *testing.T) {
	k := fencetest.Build(t)
	dir := t.TempDir()
	hello := filepath.Join(dir, "hello")
	musl(t, hello, filepath.Join(fencetest.Sources(), "testdata", "hello.c"))
	drv := filepath.Join(dir, "driver")
	if err := os.Mkdir(drv, 0o755); err != nil {
		t.Fatal(err)
	}
	musl(t, filepath.Join(drv, "libcuda.so.1"), "-fPIC", "-shared", filepath.Join(fencetest.Sources(), "testdata", "fakecuda.c"), "-lpthread")
	client := filepath.Join(dir, "client")
	musl(t, client, filepath.Join(fencetest.Sources(), "testdata", "client.c"), "-ldl", "-lpthread")

	fdir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
	env := k.Env(fdir, tokA)
	for i, e := range env {
		if strings.HasPrefix(e, "LD_LIBRARY_PATH=") {
			env[i] = "LD_LIBRARY_PATH=" + drv
		}
	}

	t.Run("no driver", func(t *testing.T) {
		out, errOut, err := runBounded(t, env, "", hello, "a", "b")
		if err != nil || out != "hello a b\n" || errOut != "" {
			t.Fatalf("musl hello under the fence: err %v, stdout %q, stderr %q; want exit 0, %q and a silent fence", err, out, errOut, "hello a b\n")
		}
	})
	for _, mode := range []string{"runtime", "direct"} {
		t.Run(mode, func(t *testing.T) {
			out, errOut, err := runBounded(t, env, "alloc 2G\ninfo\nexit\n", client, mode)
			if err != nil {
				t.Fatalf("musl client under the fence: %v (stderr %q)", err, errOut)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 2 || !strings.HasPrefix(lines[0], "ok ") || !strings.HasPrefix(lines[1], "info ") {
				t.Fatalf("musl client: stdout %q, want an unfenced 2 GiB allocation and the driver's info", out)
			}
			if n := strings.Count(errOut, "the fence is passive here"); n != 1 {
				t.Fatalf("stderr says the fence is passive %d times, want once: %q", n, errOut)
			}
			if u := snap(t, tb, tokA); u.Used != 0 || u.Procs != 0 {
				t.Fatalf("a passive process touched the table: %+v", u)
			}
		})
	}
}

// glibcFloor is the newest glibc symbol version the library may need on x86_64: 2.17 (2012),
// older than any CUDA image's. A task whose image has an older glibc than the one the library
// needs does not start at all under the preload.
const glibcFloor = 2_017

func glibcVersion(v string) (int, bool) {
	rest, ok := strings.CutPrefix(v, "GLIBC_")
	if !ok {
		return 0, false
	}
	parts := strings.Split(rest, ".")
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := 0, error(nil)
	if len(parts) > 1 {
		minor, err2 = strconv.Atoi(parts[1])
	}
	return major*1000 + minor, err1 == nil && err2 == nil
}

// The library loads into a process with any glibc since 2.17: every symbol version it imports is
// that old or older, and libdl and libpthread (where older glibcs keep dlopen and pthread_once)
// are among its needed libraries.
func TestLibraryNeedsNoNewGlibc(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the versions are pinned on x86_64 only (lib/compat.h)")
	}
	k := fencetest.Build(t)
	f, err := elf.Open(k.Library)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.ImportedSymbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if v, ok := glibcVersion(s.Version); ok && v > glibcFloor {
			t.Errorf("%s@%s: a task image with an older glibc could not start under the preload", s.Name, s.Version)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"libdl.so.2", "libpthread.so.0", "libc.so.6"} {
		found := false
		for _, l := range libs {
			found = found || l == want
		}
		if !found {
			t.Errorf("needed libraries %v: want %s among them", libs, want)
		}
	}
}
