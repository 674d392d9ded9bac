// Command logcheck runs package logcheck as a vet tool: go vet -vettool=bin/logcheck ./... (make lint builds it there)
package main

import (
	"golang.org/x/tools/go/analysis/unitchecker"

	"github.com/gpufrac/gpufrac/internal/logcheck"
)

func main() { unitchecker.Main(logcheck.Analyzer) }
