package main

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/gpufrac/gpufrac/"

// TestArchitectureMapsEveryPackage keeps docs/architecture.md's package map true to the tree: a
// row for every package and no row for one that is gone, each with the module's packages its
// non-test files import (as go list's Imports reports them), so a newcomer can trust it.
func TestArchitectureMapsEveryPackage(t *testing.T) {
	doc := packageMap(t)
	tree := modulePackages(t)
	for dir, imports := range tree {
		row, ok := doc[dir]
		if !ok {
			t.Errorf("docs/architecture.md has no row for package %s/", dir)
			continue
		}
		if !slices.Equal(row, imports) {
			t.Errorf("docs/architecture.md: %s/ imports %q, the tree says %q", dir, row, imports)
		}
	}
	for dir := range doc {
		if _, ok := tree[dir]; !ok {
			t.Errorf("docs/architecture.md has a row for %s/, which is no package of the tree", dir)
		}
	}
}

// packageMap reads the rows of the package table: the package's directory and its imports.
func packageMap(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "docs/architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string][]string{}
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "| package | owns | imports (of this module) |") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("docs/architecture.md: a package row without 3 cells: %s", line)
		}
		dir := strings.TrimSuffix(strings.Trim(strings.TrimSpace(cells[0]), "`"), "/")
		var imports []string
		if s := strings.TrimSpace(cells[2]); s != "—" {
			imports = strings.Split(s, ", ")
		}
		if _, dup := rows[dir]; dup {
			t.Errorf("docs/architecture.md: two rows for %s/", dir)
		}
		rows[dir] = imports
	}
	if len(rows) == 0 {
		t.Fatal("docs/architecture.md: no package table found")
	}
	return rows
}

// modulePackages lists every directory of the module holding Go files, with the module's
// packages its non-test files import, sorted. Other modules (tools/) and testdata are not the
// module's.
func modulePackages(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); rel != "." && err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), ".go") {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		imports := out[dir]
		if !strings.HasSuffix(d.Name(), "_test.go") {
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, is := range f.Imports {
				p, _ := strconv.Unquote(is.Path.Value)
				if rest, ok := strings.CutPrefix(p, modulePath); ok && !slices.Contains(imports, rest) {
					imports = append(imports, rest)
				}
			}
		}
		out[dir] = imports
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir := range out {
		slices.Sort(out[dir])
	}
	return out
}
