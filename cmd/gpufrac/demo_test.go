package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `make demo` keeps its own state directory inside the tree: run as root without one, gpufrac
// would write the demo's footprints and violations into /var/lib/gpufrac, the ledger a plugin on
// that machine uses. The test reads the recipe, as make would run it.
func TestMakeDemoKeepsItsOwnState(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "GNUmakefile"))
	if err != nil {
		t.Fatal(err)
	}
	var recipe []string
	in := false
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(l, "demo:"):
			in = true
		case in && strings.HasPrefix(l, "\t"):
			recipe = append(recipe, strings.TrimSpace(l))
		case in:
			in = false
		}
	}
	runs := 0
	for _, l := range recipe {
		f := strings.Fields(l)
		if len(f) < 2 || !strings.HasSuffix(f[0], "gpufrac") {
			continue
		}
		runs++
		dir := ""
		for i, a := range f {
			if a == "--state-dir" && i+1 < len(f) {
				dir = f[i+1]
			} else if v, ok := strings.CutPrefix(a, "--state-dir="); ok {
				dir = v
			}
		}
		if dir == "" || filepath.IsAbs(dir) || strings.HasPrefix(filepath.Clean(dir), "..") {
			t.Errorf("make demo runs %q: want --state-dir with a directory of its own inside the tree, not %q", l, dir)
		}
	}
	if runs == 0 {
		t.Fatalf("no gpufrac command in the demo recipe %q", recipe)
	}
}
