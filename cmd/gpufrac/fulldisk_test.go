package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/record"
)

// fullDisk is the shell commands that fill the disk under the ledger in state, from inside a
// job: each file the ledger commits goes through a temp file (ledger.json.tmp,
// violations.json.tmp) and those become links to /dev/full, where every write fails with
// ENOSPC as on a full file system. A job does it because the ledger clears stale temp files
// when it opens, so the disk must fill after the command opened its ledger, as a real disk
// fills mid-run. The ledger file as it was at that moment is copied to snap first, and the
// returned free function empties the disk again.
func fullDisk(t *testing.T, state, snap string) (script string, free func()) {
	t.Helper()
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full to stand in for a full disk")
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to run the job that fills the disk")
	}
	tmps := []string{filepath.Join(state, ledger.StateFile+".tmp"), filepath.Join(state, ledger.ViolationsFile+".tmp")}
	// The disk fills first and the ledger is copied after: a write between the two (the
	// enforcer noting the job's token) would otherwise land after the copy and look like a
	// write to a full disk.
	script = "ln -s /dev/full " + tmps[0] + " && ln -s /dev/full " + tmps[1] + " && cp " + filepath.Join(state, ledger.StateFile) + " " + snap
	return script, func() {
		for _, p := range tmps {
			if err := os.Remove(p); err != nil {
				t.Fatalf("emptying the disk: %v", err)
			}
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A disk that fills while `gpufrac probe` runs its job: the footprint cannot be recorded, and
// the probe says so naming the file and the cause, exits 1, and records it nowhere (neither in
// the ledger nor as a template), while the ledger on disk is the one from before the disk
// filled, which holds the probe's reservation: the job ran only under a recorded one.
func TestProbeOnAFullDisk(t *testing.T) {
	c := newCLI(t)
	snap := filepath.Join(t.TempDir(), "ledger-before")
	fill, free := fullDisk(t, c.state, snap)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := c.run("probe", "--template", "t", "--", "sh", "-c", fill+" && exec "+exe+" simjob --peak 1GiB --hold 100ms")
	tmp := filepath.Join(c.state, ledger.StateFile+".tmp")
	if code != 1 || !strings.Contains(stderr, "recording the profile") || !strings.Contains(stderr, tmp) ||
		!strings.Contains(stderr, "no space left on device") {
		t.Fatalf("exit %d, stderr:\n%s\nwant 1 and an error naming %s and the full disk", code, stderr, tmp)
	}
	if strings.Contains(stdout, "stored") {
		t.Errorf("stdout claims the footprint was stored:\n%s", stdout)
	}
	if after := readFile(t, filepath.Join(c.state, ledger.StateFile)); after != readFile(t, snap) {
		t.Fatalf("the ledger file changed while the disk was full:\nbefore %s\nafter  %s", readFile(t, snap), after)
	}
	snapshot, err := ledger.ReadSnapshot(c.state)
	if err != nil {
		t.Fatalf("the ledger left by the probe does not read: %v", err)
	}
	if len(snapshot.Profiles) != 0 {
		t.Errorf("profiles %+v recorded on a full disk", snapshot.Profiles)
	}
	if len(snapshot.Reservations) != 1 || snapshot.Reservations[0].Task.Template != "t" {
		t.Errorf("reservations %+v: want the probe's, recorded before its job started", snapshot.Reservations)
	} else if h := snapshot.Reservations[0].Holder; h == nil || h.PID != os.Getpid() {
		// The reservation it could not end names the probe, so the next command that finds the
		// probe gone releases it instead of waiting out the grace.
		t.Errorf("the probe's reservation has holder %v, want this process (%d)", h, os.Getpid())
	}
	if _, err := os.Stat(filepath.Join(c.state, PolicyFileName)); !os.IsNotExist(err) {
		t.Errorf("a template was stored in %s although the footprint was not recorded (%v)", PolicyFileName, err)
	}
	free()
}

// A disk that fills while `gpufrac run` runs its first job: the next job is not admitted while
// no reservation can be recorded, the run says why naming the file and the cause, and the
// ledger on disk stays the one from before. Once the disk has room the next job is admitted,
// with its reservation in the ledger before it starts, and the run completes.
func TestRunOnAFullDisk(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	snap, seen, ran := filepath.Join(dir, "ledger-before"), filepath.Join(dir, "ledger-seen-by-after"), filepath.Join(dir, "after-ran")
	fill, free := fullDisk(t, c.state, snap)
	q := writeQueue(t, `
job "fill" {
  template = "t"
  command  = ["sh", "-c", "`+fill+`"]
}
job "after" {
  template = "t"
  command  = ["sh", "-c", "cp `+filepath.Join(c.state, ledger.StateFile)+` `+seen+` && touch `+ran+`"]
}
template "t" {
  peak = "1GiB"
}
`)
	out := filepath.Join(dir, "out")
	b := c.startRun(t, "--max-concurrent", "1", "--out", out, q)
	tmp := filepath.Join(c.state, ledger.StateFile+".tmp")
	var log strings.Builder
	for {
		line, err := b.stdout.ReadString('\n')
		log.WriteString(line)
		if err != nil {
			t.Fatalf("the run ended without saying it cannot record a reservation:\n%s", log.String())
		}
		if strings.Contains(line, "the ledger cannot record a reservation") {
			if !strings.Contains(line, tmp) || !strings.Contains(line, "no space left on device") {
				t.Errorf("waiting line %q does not name %s and the full disk", line, tmp)
			}
			break
		}
	}
	if _, err := os.Stat(ran); !os.IsNotExist(err) {
		t.Fatalf("job after ran while no reservation could be recorded (%v)", err)
	}
	if after := readFile(t, filepath.Join(c.state, ledger.StateFile)); after != readFile(t, snap) {
		t.Fatalf("the ledger file changed while the disk was full:\nbefore %s\nafter  %s", readFile(t, snap), after)
	}

	free()
	if _, err := b.stdout.WriteTo(&log); err != nil {
		t.Fatal(err)
	}
	b.wait(t)
	if code := b.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit %d once the disk had room:\n%s", code, log.String())
	}
	var res record.Result
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(out, record.ResultsFile))), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 2 {
		t.Fatalf("results for %d jobs, want fill and after", len(res.Jobs))
	}
	for _, j := range res.Jobs {
		if j.Outcome != record.OutcomeOK {
			t.Errorf("job %s: %s, want ok", j.Name, j.Outcome)
		}
	}
	// The ledger as job after found it when it started holds after's reservation.
	var f struct {
		Reservations []ledger.Reservation `json:"reservations"`
	}
	if err := json.Unmarshal([]byte(readFile(t, seen)), &f); err != nil {
		t.Fatal(err)
	}
	recorded := false
	for _, r := range f.Reservations {
		recorded = recorded || r.Task.JobName == "after"
	}
	if !recorded {
		t.Errorf("job after started before its reservation was in the ledger: %+v", f.Reservations)
	}
	// fill's reservation could not be released while the disk was full: the run gave it back
	// once there was room, so nothing outlives the run.
	if left := reservations(t, c.state); len(left) != 0 {
		t.Errorf("the run left %d reservations in the ledger: %+v", len(left), left)
	}
}
