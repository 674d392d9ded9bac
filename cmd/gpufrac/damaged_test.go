package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/size"
)

// A damaged violations.json costs only the violations: status still answers (exit 0) and warns
// what was lost, and run keeps the footprints (the job starts from its template's, no probe),
// says what was lost and where the damaged file is kept, and completes.
func TestDamagedViolationsFileCostsOnlyTheViolations(t *testing.T) {
	c := newCLI(t)
	l, err := ledger.Open(c.state, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.RecordProfile(ledger.Profile{Template: "t", PeakBytes: size.GiB, Source: ledger.ProfileProbe, MeasuredAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Hour)
	if err := l.RecordViolation(ledger.Violation{Token: "tok", GPU: "GPU-x", Action: "sigkill", CapBytes: size.GiB, PeakBytes: 2 * size.GiB,
		CrossedAt: at, ContainedAt: at.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	vpath := filepath.Join(c.state, ledger.ViolationsFile)
	if err := os.WriteFile(vpath, []byte("\x00\x00not json"), 0o600); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := c.run("status", "--no-usage")
	if code != 0 || !strings.Contains(stderr, "warning:") || !strings.Contains(stderr, vpath) || !strings.Contains(stderr, "kept the 0 violation(s)") ||
		strings.Contains(stderr, "move the ledger") {
		t.Fatalf("status: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 0 and a warning naming the file and what was lost, not to move the ledger aside", code, stdout, stderr)
	}

	q := writeQueue(t, `
template "t" {}
job "a" {
  template = "t"
  command  = ["gpufrac", "simjob", "--peak", "1GiB", "--hold", "100ms"]
}
`)
	code, stdout, stderr = c.run("run", "--out", filepath.Join(t.TempDir(), "out"), q)
	if code != 0 || !strings.Contains(stdout, "kept the 0 violation(s)") || !strings.Contains(stdout, vpath+ledger.DamagedSuffix) {
		t.Fatalf("run: exit %d\nstdout:\n%s\nstderr:\n%s\nwant 0, what was lost and where the damaged file is kept", code, stdout, stderr)
	}
	if strings.Contains(stdout, "probe ") || strings.Contains(stdout, "move the ledger") {
		t.Errorf("run probed again or told the user to move the ledger aside:\n%s", stdout)
	}
	if !strings.Contains(stdout, "[   0.0s] ledger ") {
		t.Errorf("the ledger's repair line is not stamped at the run's start:\n%s", stdout)
	}
	snap, err := ledger.ReadSnapshot(c.state)
	if err != nil || len(snap.Profiles) != 1 || snap.Profiles[0].Template != "t" {
		t.Fatalf("after the run: %v, profiles %+v; want the template's footprint kept", err, snap.Profiles)
	}
}
