// Command nomad-device-gpufrac is the gpufrac Nomad device plugin. Nomad launches it from its
// plugin_dir; run by hand it only answers -version. See docs/plugin.md.
package main

import (
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/gpufrac/gpufrac/nomad-device/deviceplugin"
	"github.com/gpufrac/gpufrac/version"
)

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "-version" || os.Args[1] == "--version" || os.Args[1] == "version") {
		fmt.Println("nomad-device-gpufrac", version.Plugin())
		return
	}
	// go-plugin reads JSON log lines from stderr and re-logs them through the Nomad agent's
	// logger, so Nomad's log_level decides what operators see. Stdout is go-plugin's handshake.
	level := hclog.LevelFromString(os.Getenv("GPUFRAC_LOG_LEVEL"))
	if level == hclog.NoLevel {
		level = hclog.Debug
	}
	logger := hclog.New(&hclog.LoggerOptions{
		Name:       "nomad-device-gpufrac",
		Level:      level,
		JSONFormat: true,
		Output:     os.Stderr,
	})
	srv := deviceplugin.NewServer(deviceplugin.Options{Logger: logger, Version: version.Plugin()})
	deviceplugin.Serve(srv, logger)
}
