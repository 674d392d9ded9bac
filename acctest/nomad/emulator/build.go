package emulator

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// BinaryName is the plugin's file name; a Nomad agent matches its `plugin "<name>"` stanza
// against it.
const BinaryName = "nomad-device-gpufrac"

// BuildPlugin builds the plugin binary from this module into dir and returns its path. Tests
// call it once per run (TestMain) and share the binary. flags go to `go build` (e.g. "-race").
func BuildPlugin(dir string, flags ...string) (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(dir, BinaryName)
	args := append(append([]string{"build"}, flags...), "-o", bin, "./nomad-device/cmd/nomad-device-gpufrac")
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", BinaryName, err, msg)
	}
	return bin, nil
}
