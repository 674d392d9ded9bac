//go:build race

package nomad_test

// Under `go test -race` the plugin binary is built with the race detector too, so a data race in
// its goroutines fails the test that provoked it (start() checks every launch's stderr).
var buildFlags = []string{"-race"}
