package collateral

import (
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// coverCase is a failure of an attempt on gpu that ran from start to end (seconds into the
// test), and the reason of the event that should explain it ("" for none).
type coverCase struct {
	name       string
	gpu        string
	start, end float64
	want       string
}

func checkCovering(t *testing.T, g *Events, at func(float64) time.Time, after time.Duration, cases []coverCase) {
	t.Helper()
	for _, c := range cases {
		e, ok := g.Covering(c.gpu, "", false, at(c.start), at(c.end), after)
		if got := map[bool]string{true: e.Reason, false: ""}[ok]; got != c.want {
			t.Errorf("%s: covered by %q, want %q", c.name, got, c.want)
		}
	}
}

func TestGPUEventsCovering(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var g Events
	g.Note(enforcer.Event{Kind: enforcer.EventGPUHealth, Stage: "unhealthy", GPU: "A", Time: at(10), Message: "stopped"}, 0)
	g.Note(enforcer.Event{Kind: enforcer.EventGPUHealth, Stage: "healthy", GPU: "A", Time: at(20)}, 0)
	g.Note(enforcer.Event{Kind: enforcer.EventGPUHealth, Stage: "unhealthy", GPU: "A", Time: at(40), Message: "forced"}, 0)
	after := time.Second
	cases := []coverCase{
		{"failed while marked", "A", 5, 12, "stopped"},
		{"failed just before the mark (signal first, mark next)", "A", 5, 9.9, "stopped"},
		{"failed well before the mark", "A", 5, 9, ""},
		{"failed shortly after the mark was cleared", "A", 5, 20.5, "stopped"},
		{"failed long after the mark was cleared", "A", 5, 25, ""},
		{"started after the mark was cleared", "A", 20.2, 20.5, ""},
		{"another GPU", "B", 5, 12, ""},
		{"mark still set at the end", "A", 30, 45, "forced"},
	}
	checkCovering(t, &g, at, after, cases)
}

// The backend's verdict opens its window at the fault's own time, not at the look that noticed
// it a second later, so a job that died of an XID before the look is explained; and a return
// to health by one source (the backend, the enforcer) ends only that source's window.
func TestBackendHealthCovering(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var g Events
	// XID 79 at 10 s, noticed by a look at 11 s.
	g.Backend(gpu.Device{UUID: "A", HealthReason: "XID 79", EventAt: at(10)}, 0, at(11))
	// A row remapping with no event time, noticed at 30 s, over at 40 s; the enforcer's mark
	// of the same GPU from 35 s outlives it.
	g.Backend(gpu.Device{UUID: "B", HealthReason: "row remapping pending"}, 1, at(30))
	g.Note(enforcer.Event{Kind: enforcer.EventGPUHealth, Stage: "unhealthy", GPU: "B", Time: at(35), Message: "GPU processes cannot be read"}, 1)
	g.Backend(gpu.Device{UUID: "B", Healthy: true}, 1, at(40))
	// An event time after the look (clocks apart) is not trusted past the look.
	g.Backend(gpu.Device{UUID: "C", HealthReason: "XID 48", EventAt: at(80)}, 2, at(60))
	after := time.Second
	cases := []coverCase{
		{"died of the XID before the look noticed it", "A", 5, 10.1, "XID 79"},
		{"died well before the XID", "A", 5, 9, ""},
		{"started after the XID, before the look", "A", 10.5, 12, "XID 79"},
		{"failed while the remapping waited", "B", 25, 31, "row remapping pending"},
		{"failed after the remapping's end, inside the enforcer's mark", "B", 36, 50, "GPU processes cannot be read"},
		{"the look's time bounds an event time from the future", "C", 55, 60.1, "XID 48"},
	}
	checkCovering(t, &g, at, after, cases)
}

// In isolated mode a task over its cap (one the fence did not hold) explains an out-of-memory
// failure of another job of its GPU while it was over, and nothing else.
func TestNeighbourOverCapCovering(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var g Events
	g.OverCap(enforcer.Event{Kind: enforcer.EventViolation, Stage: "crossed", GPU: "A", Token: "leak", Time: at(10), Bytes: 70 * size.GiB}, 0, "runaway")
	g.OverCap(enforcer.Event{Kind: enforcer.EventViolation, Stage: "contained", GPU: "A", Token: "leak", Time: at(10.2)}, 0, "runaway")
	after := time.Second
	cases := []struct {
		name       string
		token      string
		oom        bool
		start, end float64
		want       bool
	}{
		{"neighbour out of memory while the runaway was over", "n", true, 5, 10.1, true},
		{"neighbour out of memory just after the kill", "n", true, 5, 10.8, true},
		{"neighbour failing otherwise", "n", false, 5, 10.1, false},
		{"the runaway itself", "leak", true, 5, 10.1, false},
		{"out of memory well after", "n", true, 5, 14, false},
		{"out of memory before", "n", true, 1, 8, false},
	}
	for _, c := range cases {
		e, ok := g.Covering("A", c.token, c.oom, at(c.start), at(c.end), after)
		if ok != c.want || ok && !strings.Contains(e.Reason, "job runaway over its cap") {
			t.Errorf("%s: covered %v (%q), want %v", c.name, ok, e.Reason, c.want)
		}
	}
}

// Judge turns a failure an event explains into a collateral one, until the job has been re-run
// MaxReruns times; a failure nothing explains stays the job's own.
func TestJudge(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	var g Events
	g.Note(enforcer.Event{Stage: enforcer.StageUnhealthy, GPU: "A", Time: t0.Add(10 * time.Second), Message: "forced stop"}, 0)
	cases := []struct {
		name    string
		gpu     string
		reruns  int
		want    bool
		outcome string
		detail  string
	}{
		{"explained", "A", 0, true, "collateral", "failed during a GPU-wide event on GPU0 at 10:00:10.000: forced stop; re-run"},
		{"explained, last words kept", "A", MaxReruns - 1, true, "collateral", "(its last words: boom)"},
		{"explained but re-run enough", "A", MaxReruns, false, "failed", "not re-run: 3 collateral failures already"},
		{"nothing on its GPU", "B", 0, false, "failed", "boom"},
	}
	for _, c := range cases {
		at := record.Attempt{GPU: c.gpu, Start: t0, End: t0.Add(12 * time.Second), Outcome: record.OutcomeFailed, Detail: "boom"}
		got := g.Judge(&at, "tok", false, time.Time{}, time.Second, c.reruns)
		if got != c.want || string(at.Outcome) != c.outcome || !strings.Contains(at.Detail, c.detail) {
			t.Errorf("%s: judged %v, %s %q; want %v, %s containing %q", c.name, got, at.Outcome, at.Detail, c.want, c.outcome, c.detail)
		}
	}
}
