package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/gpufrac/gpufrac/controller"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/gpufrac/gpufrac/policy/violations"
	"github.com/gpufrac/gpufrac/size"
)

func TestControllerDryRunPrintsJSONEvents(t *testing.T) {
	vs := varserver.New(varserver.Options{MaxWait: time.Second})
	defer vs.Close()
	// A violation whose allocation Nomad has already forgotten: the dry run says it would skip
	// it, and writes nothing (the controller package tests the re-registration itself).
	rec := violations.Record{AllocID: "a-1", Task: "main", GPU: "GPU-x", GPUUnits: 38, CapBytes: 4 * size.GiB, CrossedAt: time.Now()}
	vs.Put("default", rec.Path(), rec.Items())

	t.Setenv("NOMAD_TOKEN", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr testutil.Buffer // written by the controller's goroutines
	done := make(chan error, 1)
	g := &globals{stateDir: t.TempDir(), backend: "auto", defaultLevel: "warn"}
	port := testutil.FreePort(t)
	go func() {
		done <- cmdController(ctx, g, []string{"--nomad-addr", vs.URL(), "--dry-run", "--json", "--retry", "100ms",
			"--metrics-addr", ":" + port}, &stdout, &stderr)
	}()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(stdout.String(), "\n") {
		if time.Now().After(deadline) {
			t.Fatalf("no event on stdout within 15s; stderr:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// ":port" serves on every interface, loopback included, and the metrics count the event.
	resp, err := http.Get("http://127.0.0.1:" + port + "/metrics")
	if err != nil {
		t.Fatalf("metrics on port %s: %v", port, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := regexp.MustCompile(`(?m)^gpufrac_controller_events_total\{kind="skipped"\} [1-9]`); !want.Match(body) {
		t.Errorf("controller metrics do not count the skipped event (%s):\n%s", want, body)
	}
	// Prometheus' own lint rules find nothing in what the controller serves.
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("promlint cannot read the controller's metrics: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	// Its log level defaults to info, as its help says.
	if !strings.Contains(stderr.String(), "controller following violations") {
		t.Errorf("no INFO line on stderr at the default log level:\n%s", stderr.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("controller: %v", err)
	}
	var ev controller.Event
	line, _, _ := strings.Cut(stdout.String(), "\n")
	if err := json.Unmarshal([]byte(line), &ev); err != nil {
		t.Fatalf("stdout line %q is not a JSON event: %v", line, err)
	}
	if ev.Kind != controller.EventSkipped || ev.Alloc != "a-1" || !strings.Contains(ev.Message, "no longer exists") {
		t.Errorf("event %+v, want skipped: allocation a-1 no longer exists", ev)
	}
	if v, _ := vs.Get("default", rec.Path()); v.Items[violations.KeyHandled] != "" {
		t.Errorf("a dry run marked the violation %q", v.Items[violations.KeyHandled])
	}
	if strings.Contains(stdout.String(), "[INFO]") {
		t.Error("logs went to stdout, where the JSON events go")
	}
}

func TestControllerBadFlags(t *testing.T) {
	c := newCLI(t)
	for _, args := range [][]string{{"controller", "--retry", "1ms"}, {"controller", "--metrics-addr", "9411"}, {"controller", "extra"}} {
		code, _, stderr := c.run(args...)
		if code != exitUsage || !strings.Contains(stderr, args[len(args)-1]) {
			t.Errorf("gpufrac %v: exit %d, stderr %q; want a usage error naming %q", args, code, stderr, args[len(args)-1])
		}
	}
}

// `gpufrac controller --help` lists the flags the controller reads and no other, with the
// defaults it uses; a flag of the other commands is refused by name.
func TestControllerHelpListsOnlyWhatItReads(t *testing.T) {
	c := newCLI(t)
	code, stdout, stderr := c.run("controller", "--help")
	if code != 0 {
		t.Fatalf("gpufrac controller --help: exit %d\n%s", code, stderr)
	}
	help := stdout + stderr
	var listed []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z-]+)`).FindAllStringSubmatch(help, -1) {
		listed = append(listed, m[1])
	}
	want := []string{"dry-run", "json", "log-level", "metrics-addr", "nomad-addr", "nomad-namespace", "nomad-token-file", "retry"}
	if !slices.Equal(listed, want) {
		t.Errorf("help lists %q, want exactly what the controller reads, %q:\n%s", listed, want, help)
	}
	if !regexp.MustCompile(`log level: [^\n]*\(default "?info"?\)`).MatchString(help) || strings.Contains(help, "default warn") {
		t.Errorf("help does not give the controller's log level default, info:\n%s", help)
	}
	for _, flag := range []string{"--state-dir", "--gpu-backend", "--sim-dir", "--simulated-gpus"} {
		code, _, stderr := c.run("controller", flag, "x")
		if code != exitUsage || !strings.Contains(stderr, strings.TrimPrefix(flag, "--")) {
			t.Errorf("gpufrac controller %s x: exit %d, stderr %q; want a usage error naming it", flag, code, stderr)
		}
	}
}
