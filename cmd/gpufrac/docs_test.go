package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The docs quote what gpufrac prints. These tests run the quoted commands on the simulated
// backend and check every quoted line against the real output, so a quote cannot drift from
// the program. Figures that are measured (durations, sample counts, rates, the memory a leak
// reached or held) and paths match any value; sizes, caps, units and the words must be exact.

const repoRoot = "../.."

// quote is a fenced block of a doc that starts with "$ gpufrac ...".
type quote struct {
	where string
	args  []string
	lines []string
}

func quotes(t *testing.T, doc string) []quote {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, doc))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []quote
	var cur *quote
	in := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```"):
			if in && cur != nil {
				out = append(out, *cur)
			}
			in, cur = !in, nil
		case in && cur == nil && strings.HasPrefix(line, "$ gpufrac "):
			cur = &quote{where: doc + ":" + strconv.Itoa(n), args: strings.Fields(strings.TrimPrefix(line, "$ gpufrac "))}
		case in && cur != nil && line != "...":
			cur.lines = append(cur.lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	pathRE     = regexp.MustCompile(`(\S*/\S+)`)
	durationRE = regexp.MustCompile(`\b\d+\.\d+s\b`)
	measuredRE = regexp.MustCompile(`\b\d+\.\d+GiB( used)|(at )\d+\.\d+GiB|\(\d+(\.\d+)?[KMG]?i?B of`)
	countsRE   = regexp.MustCompile(`\b\d+( samples| jobs per GPU-hour)`)
	stampRE    = regexp.MustCompile(`^\[\s*\d+\.\d+s\]`)
)

// pattern turns a quoted line into a regexp: measured figures and paths become wildcards,
// runs of spaces any white space, the rest literal.
func pattern(line string) *regexp.Regexp {
	const wild = "\x00"
	w := stampRE.ReplaceAllString(line, wild+"stamp")
	w = measuredRE.ReplaceAllStringFunc(w, func(m string) string {
		switch {
		case strings.HasSuffix(m, " used"):
			return wild + "num" + "GiB used"
		case strings.HasSuffix(m, " of"): // "(0B of 5GiB in use)": what the task held then
			return "(" + wild + "size of"
		default:
			return "at " + wild + "num" + "GiB"
		}
	})
	w = durationRE.ReplaceAllString(w, wild+"num"+"s")
	w = countsRE.ReplaceAllString(w, wild+"int"+"$1")
	w = pathRE.ReplaceAllStringFunc(w, func(m string) string {
		if strings.HasPrefix(m, "(") { // "(state in /tmp/x)": keep the parenthesis
			return "(" + wild + "path"
		}
		if strings.HasSuffix(m, ")") {
			return wild + "path" + ")"
		}
		return wild + "path"
	})
	w = regexp.QuoteMeta(w)
	w = strings.NewReplacer(wild+"stamp", `\[\s*[0-9.]+s\]`, wild+"num", `[0-9.]+`, wild+"int", `[0-9]+`, wild+"size", `[0-9.]+[KMG]?i?B`, wild+"path", `\S+?`).Replace(w)
	w = regexp.MustCompile(`( |\\ )+`).ReplaceAllString(w, `\s+`)
	return regexp.MustCompile(`^\s*` + w + `\s*$`)
}

// checkQuote reports every quoted line that no line of the output matches.
func checkQuote(t *testing.T, where string, lines []string, output string) {
	t.Helper()
	out := strings.Split(strings.NewReplacer("\r", "\n", "\033[K", "").Replace(output), "\n")
	for _, l := range lines {
		re := pattern(l)
		if !slices.ContainsFunc(out, re.MatchString) {
			t.Errorf("%s: the quoted line\n\t%s\nis not in the output (pattern %s):\n%s", where, l, re, output)
		}
	}
}

func TestCLIDocQuotesAreTrue(t *testing.T) {
	for _, q := range quotes(t, "docs/cli.md") {
		if q.args[0] == "run" {
			continue // the demo: TestDemoQuotesAreTrue runs it once for every doc that quotes it
		}
		t.Run(q.where, func(t *testing.T) {
			c := newCLI(t)
			_, stdout, stderr := c.run(q.args...)
			checkQuote(t, q.where, q.lines, stdout+"\n"+stderr)
		})
	}
}

// docs/run.md quotes the demo's live progress and docs/cli.md the start and end of its run:
// one run of the demo prints all those lines. A block of docs/run.md whose introducing line
// names `--borrow off` quotes a run of the demo with that flag.
func TestDemoQuotesAreTrue(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "docs/run.md"))
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string][]string{} // extra flags -> quoted lines
	flags, prev := "", ""
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(l, "```"):
			flags = ""
			if strings.Contains(prev, "`--borrow off`") {
				flags = "--borrow off"
			}
		case stampRE.MatchString(l):
			runs[flags] = append(runs[flags], l)
		case strings.TrimSpace(l) != "":
			prev = l
		}
	}
	if len(runs[""]) < 3 || len(runs["--borrow off"]) < 3 {
		t.Fatalf("docs/run.md quotes %d progress lines of the demo and %d of the demo with --borrow off; the test expects both", len(runs[""]), len(runs["--borrow off"]))
	}
	demo := 0
	for _, q := range quotes(t, "docs/cli.md") {
		if q.args[0] == "run" && slices.Contains(q.args, "examples/queues/demo.hcl") {
			runs[""] = append(runs[""], q.lines...)
			demo++
		}
	}
	if demo == 0 {
		t.Fatal("docs/cli.md quotes no run of the demo; the test expects one")
	}
	for flags, lines := range runs {
		c := newCLI(t)
		args := append([]string{"run", "--out", filepath.Join(t.TempDir(), "out")}, strings.Fields(flags)...)
		_, stdout, stderr := c.run(append(args, filepath.Join(repoRoot, "examples/queues/demo.hcl"))...)
		checkQuote(t, "docs/run.md and docs/cli.md (demo "+flags+")", lines, stdout+"\n"+stderr)
	}
}

// The keys docs/cli.md lists for `gpufrac probe --json` are the keys it prints, all of them
// every time (window_s too, when it is 0).
func TestProbeJSONKeysAsDocumented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "docs/cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`--json` prints `([a-z_, \n]+)`").FindSubmatch(data)
	if m == nil {
		t.Fatal("docs/cli.md: no list of probe --json keys found")
	}
	var doc []string
	for _, k := range strings.Split(string(m[1]), ",") {
		doc = append(doc, strings.TrimSpace(k))
	}
	c := newCLI(t)
	code, out, errs := c.run("probe", "--template", "keys", "--json", "--no-store", "--", "gpufrac", "simjob", "--peak", "1GiB", "--ramp", "50ms", "--hold", "100ms")
	if code != 0 {
		t.Fatalf("probe exit %d: %s", code, errs)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	slices.Sort(doc)
	if !slices.Equal(keys, doc) {
		t.Errorf("probe --json keys %v, docs/cli.md lists %v", keys, doc)
	}
}
