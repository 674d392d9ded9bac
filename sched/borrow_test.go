package sched

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/node/nodetest"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/size"
	"github.com/hashicorp/go-hclog"
)

// borrowSched is a packed scheduler over one 80 GiB GPU (budget 78 GiB) where template "t" has a
// 20 GiB cap (peak 16 GiB) and "p" is unknown.
func borrowSched(t *testing.T, lend *nodetest.Fence, jobs ...*Job) (*Sched, *ledger.Ledger, string) {
	t.Helper()
	led, uuid := memLedger(t, 80*size.GiB)
	return borrowSchedOn(led, uuid, lend, jobs...), led, uuid
}

// borrowSchedOn is borrowSched on a ledger of the test's (memLedgerOpts).
func borrowSchedOn(led *ledger.Ledger, uuid string, lend *nodetest.Fence, jobs ...*Job) *Sched {
	s := newSched(policy.Default(), led, []string{uuid}, jobs, 0, hclog.NewNullLogger())
	s.probeInPlace = true
	if lend != nil {
		s.node, s.borrows = node.New(led, lend, node.Config{Borrow: node.BorrowWait}), true
	}
	s.peaks["t"] = size.MustParse("16GiB")
	return s
}

func known(names ...string) []*Job {
	var out []*Job
	for _, n := range names {
		out = append(out, &Job{Job: queue.Job{Name: n, Template: "t"}})
	}
	return out
}

// A probe that borrows holds a context's worth, not half the GPU: every job whose cap is known
// starts beside it, and the probe may grow to the GPU's budget.
func TestSchedBorrowingProbeHoldsNothingBack(t *testing.T) {
	probeJob := &Job{Job: queue.Job{Name: "p", Template: "p"}}
	for _, tc := range []struct {
		name  string
		lend  *nodetest.Fence
		want  string
		probe size.Bytes // the probe's guarantee
		limit size.Bytes
	}{
		{"protective cap without borrowing", nil, "[p a]", 39 * size.GiB, 0},
		{"borrowing", &nodetest.Fence{}, "[p a b c]", 2 * size.GiB, 78 * size.GiB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pj := *probeJob
			s, _, _ := borrowSched(t, tc.lend, append([]*Job{&pj}, known("a", "b", "c")...)...)
			got := s.Next()
			if n := names(got); fmt.Sprint(n) != tc.want {
				t.Fatalf("admitted %v, want %s", n, tc.want)
			}
			p := got[0]
			if !p.Probe || !p.InPlace || p.Res.CapBytes != tc.probe || p.Res.LimitBytes != tc.limit || p.Borrowing != (tc.lend != nil) {
				t.Fatalf("probe launch: cap %s limit %s borrowing %v, want cap %s limit %s", p.Res.CapBytes, p.Res.LimitBytes,
					p.Borrowing, tc.probe, tc.limit)
			}
			for _, l := range got[1:] {
				if l.Res.CapBytes != 20*size.GiB || l.Borrowing != (tc.lend != nil) {
					t.Fatalf("%s: cap %s borrowing %v", l.Job.Name, l.Res.CapBytes, l.Borrowing)
				}
			}
		})
	}
}

// What borrowers hold counts as taken, an allocation waiting for memory freezes the GPU, and a
// guarantee the fence has no room for is given back before its job starts.
func TestSchedCountsBorrowedMemory(t *testing.T) {
	for _, tc := range []struct {
		name     string
		borrowed size.Bytes
		waiting  bool
		noRoom   bool
		want     string
	}{
		{"nothing borrowed", 0, false, false, "[a b c]"},
		{"40 GiB borrowed", 40 * size.GiB, false, false, "[a]"},
		{"70 GiB borrowed", 70 * size.GiB, false, false, "[]"},
		{"an allocation waits", 0, true, false, "[]"},
		{"no room in the fence", 0, false, true, "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lend := nodetest.NewFence(tc.borrowed, tc.waiting, tc.noRoom)
			s, led, uuid := borrowSched(t, lend, known("a", "b", "c")...)
			got := s.Next()
			if n := fmt.Sprint(names(got)); n != tc.want {
				t.Fatalf("admitted %s, want %s", n, tc.want)
			}
			st, err := led.State(uuid)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Reservations) != len(got) {
				t.Fatalf("ledger holds %d reservations for %d launches: a refused guarantee was kept", len(st.Reservations), len(got))
			}
			if tc.noRoom && lend.Synced() == 0 {
				t.Fatal("the fence was never asked")
			}
			for _, l := range got {
				if l.Res.LimitBytes != st.BudgetBytes {
					t.Fatalf("%s: limit %s, want the budget %s", l.Job.Name, l.Res.LimitBytes, st.BudgetBytes)
				}
			}
		})
	}
}

// A run with nothing running whose fence keeps leaving guarantees out says so while it waits
// and when it gives up, instead of blaming another process's reservations; the refusal is
// forgotten once a guarantee is placed there.
func TestStuckOnTheFenceSaysSo(t *testing.T) {
	lend := nodetest.NewFence(0, false, true)
	s, _, uuid := borrowSched(t, lend, known("a")...)
	if got := s.Next(); len(got) != 0 {
		t.Fatalf("admitted %v with no room in the fence", names(got))
	}
	if w := s.Waiting(time.Now()); !strings.Contains(w, "the allocation fence left the guarantee out") || !strings.Contains(w, "no room") {
		t.Fatalf("waiting line %q does not name the fence's refusal", w)
	}
	if why := s.Stuck(time.Minute); !strings.Contains(why, "allocation fence left its guarantee out") {
		t.Fatalf("give-up detail %q: want the fence named", why)
	}
	lend.SetNoRoom(false)

	if got := s.Next(); len(got) != 1 || s.refused[uuid] != nil {
		t.Fatalf("once the fence has room: admitted %v, refusal still standing %v", names(got), s.refused[uuid])
	}
}

// Under ProbeKnown a probe that borrows where others borrow is first offered the median of the
// caps known then, at most half the budget; where that does not fit, where nobody borrows or
// nothing is known, it starts on the small guarantee as without it.
func TestSchedProbeKnownGuarantee(t *testing.T) {
	for _, tc := range []struct {
		name     string
		on       bool
		borrowed size.Bytes
		caps     map[string]size.Bytes // declared caps beside "t"'s 20 GiB
		noT      bool                  // "t" unknown too
		room     size.Bytes            // > 0: the fence's table takes guarantees up to this
		want     size.Bytes
	}{
		{"off", false, 4 * size.GiB, nil, false, 0, 2 * size.GiB},
		{"nobody borrows", true, 0, nil, false, 0, 2 * size.GiB},
		{"one cap known", true, 4 * size.GiB, nil, false, 0, 20 * size.GiB},
		{"median of three", true, 4 * size.GiB, map[string]size.Bytes{"x": 10 * size.GiB, "y": 30 * size.GiB}, false, 0, 20 * size.GiB},
		{"median of two", true, 4 * size.GiB, map[string]size.Bytes{"x": 10 * size.GiB}, false, 0, 15 * size.GiB},
		{"at most half the budget", true, 4 * size.GiB, map[string]size.Bytes{"x": 70 * size.GiB}, false, 0, 39 * size.GiB},
		{"does not fit: the small guarantee", true, 70 * size.GiB, nil, false, 0, 2 * size.GiB},
		{"nothing known", true, 4 * size.GiB, nil, true, 0, 2 * size.GiB},
		{"the fence has no room for it: the small guarantee", true, 4 * size.GiB, nil, false, 10 * size.GiB, 2 * size.GiB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lend := nodetest.NewFence(tc.borrowed, false, false)
			lend.SetRoom(tc.room)
			s, _, uuid := borrowSched(t, lend, &Job{Job: queue.Job{Name: "p", Template: "p"}})
			s.probeKnown = tc.on
			if tc.noT {
				delete(s.peaks, "t")
			}
			s.templates = map[string]queue.TemplateSpec{}
			for name, c := range tc.caps {
				s.templates[name] = queue.TemplateSpec{CapBytes: c}
			}
			got := s.Next()
			if len(got) != 1 || !got[0].Probe || !got[0].Borrowing {
				t.Fatalf("launched %+v, want the probe, borrowing", got)
			}
			if got[0].Res.CapBytes != tc.want {
				t.Fatalf("probe's guarantee %s, want %s", got[0].Res.CapBytes, tc.want)
			}
			if err := s.refused[uuid]; err != nil {
				t.Fatalf("the probe started, but the GPU is marked refused by the fence: %v", err)
			}
		})
	}
}
