package progress

import (
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/ledger"
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
		{"staged probe", func(p *Printer) {
			p.Started(Start{Job: "a", Template: "t", Cap: G, Staged: 2 * G, Probe: true, InPlace: true, Borrowing: true, Window: 19 * time.Second})
		}, `PROBE STAGED on 1GiB: starts up now; once its 2GiB guarantee is granted it borrows the rest, and its first 19s from then measures "t"`},
		{"staged probe of a whole run", func(p *Printer) {
			p.Started(Start{Job: "a", Template: "t", Cap: G, Staged: 2 * G, Probe: true, InPlace: true, Borrowing: true})
		}, `and its whole run from then measures "t"`},
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
		// What a violation meant for the neighbours depends on who stopped it: the fence's
		// refusal reached none, a stop by signal came after memory the fence never saw.
		{"refused by the fence", func(p *Printer) { p.Finished(violated(policy.ModeIsolated, enforcer.ActionOOMInProcess), 0, "") }, "; neighbours untouched; next:"},
		{"stopped by the watchdog", func(p *Printer) { p.Finished(violated(policy.ModeIsolated, enforcer.ActionSIGKILL), 0, "") },
			"sigkill; a neighbour that ran out of memory before the stop is re-run as it was; next:"},
		{"reclaimed from a borrower", func(p *Printer) {
			at := violated(policy.ModeIsolated, enforcer.ActionSIGKILL)
			at.LimitBytes, at.Violation.Reclaimed = 78*G, true
			p.Finished(at, 0, "")
		}, "held 6GiB, past its 4GiB guarantee, and a neighbour's guarantee needed back what it borrowed: sigkill"},
		{"a borrower refused by the fence below its limit", func(p *Printer) {
			at := violated(policy.ModeIsolated, enforcer.ActionOOMInProcess)
			at.LimitBytes, at.Violation.AskedBytes = 78*G, 7*G
			p.Finished(at, 0, "")
		}, "out of memory inside the job at peak 6GiB: past its 4GiB guarantee only other jobs' guarantees were left"},
		// A runaway alone on the GPU meets its limit (the budget), not a neighbour's guarantee.
		{"a borrower refused by the fence at its limit", func(p *Printer) {
			at := violated(policy.ModeIsolated, enforcer.ActionOOMInProcess)
			at.LimitBytes, at.Violation.AskedBytes = 78*G, 79*G
			p.Finished(at, 0, "")
		}, "out of memory inside the job at peak 6GiB: it asked for 79GiB, past its 78GiB limit"},
		{"stopped under MPS", func(p *Printer) { p.Finished(violated(policy.ModeMPS, enforcer.ActionSIGINT), 0, "") },
			"sigint; stopped under MPS: a GPU-wide event, a neighbour that fails now is re-run; next:"},
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

// violated is an attempt the enforcer recorded breaking its 4GiB cap, in mode, by action.
func violated(mode policy.Mode, action string) record.Attempt {
	v := &ledger.Violation{Mode: mode, Action: action, CapBytes: 4 * size.GiB}
	return record.Attempt{Job: "a", Outcome: record.OutcomeCapViolation, CapBytes: 4 * size.GiB, PeakBytes: 6 * size.GiB,
		Violation: v, Next: "attempt 2 of 3 alone"}
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

// The borrower's line names the jobs that started on its GPU between its first wait and its
// end (on the H200 three did while the summary said nothing had), and says so when none did.
func TestSummaryNamesJobsStartedDuringABorrowersWait(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 17, 42, 56, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	att := func(job, gpu string, idx int, start, end float64) record.Attempt {
		return record.Attempt{Job: job, Number: 1, GPU: gpu, GPUIndex: idx, Start: at(start), End: at(end), Outcome: record.OutcomeOK}
	}
	leaker := att("j08-leaker", "G0", 0, 0, 202.5)
	leaker.BorrowWait, leaker.BorrowWaitAt = 174500*time.Millisecond, 20.2
	owner := att("j02-lora-0.6b", "G0", 0, 92.4, 136.3)
	owner.GuaranteeWait, owner.GuaranteeWaitAt = 3*time.Second, 101.5
	res := &record.Result{Start: t0, End: at(408.1), Attempts: []record.Attempt{
		att("j01-lora-1.7b", "G0", 0, 0, 92.2), leaker,
		owner, att("j04-generate-1.7b", "G0", 0, 136.4, 161.7),
		att("j99-other-gpu", "G1", 1, 100, 120), att("j03-lora-1.7b", "G0", 0, 202.5, 243.8),
	}}
	var b strings.Builder
	WriteSummary(&b, res)
	want := "borrower waited: j08-leaker attempt 1 waited 174.5s in all for memory to borrow (first at 20.2s); started on GPU0 from then to its end: j02-lora-0.6b at 92.4s, j04-generate-1.7b at 136.4s\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("summary\n%s\nwant the line\n%s", b.String(), want)
	}
	// An owner's wait (lend) is said apart: it waited for its guarantee, not to borrow.
	if own := "owner waited: j02-lora-0.6b attempt 1 waited 3.0s in all for borrowers to give back its guarantee (first at 101.5s)\n"; !strings.Contains(b.String(), own) {
		t.Errorf("summary\n%s\nwant the line\n%s", b.String(), own)
	}
	res.Attempts = res.Attempts[:2]
	b.Reset()
	WriteSummary(&b, res)
	if !strings.Contains(b.String(), "(first at 20.2s); nothing started on GPU0 from then to its end\n") {
		t.Errorf("summary with no job started during the wait:\n%s", b.String())
	}
}
