//go:build !race

package nomad_test

var buildFlags []string
