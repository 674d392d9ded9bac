package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// The report is checked as a person sees it: headless Chromium (Debian's chromium package,
// which scripts/install-tools.sh installs) loads the report of a simulated run. CI sets
// GPUFRAC_REQUIRE_CHROMIUM=1 so that a missing browser fails instead of skipping.

// chromium finds the browser, or skips (fails in CI) without it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("GPUFRAC_REQUIRE_CHROMIUM") != "" {
		t.Fatal("chromium not found on PATH, and GPUFRAC_REQUIRE_CHROMIUM is set: run scripts/install-tools.sh")
	}
	t.Skip("chromium not found on PATH (scripts/install-tools.sh installs it; GPUFRAC_REQUIRE_CHROMIUM=1 makes this a failure)")
	return ""
}

// browse runs headless Chromium on a page with extra flags and returns its stdout and its
// console log. The flags keep it offline, quiet and away from any profile but a fresh one:
// the network is closed, and as root it needs --no-sandbox.
func browse(t *testing.T, bin, page string, extra ...string) (stdout, console string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0", "--window-size=1200,1600"}, extra...)
	args = append(args, "file://"+page)
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(extra, " "), err, errb.String())
	}
	return out.String(), errb.String()
}

// consoleErrors are the page's script errors in Chromium's log; the browser's own complaints
// (no D-Bus in a container, and the like) are not the page's.
var consoleErrorRE = regexp.MustCompile(`(?m)^.*CONSOLE.*(Uncaught|Error).*$`)

// checkScript runs in the page after it loads and records what it found on <body>: that the
// charts have a size, their axes carry ticks, the legends and links are there.
const checkScript = `<script>
(function () {
  var r = {svgs: 0, empty: 0, gibTicks: 0, timeTicks: 0, legends: [], logs: 0, results: 0, marks: 0};
  document.querySelectorAll('svg').forEach(function (s) {
    r.svgs++;
    var b = s.getBBox();
    if (b.width <= 0 || b.height <= 0) r.empty++;
  });
  document.querySelectorAll('[data-axis="memory"] text').forEach(function (e) { if (/GiB$/.test(e.textContent)) r.gibTicks++; });
  document.querySelectorAll('[data-axis="time"] text').forEach(function (e) { if (/^[0-9.]+s$/.test(e.textContent)) r.timeTicks++; });
  document.querySelectorAll('[data-legend]').forEach(function (e) { r.legends.push(e.dataset.legend + ':' + e.querySelectorAll('span').length); });
  document.querySelectorAll('#attempts a').forEach(function (a) {
    if (a.textContent === 'log') r.logs++;
    if (a.textContent === 'result') r.results++;
  });
  r.marks = document.querySelectorAll('[data-mark="cap-change"]').length;
  document.body.setAttribute('data-check', JSON.stringify(r));
})();
</script>`

type pageCheck struct {
	SVGs      int      `json:"svgs"`
	Empty     int      `json:"empty"`
	GiBTicks  int      `json:"gibTicks"`
	TimeTicks int      `json:"timeTicks"`
	Legends   []string `json:"legends"`
	Logs      int      `json:"logs"`
	Results   int      `json:"results"`
	Marks     int      `json:"marks"`
}

var dataCheckRE = regexp.MustCompile(`data-check="([^"]*)"`)

// resultsDir is where the screenshot is kept for a person to look at: $GPUFRAC_TEST_RESULTS,
// else out/test-results under the repository (ignored by git).
func resultsDir(t *testing.T) string {
	d := os.Getenv("GPUFRAC_TEST_RESULTS")
	if d == "" {
		d = filepath.Join("..", "out", "test-results")
	}
	d = filepath.Join(d, "report")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(d)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func TestReportInChromium(t *testing.T) {
	bin := chromium(t)
	// A run with what the report must show: probes beside a known job, a probe's cap lowered
	// in place, a leaker stopped and re-run alone, results written.
	sim := newSim(t, "H100=80GiB")
	q := Queue{
		Jobs: []Job{
			simJob(t, "n1", "known", "--peak", "4GiB", "--ramp", "50ms", "--hold", "1500ms", "--result", "$GPUFRAC_RESULT"),
			simJob(t, "lk", "leak", "--peak", "1GiB", "--ramp", "50ms", "--hold", "700ms", "--leak-to", "12GiB", "--leak-rate", "8GiB"),
			simJob(t, "p1", "fresh", "--peak", "2GiB", "--ramp", "50ms", "--hold", "300ms", "--result", "$GPUFRAC_RESULT"),
		},
		Templates: map[string]TemplateSpec{"known": {Name: "known", PeakBytes: 4 * size.GiB}},
	}
	q.Jobs[0].Result = "results/n1.json"
	q.Jobs[2].Result = "results/p1.json"
	o := withoutBorrowing(testOptions(t, sim, ArmPacked))
	o.StateDir, o.ProbeWindow = t.TempDir(), 300*time.Millisecond
	res := runQueue(t, q, o)
	if res.Completed != 3 {
		t.Fatalf("completed %d of 3: %+v", res.Completed, res.Attempts)
	}
	report := filepath.Join(o.OutDir, ReportFile)
	page, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	// The check script goes into a copy next to the report, so relative links still resolve.
	checked := filepath.Join(o.OutDir, "report-checked.html")
	withCheck := strings.Replace(string(page), "</body>", checkScript+"</body>", 1)
	if err := os.WriteFile(checked, []byte(withCheck), 0o644); err != nil {
		t.Fatal(err)
	}
	dom, console := browse(t, bin, checked, "--dump-dom")
	if errs := consoleErrorRE.FindAllString(console, -1); len(errs) > 0 {
		t.Errorf("script errors in the page:\n%s", strings.Join(errs, "\n"))
	}
	m := dataCheckRE.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the check script did not run (no data-check on <body>); console:\n%s", console)
	}
	var c pageCheck
	if err := json.Unmarshal([]byte(htmlUnescape(m[1])), &c); err != nil {
		t.Fatalf("data-check %q: %v", m[1], err)
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
	shot := filepath.Join(resultsDir(t), "report.png")
	browse(t, bin, report, "--screenshot="+shot, "--hide-scrollbars")
	if st, err := os.Stat(shot); err != nil || st.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v (size %d)", shot, err, sizeOf(st))
	}
	t.Logf("screenshot of the report: %s", shot)
}

// The report of a 10,000-job queue renders, grouped, and a person can look at it.
func TestBigReportInChromium(t *testing.T) {
	bin := chromium(t)
	page, err := renderReport(bigResult(10_000))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), ReportFile)
	if err := os.WriteFile(p, []byte(strings.Replace(string(page), "</body>", checkScript+"</body>", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	dom, console := browse(t, bin, p, "--dump-dom")
	if errs := consoleErrorRE.FindAllString(console, -1); len(errs) > 0 {
		t.Errorf("script errors in the page:\n%s", strings.Join(errs, "\n"))
	}
	m := dataCheckRE.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the check script did not run; console:\n%s", console)
	}
	var c pageCheck
	if err := json.Unmarshal([]byte(htmlUnescape(m[1])), &c); err != nil {
		t.Fatal(err)
	}
	if c.SVGs < 2 || c.Empty > 0 || c.GiBTicks < 3 || c.TimeTicks < 6 {
		t.Errorf("rendered %+v: want the charts drawn with both axes", c)
	}
	shot := filepath.Join(resultsDir(t), "report-10000-jobs.png")
	browse(t, bin, p, "--screenshot="+shot, "--hide-scrollbars")
	if st, err := os.Stat(shot); err != nil || st.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v (size %d)", shot, err, sizeOf(st))
	}
}

// The console check above can fail: a page with a script error is caught.
func TestChromiumCatchesScriptErrors(t *testing.T) {
	bin := chromium(t)
	page := filepath.Join(t.TempDir(), "broken.html")
	if err := os.WriteFile(page, []byte("<!DOCTYPE html><html><body><script>notDefined();</script></body></html>"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, console := browse(t, bin, page, "--dump-dom")
	if !consoleErrorRE.MatchString(console) {
		t.Fatalf("a page calling an undefined function showed no script error in the console log:\n%s", console)
	}
}

func sizeOf(st os.FileInfo) int64 {
	if st == nil {
		return 0
	}
	return st.Size()
}

func htmlUnescape(s string) string {
	return strings.NewReplacer("&quot;", `"`, "&amp;", "&", "&lt;", "<", "&gt;", ">", "&#39;", "'").Replace(s)
}
