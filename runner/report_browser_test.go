package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/report"
	"github.com/gpufrac/gpufrac/report/browsertest"
)

// The report of a real run is checked as a person sees it: headless Chromium loads it
// (report/browsertest; CI sets GPUFRAC_REQUIRE_CHROMIUM=1 so a missing browser fails).
func TestReportInChromium(t *testing.T) {
	bin := browsertest.Chromium(t)
	// A run with what the report must show: probes beside a known job, a probe's cap lowered
	// in place, a leaker stopped and re-run alone, results written.
	p1 := simJob(t, "p1", "fresh", "--peak", "2GiB", "--ramp", "50ms", "--hold", "300ms", "--result", "$GPUFRAC_RESULT")
	p1.Result = "results/p1.json"
	o, res := runLeakerInPlace(t, p1)
	reportPath := filepath.Join(o.OutDir, report.File)
	page, err := os.ReadFile(reportPath)
	if err != nil {
		t.Fatal(err)
	}
	c, errs := browsertest.Check(t, bin, reportPath)
	if len(errs) > 0 {
		t.Errorf("script errors in the page:\n%s", strings.Join(errs, "\n"))
	}
	t.Logf("rendered: %+v", c)
	want := fmt.Sprintf("%d", len(res.Attempts))
	switch {
	case c.SVGs < 2 || c.Empty > 0:
		t.Errorf("%d charts, %d of them drawn empty", c.SVGs, c.Empty)
	case c.GiBTicks < 3:
		t.Errorf("memory axis has %d GiB ticks, want at least 3", c.GiBTicks)
	case c.TimeTicks < 6: // one time axis on the chart, one on the lanes
		t.Errorf("time axes have %d ticks, want at least 6", c.TimeTicks)
	case c.Logs != len(res.Attempts):
		t.Errorf("%d log links for %s attempts", c.Logs, want)
	case c.Results != 2:
		t.Errorf("%d result links, want 2 (n1 and p1 write results)", c.Results)
	case c.Marks == 0:
		t.Errorf("no cap change marked, though the leaker's probe cap was lowered in place")
	}
	legends := strings.Join(c.Legends, " ")
	for _, w := range []string{"templates:", "outcomes:"} {
		if !strings.Contains(legends, w) {
			t.Errorf("legends %q lack %q", legends, w)
		}
	}
	// Every link of the report resolves to a file of the run.
	for _, href := range regexp.MustCompile(`href="([^"#:]+)"`).FindAllStringSubmatch(string(page), -1) {
		if _, err := os.Stat(filepath.Join(o.OutDir, filepath.FromSlash(href[1]))); err != nil {
			t.Errorf("link %s: %v", href[1], err)
		}
	}
	shot := browsertest.Screenshot(t, bin, reportPath, "report.png")
	t.Logf("screenshot of the report: %s", shot)
}
