// Package version holds the build's version, stamped by the GNUmakefile with -ldflags.
package version
