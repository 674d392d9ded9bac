package fence_test

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
)

// The C files reference each other one way (lib/fence.h draws the arrows): two files that call
// each other are one job cut in the wrong place, and a newcomer cannot read either alone. Each
// file is compiled on its own and its undefined symbols matched to the file defining them.
func TestCFilesReferenceOneWay(t *testing.T) {
	fencetest.Build(t) // a C compiler, or a skip outside CI
	src := fencetest.Sources()
	lib, _ := filepath.Glob(filepath.Join(src, "lib", "*.c"))
	table, _ := filepath.Glob(filepath.Join(src, "*.c"))
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	dir := t.TempDir()
	defined := map[string]string{} // symbol -> file
	wants := map[string][]string{} // file -> symbols it needs
	for _, f := range append(lib, table...) {
		name, _ := filepath.Rel(src, f)
		obj := filepath.Join(dir, strings.ReplaceAll(name, "/", "_")+".o")
		out, err := exec.Command(cc, "-std=gnu11", "-O2", "-fPIC", "-fvisibility=hidden", "-include",
			filepath.Join(src, "lib", "compat.h"), "-c", f, "-o", obj).CombinedOutput()
		if err != nil {
			t.Fatalf("compile %s: %v\n%s", name, err, out)
		}
		o, err := elf.Open(obj)
		if err != nil {
			t.Fatal(err)
		}
		syms, err := o.Symbols()
		o.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		wants[name] = nil
		for _, s := range syms {
			switch {
			case elf.ST_BIND(s.Info) != elf.STB_GLOBAL:
			case s.Section == elf.SHN_UNDEF:
				wants[name] = append(wants[name], s.Name)
			default:
				defined[s.Name] = name
			}
		}
	}
	uses := map[string][]string{}
	for f, syms := range wants {
		for _, s := range syms {
			if d, ok := defined[s]; ok && d != f && !slices.Contains(uses[f], d) {
				uses[f] = append(uses[f], d)
			}
		}
	}
	if len(uses["lib/interpose.c"]) == 0 {
		t.Fatalf("no references found between the files (%v): the check reads nothing", uses)
	}
	// A depth-first walk: a file met again while still on the path closes a cycle.
	state := map[string]int{} // 0 unseen, 1 on the path, 2 done
	var path []string
	var visit func(f string)
	visit = func(f string) {
		state[f] = 1
		path = append(path, f)
		for _, d := range uses[f] {
			switch state[d] {
			case 1:
				i := slices.Index(path, d)
				t.Errorf("the C files reference each other in a cycle: %s -> %s", strings.Join(path[i:], " -> "), d)
			case 0:
				visit(d)
			}
		}
		path = path[:len(path)-1]
		state[f] = 2
	}
	files := make([]string, 0, len(wants))
	for f := range wants {
		files = append(files, f)
	}
	slices.Sort(files)
	for _, f := range files {
		if state[f] == 0 {
			visit(f)
		}
	}
}
