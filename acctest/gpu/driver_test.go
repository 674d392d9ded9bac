package gpuacc

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

func TestMain(m *testing.M) { fencetest.Main(m) }

// driverFacts is testdata/clients/driver_facts.c built: $GPUFRAC_DRIVER_FACTS on the GPU machine
// (clients.sh --build makes bin/driver-facts; that machine may have no compiler), else built
// here with the system compiler.
func driverFacts(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GPUFRAC_DRIVER_FACTS"); p != "" {
		return p
	}
	fencetest.Build(t) // skips without a compiler, as the fence's own tests do
	bin := filepath.Join(t.TempDir(), "driver-facts")
	if out, err := exec.Command(compiler(), "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", bin,
		filepath.Join("testdata", "clients", "driver_facts.c"), "-ldl", "-lpthread").CombinedOutput(); err != nil {
		t.Fatalf("driver_facts.c: %v: %s", err, out)
	}
	return bin
}

// compiler is $CC, or cc, as fencetest builds with.
func compiler() string {
	if cc := os.Getenv("CC"); cc != "" {
		return cc
	}
	return "cc"
}

// entryAddr is one address an entry point was found at, and the object holding it.
type entryAddr struct{ how, addr, object string }

// parseEntries reads driver-facts entries: the driver's path and, for each entry point, where
// dlsym and cuGetProcAddress_v2 (each stream flag) found it.
func parseEntries(out string) (driver string, entries map[string][]entryAddr, err error) {
	entries = map[string][]entryAddr{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "driver":
			driver = f[1]
		case len(f) == 17 && f[0] == "entry" && f[2] == "dlsym":
			e := []entryAddr{{"dlsym", f[3], f[4]}}
			for i := 5; i+3 < len(f); i += 4 {
				if f[i+3] != "0/0" { // CUDA_SUCCESS, CU_GET_PROC_ADDRESS_SUCCESS
					return "", nil, fmt.Errorf("%s: cuGetProcAddress_v2 answered %s (result/status)", f[1], f[i+3])
				}
				e = append(e, entryAddr{f[i], f[i+1], f[i+2]})
			}
			entries[f[1]] = e
		default:
			return "", nil, fmt.Errorf("unexpected line %q", line)
		}
	}
	if len(entries) == 0 {
		return "", nil, fmt.Errorf("no entry lines in %q", out)
	}
	return driver, entries, nil
}

// distinct counts the different addresses among an entry point's lookups.
func distinct(as []entryAddr) int {
	seen := map[string]bool{}
	for _, a := range as {
		seen[a.addr] = true
	}
	return len(seen)
}

// exported is the set of functions a library defines for others to bind to.
func exported(path string) (map[string]bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC && elf.ST_BIND(s.Info) != elf.STB_LOCAL {
			out[s.Name] = true
		}
	}
	return out, nil
}

// checkEntries holds the lookups of each entry point to what the fence's wrapping assumes:
// without the fence, every one in the driver and at no more than two addresses (the fence wraps
// two: a third runs unfenced); under the fence (library lib), every one the fence's wrapper.
func checkEntries(t *testing.T, driver, lib string, plain, fenced map[string][]entryAddr) {
	t.Helper()
	for name, as := range plain {
		if n := distinct(as); n > 2 {
			t.Errorf("%s: %d driver addresses %v: the fence wraps two, the third runs unfenced", name, n, as)
		}
		for _, a := range as {
			if a.object != filepath.Base(driver) {
				t.Errorf("%s without the fence: %s found it in %s, not %s", name, a.how, a.object, driver)
			}
		}
		for _, a := range fenced[name] {
			if a.object != filepath.Base(lib) {
				t.Errorf("%s under the fence: %s found it in %s, not the fence", name, a.how, a.object)
			}
		}
	}
}

// selfBoundCalls lists the relocations by which a library reaches a function it defines itself,
// one of names, through its global offset table, which LD_PRELOAD interposes: a driver that
// called its own cuMemAlloc_v2 that way, with the fence exporting that name, would have every
// inner call charged a second time. Each is the relocation's type (JMP_SLOT is a call; GLOB_DAT
// and 64 take an address) and the name.
func selfBoundCalls(path string, names map[string]bool) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%s: %v, not x86-64", path, f.Machine)
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, sec := range f.Sections {
		if sec.Type != elf.SHT_RELA || int(sec.Link) >= len(f.Sections) || f.Sections[sec.Link].Type != elf.SHT_DYNSYM {
			continue
		}
		data, err := sec.Data()
		if err != nil {
			return nil, err
		}
		for i := 0; i+24 <= len(data); i += 24 {
			info := f.ByteOrder.Uint64(data[i+8:])
			typ, idx := elf.R_X86_64(info&0xffffffff), info>>32
			if idx == 0 || idx > uint64(len(syms)) {
				continue
			}
			s := syms[idx-1] // DynamicSymbols leaves out the null symbol
			if s.Section == elf.SHN_UNDEF || !names[s.Name] || elf.ST_TYPE(s.Info) != elf.STT_FUNC {
				continue
			}
			switch typ {
			case elf.R_X86_64_JMP_SLOT, elf.R_X86_64_GLOB_DAT, elf.R_X86_64_64:
				out = append(out, strings.TrimPrefix(typ.String(), "R_X86_64_")+" "+s.Name)
			}
		}
	}
	return out, nil
}

// The checks themselves need no GPU: on the fence's fake driver, which reaches its own entry
// points through hidden aliases, every lookup of an entry point answers one of at most two
// addresses in the driver, the same lookups under the fence answer the fence's wrappers, a
// first allocation raced by forks ends, and the relocation reader finds no self-bound call in
// the fake but finds the one a library built without aliases makes.
func TestDriverFactsOnTheFakeDriver(t *testing.T) {
	k := fencetest.Build(t)
	bin := driverFacts(t)
	plainEnv := []string{"LD_LIBRARY_PATH=" + k.DriverDir, "FAKE_CUDA_UUIDS=" + fencetest.FakeUUIDHex}
	fencedEnv := k.Env(t.TempDir(), "")
	run := func(env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("driver-facts %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	driver, plain, err := parseEntries(run(plainEnv, "entries"))
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(driver) != "libcuda.so.1" {
		t.Errorf("driver %q, want the fake libcuda.so.1", driver)
	}
	_, fenced, err := parseEntries(run(fencedEnv, "entries"))
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, driver, k.Library, plain, fenced)
	if out := run(fencedEnv, "fork", "200"); !strings.Contains(out, "fork 200 children, 0 odd, first alloc 0") {
		t.Errorf("a first allocation raced by forks: %q", out)
	}
	if out := run(fencedEnv, "fds", "16"); !strings.HasPrefix(out, "alloc 0\n") || !strings.Contains(out, " cloexec ") {
		t.Errorf("fds: %q", out)
	}

	names, err := exported(k.Library)
	if err != nil || !names["cuMemAlloc_v2"] {
		t.Fatalf("the fence's exports: %v, %v", names, err)
	}
	calls, err := selfBoundCalls(filepath.Join(k.DriverDir, "libcuda.so.1"), names)
	if err != nil || len(calls) != 0 {
		t.Errorf("the fake driver's self-bound calls of the fence's names: %v, %v; want none (its hidden aliases)", calls, err)
	}
	src := filepath.Join(t.TempDir(), "self.c")
	so := filepath.Join(t.TempDir(), "libself.so")
	if err := os.WriteFile(src, []byte("int cuInner(int x) { return x + 1; }\nint cuOuter(int x) { return cuInner(x) * 2; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(compiler(), "-O0", "-fPIC", "-shared", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if calls, err := selfBoundCalls(so, map[string]bool{"cuInner": true, "cuOuter": true}); err != nil || strings.Join(calls, ",") != "JMP_SLOT cuInner" {
		t.Errorf("a library calling its own export: %v, %v; want [JMP_SLOT cuInner]", calls, err)
	}
}

// TestDriverFacts asks the real driver what the fence assumes of it (docs/benchmarks.md, "The
// next H200 calls", item 8): each entry point at no more than two driver addresses, all of them
// the fence's under it; no call of the driver to its own exports through its GOT; the fence's
// descriptors close-on-exec and clear of the numbers a program picks; and a first allocation
// raced by forks, in fresh processes again and again, never hangs.
func TestDriverFacts(t *testing.T) {
	needGPU(t)
	bin := driverFacts(t)
	h := newHarnessFence(t, policy.ModeIsolated, 100*time.Millisecond, true)
	h.start()
	r := h.reserve(8*size.GiB, "facts")
	lib := h.enf.EnvOptions(h.uuid).FenceLibrary
	run := func(res ledger.Reservation, name string, limit time.Duration, args ...string) string {
		t.Helper()
		j := h.launch(res, &job{name: name, done: make(chan struct{})}, append([]string{bin}, args...), nil)
		if code, sig := j.wait(t, limit); code != 0 {
			t.Fatalf("driver-facts %s: exit %d %v: %s", strings.Join(args, " "), code, sig, tail(j.out.String()))
		}
		return j.out.String()
	}
	plainOut := run(ledger.Reservation{}, "entries-plain", time.Minute, "entries")
	driver, plain, err := parseEntries(plainOut)
	if err != nil {
		t.Fatalf("%v: %s", err, plainOut)
	}
	fencedOut := run(r, "entries-fenced", time.Minute, "entries")
	_, fenced, err := parseEntries(fencedOut)
	if err != nil {
		t.Fatalf("%v: %s", err, fencedOut)
	}
	record(t, map[string]any{"row": "entries", "driver": driver, "plain": plainOut, "fenced": fencedOut})
	checkEntries(t, driver, lib, plain, fenced)

	real, err := filepath.EvalSymlinks(driver)
	if err != nil {
		t.Fatal(err)
	}
	names, err := exported(lib)
	if err != nil {
		t.Fatal(err)
	}
	calls, err := selfBoundCalls(real, names)
	record(t, map[string]any{"row": "self-bound", "driver": real, "relocations": calls, "error": fmt.Sprint(err)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		if strings.HasPrefix(c, "JMP_SLOT ") {
			t.Errorf("%s calls its own %s through its PLT: the fence would charge it twice", real, c)
		}
	}

	fds := run(r, "fds", time.Minute, "fds", "1024")
	record(t, map[string]any{"row": "fds", "out": fds})
	if !strings.HasPrefix(fds, "alloc 0\n") {
		t.Fatalf("a 1 GiB allocation in an 8 GiB task: %s", fds)
	}
	var lim syscall.Rlimit
	floor := 1024
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur/2 < uint64(floor) {
		floor = int(lim.Cur / 2)
	}
	fenceDir, err := filepath.EvalSymlinks(h.enf.EnvOptions(h.uuid).FenceDir)
	if err != nil {
		t.Fatal(err)
	}
	mine := 0
	for _, line := range strings.Split(fds, "\n") {
		f := strings.Fields(line)
		if len(f) != 5 || f[0] != "fd" || !strings.HasPrefix(f[2], fenceDir) {
			continue
		}
		mine++
		if n, _ := strconv.Atoi(f[1]); n < floor || f[4] != "1" {
			t.Errorf("the fence's descriptor %s (%s) is below %d or not close-on-exec", f[1], f[2], floor)
		}
	}
	if mine == 0 {
		t.Errorf("no descriptor of the fence's (under %s) in a fenced process: %s", fenceDir, fds)
	}

	for i := range 20 {
		out := run(r, fmt.Sprintf("fork%d", i), time.Minute, "fork", "100")
		if !strings.Contains(out, "0 odd, first alloc 0") {
			t.Fatalf("run %d of a first allocation raced by forks: %s", i, out)
		}
	}
	record(t, map[string]any{"row": "fork", "runs": 20, "children": 100})
}
