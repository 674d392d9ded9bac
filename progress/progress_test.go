package progress

import (
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/record"
	"github.com/gpufrac/gpufrac/size"
)

// Lines printed before the run begins (a dead run's reservations released) come under the
// header, stamped with the run's time; a status line is kept only on a terminal.
func TestHeldLinesComeUnderTheHeader(t *testing.T) {
	var b strings.Builder
	since := time.Duration(0)
	p := New(&b, func() time.Duration { return since })
	p.Line("%-8s %s", "released", "reservation of a")
	if b.Len() != 0 {
		t.Fatalf("printed before the header: %q", b.String())
	}
	p.Begin([]string{"2 jobs, arm packed", "GPU0 H100 80GiB (budget 78GiB)"})
	since = 1500 * time.Millisecond
	p.Status("done 0/2") // no terminal: nothing
	p.Line("start a")
	want := "gpufrac run: 2 jobs, arm packed\ngpufrac run: GPU0 H100 80GiB (budget 78GiB)\n[   0.0s] released reservation of a\n[   1.5s] start a\n"
	if b.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", b.String(), want)
	}
}

func TestAttemptLines(t *testing.T) {
	const G = size.GiB
	cases := []struct {
		name string
		say  func(p *Printer)
		want string
	}{
		{"capped start", func(p *Printer) { p.Started(Start{Job: "a", Cap: 4 * G, Capped: true}) }, "start    a                    GPU0  cap 4GiB"},
		{"borrowing start", func(p *Printer) {
			p.Started(Start{Job: "a", GPUIndex: 1, Cap: 4 * G, Limit: 78 * G, Capped: true, Borrowing: true})
		}, "GPU1  guarantee 4GiB, may borrow up to 78GiB"},
		{"probe in place", func(p *Printer) {
			p.Started(Start{Job: "a", Template: "t", Cap: 39 * G, Probe: true, InPlace: true, Window: 20 * time.Second})
		}, `PROBE in place (protective cap 39GiB) for its first 20s to measure "t"`},
		{"re-run", func(p *Printer) { p.Started(Start{Job: "a", Whole: true, ReRun: "attempt 2 of 3 alone"}) }, "RE-RUN attempt 2 of 3 alone"},
		{"uncapped", func(p *Printer) { p.Started(Start{Job: "a"}) }, "no cap"},
		{"collateral, nothing next", func(p *Printer) {
			p.Finished(record.Attempt{Job: "v", Outcome: record.OutcomeCollateral, ExitCode: 1, Detail: "failed during x", Log: "logs/v.1.log"}, 0, "")
		}, "COLLAT   v                    GPU0  exit 1 after 0.0s: failed during x (log logs/v.1.log)\n"},
		{"probe ended", func(p *Printer) {
			p.Finished(record.Attempt{Job: "a", Outcome: record.OutcomeProbe, PeakBytes: 2 * G}, 20*time.Second, "3GiB (1 unit)")
		}, "probed   a                    GPU0  peak 2GiB in its first 20s -> cap 3GiB (1 unit)"},
		{"broken cap without a violation", func(p *Printer) {
			p.Finished(record.Attempt{Job: "a", Outcome: record.OutcomeCapViolation, CapBytes: 4 * G, PeakBytes: 4 * G, Detail: "oom", Next: "attempt 2 of 3 alone"}, 0, "")
		}, "CAP      a                    GPU0  broke its 4GiB cap (peak 4GiB): oom; neighbours untouched; next: attempt 2 of 3 alone"},
	}
	for _, c := range cases {
		var b strings.Builder
		p := New(&b, func() time.Duration { return 0 })
		p.Begin(nil)
		c.say(p)
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("%s: %q, want it to contain %q", c.name, b.String(), c.want)
		}
	}
}

func TestUnitsLabel(t *testing.T) {
	p := policy.Default()
	p.UnitBytes = size.GiB
	if got, want := UnitsLabel(p, 3*size.GiB), "3GiB (3 units of 1GiB)"; got != want {
		t.Errorf("whole units: %q, want %q", got, want)
	}
	if got, want := UnitsLabel(p, 2*size.GiB+size.GiB/2), "3GiB (2.5GiB rounded up to 3 units of 1GiB)"; got != want {
		t.Errorf("rounded: %q, want %q", got, want)
	}
}
