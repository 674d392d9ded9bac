package logcheck

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"
)

// The calls marked `// want` in testdata/src/a must be reported with that text, and no other.
func TestAnalyzer(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), Analyzer, "a")
}
