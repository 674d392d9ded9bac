// Command logcheck runs package logcheck as a vet tool: go vet -vettool=bin/tools/logcheck ./...
package main

import (
	"golang.org/x/tools/go/analysis/unitchecker"

	"github.com/gpufrac/gpufrac/internal/logcheck"
)

func main() { unitchecker.Main(logcheck.Analyzer) }
