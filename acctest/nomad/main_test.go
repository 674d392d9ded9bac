// Package nomad_test drives the real nomad-device-gpufrac binary through the emulated Nomad
// client agent, on simulated GPUs.
package nomad_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/gpufrac/gpufrac/acctest/nomad/emulator"
	"github.com/gpufrac/gpufrac/gpu/simjob"
)

// binary is built once per test run and shared by every test.
var binary string

func TestMain(m *testing.M) {
	simjob.RunIfChild() // a task started as a simulated job runs here and exits
	dir, err := os.MkdirTemp("", "gpufrac-plugin-acc-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary, err = emulator.BuildPlugin(dir, buildFlags...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
