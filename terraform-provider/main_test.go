package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	fwprovider "github.com/hashicorp/terraform-plugin-framework/provider"

	"github.com/gpufrac/gpufrac/version"
)

// envPrintVersion makes the test binary print the served provider's version and exit, so a test
// can build it with the GNUmakefile's own -ldflags and read what the provider says.
const envPrintVersion = "GPUFRAC_PROVIDER_TEST_PRINT_VERSION"

func TestMain(m *testing.M) {
	if os.Getenv(envPrintVersion) == "1" {
		fmt.Print(servedVersion())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// servedVersion is the version the provider main serves reports to Terraform.
func servedVersion() string {
	var resp fwprovider.MetadataResponse
	newProvider()().Metadata(context.Background(), fwprovider.MetadataRequest{}, &resp)
	return resp.Version
}

func TestServesTheBuildVersion(t *testing.T) {
	old := version.Version
	t.Cleanup(func() { version.Version = old })
	version.Version = "v9.8.7-test"
	if got := servedVersion(); got != "v9.8.7-test" {
		t.Fatalf("the provider reports version %q, want version.Version (%q)", got, version.Version)
	}
}

// TestMakefileStampReachesTheProvider links this package with the -ldflags `make build` uses and
// checks that the provider reports the version they stamp: a stamp aimed at a variable the
// provider does not read leaves it at its default, which is how it once always said "dev".
func TestMakefileStampReachesTheProvider(t *testing.T) {
	if testing.Short() {
		t.Skip("links a test binary")
	}
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make on PATH to read the GNUmakefile's LDFLAGS")
	}
	// Reading the file, not only handing it to make, lets go test's cache see when it changes.
	makefile := filepath.Join("..", "GNUmakefile")
	if _, err := os.ReadFile(makefile); err != nil {
		t.Fatal(err)
	}
	const stamp = "v9.8.7-stamped"
	out, err := exec.Command(mk, "-s", "--no-print-directory", "-C", "..", "VERSION="+stamp,
		"--eval", "print-ldflags: ; @echo '$(LDFLAGS)'", "print-ldflags").Output()
	if err != nil {
		t.Fatalf("make print-ldflags: %v", err)
	}
	ldflags := strings.TrimSpace(string(out))
	if !strings.Contains(ldflags, stamp) {
		t.Fatalf("the GNUmakefile's LDFLAGS %q do not carry VERSION", ldflags)
	}
	bin := filepath.Join(t.TempDir(), "provider.test")
	args := []string{"test", "-c", "-o", bin, "-ldflags", ldflags}
	if raceEnabled() {
		args = append(args, "-race") // reuse the packages this run already compiled
	}
	if msg, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), envPrintVersion+"=1")
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	if string(got) != stamp {
		t.Fatalf("built with the GNUmakefile's LDFLAGS %q, the provider reports version %q, want %q", ldflags, got, stamp)
	}
}

func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}
