package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/report/browsertest"
)

// The report is checked as a person sees it (browsertest); the report of a real run is checked
// the same way in runner/ (TestReportInChromium).

// The report of a 10,000-job queue renders, grouped, and a person can look at it.
func TestBigReportInChromium(t *testing.T) {
	bin := browsertest.Chromium(t)
	page, err := Render(bigResult(10_000))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), File)
	if err := os.WriteFile(p, page, 0o644); err != nil {
		t.Fatal(err)
	}
	c, errs := browsertest.Check(t, bin, p)
	if len(errs) > 0 {
		t.Errorf("script errors in the page:\n%s", strings.Join(errs, "\n"))
	}
	if c.SVGs < 2 || c.Empty > 0 || c.GiBTicks < 3 || c.TimeTicks < 6 {
		t.Errorf("rendered %+v: want the charts drawn with both axes", c)
	}
	browsertest.Screenshot(t, bin, p, "report-10000-jobs.png")
}

// The console check above can fail: a page with a script error is caught.
func TestChromiumCatchesScriptErrors(t *testing.T) {
	bin := browsertest.Chromium(t)
	page := filepath.Join(t.TempDir(), "broken.html")
	if err := os.WriteFile(page, []byte("<!DOCTYPE html><html><body><script>notDefined();</script></body></html>"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, console := browsertest.Browse(t, bin, page, "--dump-dom")
	if !browsertest.ConsoleErrorRE.MatchString(console) {
		t.Fatalf("a page calling an undefined function showed no script error in the console log:\n%s", console)
	}
}
