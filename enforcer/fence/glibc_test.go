package fence_test

import (
	"debug/elf"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
)

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
