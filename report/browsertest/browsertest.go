package browsertest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Chromium finds the browser, or skips (fails in CI) without it.
func Chromium(t *testing.T) string {
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

// Browse runs headless Chromium on a page with extra flags and returns its stdout and its
// console log. The flags keep it offline, quiet and away from any profile but a fresh one:
// the network is closed, and as root it needs --no-sandbox.
//
// Headless Chromium now and then hangs for good after starting its GPU process (seen once in
// a CI run on a loaded machine; the same screenshot takes 3 s beside two CPU-bound loops), so a
// run that hangs past its bound is tried once more with a fresh profile; a second hang, or any
// other failure, fails the test.
func Browse(t *testing.T, bin, page string, extra ...string) (stdout, console string) {
	t.Helper()
	const tries = 2
	for try := 1; ; try++ {
		out, errs, hung, err := browseOnce(t, bin, page, extra)
		if err == nil {
			return out, errs
		}
		if !hung || try == tries {
			t.Fatalf("chromium %s (try %d of %d): %v\n%s", strings.Join(extra, " "), try, tries, err, errs)
		}
		t.Logf("chromium %s hung past %s and was killed; trying again", strings.Join(extra, " "), browseBound)
	}
}

// browseBound is one run's bound: a hang, not a slow machine, is what reaches it.
const browseBound = 75 * time.Second

func browseOnce(t *testing.T, bin, page string, extra []string) (stdout, console string, hung bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), browseBound)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0", "--window-size=1200,1600"}, extra...)
	args = append(args, "file://"+page)
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), ctx.Err() != nil, err
}

// ConsoleErrorRE matches the page's script errors in Chromium's log; the browser's own complaints
// (no D-Bus in a container, and the like) are not the page's.
var ConsoleErrorRE = regexp.MustCompile(`(?m)^.*CONSOLE.*(Uncaught|Error).*$`)

// CheckScript runs in the page after it loads and records what it found on <body>: that the
// charts have a size, their axes carry ticks, the legends and links are there.
const CheckScript = `<script>
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

// PageCheck is what CheckScript found.
type PageCheck struct {
	SVGs      int      `json:"svgs"`
	Empty     int      `json:"empty"`
	GiBTicks  int      `json:"gibTicks"`
	TimeTicks int      `json:"timeTicks"`
	Legends   []string `json:"legends"`
	Logs      int      `json:"logs"`
	Results   int      `json:"results"`
	Marks     int      `json:"marks"`
}

// ResultsDir is where the screenshot is kept for a person to look at: $GPUFRAC_TEST_RESULTS,
// else out/test-results under the repository (ignored by git).
func ResultsDir(t *testing.T) string {
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

var dataCheckRE = regexp.MustCompile(`data-check="([^"]*)"`)

// Check loads page with CheckScript added before </body> (in a copy beside it, so relative links
// still resolve) and returns what the script found and the page's script errors.
func Check(t *testing.T, bin, page string) (PageCheck, []string) {
	t.Helper()
	src, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	checked := strings.TrimSuffix(page, filepath.Ext(page)) + "-checked.html"
	if err := os.WriteFile(checked, []byte(strings.Replace(string(src), "</body>", CheckScript+"</body>", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	dom, console := Browse(t, bin, checked, "--dump-dom")
	errs := ConsoleErrorRE.FindAllString(console, -1)
	m := dataCheckRE.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the check script did not run (no data-check on <body>); console:\n%s", console)
	}
	var c PageCheck
	if err := json.Unmarshal([]byte(htmlUnescape(m[1])), &c); err != nil {
		t.Fatalf("data-check %q: %v", m[1], err)
	}
	return c, errs
}

// Screenshot saves a picture of page as name in ResultsDir for a person to look at, and fails
// when it is too small to show a report.
func Screenshot(t *testing.T, bin, page, name string) string {
	t.Helper()
	shot := filepath.Join(ResultsDir(t), name)
	Browse(t, bin, page, "--screenshot="+shot, "--hide-scrollbars")
	if st, err := os.Stat(shot); err != nil || st.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v (size %d)", shot, err, sizeOf(st))
	}
	return shot
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
