package deviceplugin

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const dashboardFile = "../../examples/grafana/gpufrac-node.json"

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// promNumber is a number or a duration (5m, 1h30m): nothing else starts with a digit.
	promNumber  = regexp.MustCompile(`\b\d[\w.]*(?:[eE][+-]\d+)?`)
	promIdent   = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	labelValues = regexp.MustCompile(`^\s*label_values\(\s*(?:([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{[^}]*\})?\s*,\s*)?[a-zA-Z_]\w*\s*\)\s*$`)
	// promWords are PromQL's keywords and binary operators that read like identifiers.
	promWords = []string{"and", "or", "unless", "bool", "offset", "atan2"}
)

// metricNames are the metric names a PromQL expression selects: its identifiers once strings,
// label matchers, ranges, grouping clauses and numbers are gone, less function and aggregation
// names (followed by a parenthesis) and keywords.
func metricNames(expr string) []string {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		if m[1] == "" {
			return nil
		}
		return []string{m[1]}
	}
	e := promString.ReplaceAllString(expr, `""`)
	e = promMatchers.ReplaceAllString(e, " ")
	e = promGrouping.ReplaceAllString(e, " ")
	e = promNumber.ReplaceAllString(e, " ")
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(e, -1) {
		id := e[loc[0]:loc[1]]
		if strings.HasPrefix(strings.TrimLeft(e[loc[1]:], " \t\n"), "(") || slices.Contains(promWords, id) {
			continue
		}
		if loc[0] > 0 && e[loc[0]-1] == '$' {
			continue // a Grafana variable
		}
		out = append(out, id)
	}
	return out
}

func TestMetricNamesOfPromQL(t *testing.T) {
	for _, tt := range []struct {
		expr string
		want []string
	}{
		{`sum by (gpu) (a_bytes{x="y", z=~"a|b"})`, []string{"a_bytes"}},
		{`histogram_quantile(0.95, sum by (le) (rate(h_bucket{i=~"$i"}[$__rate_interval])))`, []string{"h_bucket"}},
		{`sum without (job) (a) / on (gpu) group_left (model) b > 0 and c offset 5m`, []string{"a", "b", "c"}},
		{`label_values(m_total{instance=~"$instance"}, gpu)`, []string{"m_total"}},
		{`label_values(instance)`, nil},
		{`1e3 * scalar(x)`, []string{"x"}},
	} {
		if got := metricNames(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tt.expr, got, tt.want)
		}
	}
}

// queries collects every PromQL expression of a Grafana dashboard: panel targets' expr (rows'
// panels included) and the queries of query variables.
func queries(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		if e, ok := x["expr"].(string); ok {
			*out = append(*out, e)
		}
		if x["type"] == "query" {
			switch q := x["query"].(type) {
			case string:
				*out = append(*out, q)
			case map[string]any:
				if s, ok := q["query"].(string); ok {
					*out = append(*out, s)
				}
			}
		}
		for k, c := range x {
			if k != "query" {
				queries(c, out)
			}
		}
	case []any:
		for _, c := range x {
			queries(c, out)
		}
	}
}

// Every query of the example Grafana dashboard names metrics the plugin exports, taken from the
// registry /metrics serves while a task borrows and counters exist, and the dashboard shows
// the memory of each GPU (reserved, borrowed, unmanaged, free), each task's use against its
// cap and the violations.
func TestGrafanaDashboardUsesExportedMetrics(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var exprs []string
	queries(dash, &exprs)
	if len(exprs) < 8 {
		t.Fatalf("%s holds %d queries; was it reshaped?", dashboardFile, len(exprs))
	}

	s, _ := newSim(t, "H100=80GiB", `borrow = "now"`)
	m, _ := firstFingerprint(t, s)
	mustReserve(t, s, ids(m.DeviceGroup[0], 2))
	fams, err := s.runtime().newRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range fams {
		exported[f.GetName()] = true
		if len(f.GetMetric()) > 0 && f.GetMetric()[0].GetHistogram() != nil {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				exported[f.GetName()+suffix] = true
			}
		}
	}
	used := map[string]bool{}
	for _, e := range exprs {
		names := metricNames(e)
		if len(names) == 0 && !strings.HasPrefix(strings.TrimSpace(e), "label_values(") {
			t.Errorf("query %q names no metric", e)
		}
		for _, n := range names {
			used[n] = true
			if !exported[n] {
				t.Errorf("query %q names %s, which the plugin does not export", e, n)
			}
		}
	}
	for _, want := range []string{"gpufrac_gpu_reserved_bytes", "gpufrac_gpu_borrowed_bytes", "gpufrac_gpu_unmanaged_bytes",
		"gpufrac_gpu_free_bytes", "gpufrac_task_used_bytes", "gpufrac_task_cap_bytes", "gpufrac_violations_total"} {
		if !used[want] {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
}
