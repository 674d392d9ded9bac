package proto_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// protocLine is the one header line that depends on the installed protoc rather than on our
// .proto files and pinned generators; Debian releases differ there and that is not staleness.
var protocLine = regexp.MustCompile(`(?m)^// \tprotoc +v?[0-9.]+.*$`)

// TestGeneratedCodeIsFresh regenerates the protocol code into a temp dir and fails when the
// committed files differ, so an edited .proto can never ship with old Go code.
func TestGeneratedCodeIsFresh(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		t.Skip("protoc is not installed (scripts/install-tools.sh installs it; CI runs that first): cannot check generated code")
	}
	out := t.TempDir()
	cmd := exec.Command("bash", "../generate.sh")
	cmd.Env = append(os.Environ(), "OUT_DIR="+out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generate.sh: %v\n%s", err, msg)
	}
	fresh, err := filepath.Glob(filepath.Join(out, "*", "*.go"))
	if err != nil || len(fresh) == 0 {
		t.Fatalf("generate.sh produced no Go files in %s (err %v)", out, err)
	}
	committed, _ := filepath.Glob(filepath.Join("*", "*.pb.go"))
	if len(committed) != len(fresh) {
		t.Errorf("committed %d generated files, generator makes %d: run `make generate`", len(committed), len(fresh))
	}
	for _, f := range fresh {
		rel, _ := filepath.Rel(out, f)
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(rel)
		if err != nil {
			t.Errorf("%s is not committed: run `make generate`", rel)
			continue
		}
		if !bytes.Equal(protocLine.ReplaceAll(got, nil), protocLine.ReplaceAll(want, nil)) {
			t.Errorf("%s is stale: run `make generate` and commit the result", rel)
		}
	}
}
