package sched

import (
	"fmt"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/node/nodetest"
	"github.com/gpufrac/gpufrac/queue"
	"github.com/gpufrac/gpufrac/size"
)

// stagedNames are the staged launches of a round.
func stagedNames(ls []Launch) []string {
	var out []string
	for _, l := range ls {
		if l.Staged {
			out = append(out, l.Job.Name)
		}
	}
	return out
}

// Jobs that do not fit start staged on a unit each, up to the GPU's staging bound, told the cap
// they will get; a staged job is granted its guarantee once it fits, in queue order, and not
// while a borrower's allocation waits.
func TestSchedStagesJobsThatDoNotFitYet(t *testing.T) {
	lend := &nodetest.Fence{}
	s, led, uuid := borrowSched(t, lend, known("a", "b", "c", "d", "e", "f")...)
	s.stageMax = 2
	got := s.Next() // 3 x 20 GiB of a 78 GiB budget; d, e staged, f waits
	if n, st := fmt.Sprint(names(got)), fmt.Sprint(stagedNames(got)); n != "[a b c d e]" || st != "[d e]" {
		t.Fatalf("admitted %s, staged %s; want [a b c d e], [d e]", n, st)
	}
	for _, l := range got[3:] {
		if l.Res.CapBytes != size.GiB || l.Res.StagedFor != 20*size.GiB || l.Res.Promised() != 20*size.GiB {
			t.Fatalf("%s staged: %+v", l.Job.Name, l.Res)
		}
	}
	if g := s.Grants(); len(g) != 0 {
		t.Fatalf("granted %d with 18 GiB free", len(g))
	}
	var a Launch
	for _, l := range got {
		if l.Job.Name == "a" {
			a = l
		}
	}
	if err := led.Release(a.Res.Token, "done"); err != nil {
		t.Fatal(err)
	}
	s.Finished(&a)
	a.Job.Done = true
	lend.Set(0, true) // a borrower waits: what came free is its first
	if g := s.Grants(); len(g) != 0 {
		t.Fatalf("granted %d while a borrower waits", len(g))
	}
	lend.Set(0, false)
	g := s.Grants()
	if len(g) != 1 || g[0].Job.Name != "d" || g[0].Res.CapBytes != 20*size.GiB || g[0].Res.StagedFor != 0 {
		t.Fatalf("grants once a ended: %+v, want d alone at 20GiB", g)
	}
	st, err := led.State(uuid)
	if err != nil {
		t.Fatal(err)
	}
	if st.ReservedBytes != 61*size.GiB {
		t.Fatalf("reserved %s, want b, c, d (60 GiB) and e staged (1 GiB)", st.ReservedBytes)
	}
	// d's staging slot is free again: f is staged in the next round.
	if n := fmt.Sprint(stagedNames(s.Next())); n != "[f]" {
		t.Fatalf("staged %s in the next round, want [f]", n)
	}
}

// Where a borrower's wait is blocked by staged jobs alone (every other task there waits too),
// the newest staged job is stopped after a second, one a second; while another task could
// still free memory, nothing is.
func TestSchedUnstagesForABlockedBorrower(t *testing.T) {
	lend := &nodetest.Fence{}
	s, _, _ := borrowSched(t, lend, known("a", "b", "c", "d", "e")...)
	s.stageMax = 2
	got := s.Next()
	tokens := map[string]string{}
	for _, l := range got {
		tokens[l.Job.Name] = l.Res.Token
	}
	t0 := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	lend.SetWaiters(tokens["a"], tokens["b"]) // c runs on: it will free memory
	if u := s.Unstage(at(0)); len(u) != 0 {
		t.Fatalf("unstaged %d while c runs", len(u))
	}
	if u := s.Unstage(at(2000)); len(u) != 0 {
		t.Fatalf("unstaged %d while c runs", len(u))
	}
	lend.SetWaiters(tokens["a"], tokens["b"], tokens["c"])
	for _, step := range []struct {
		ms   int
		want string
	}{{3000, "[]"}, {3500, "[]"}, {4000, "[e]"}, {4500, "[]"}, {5000, "[d]"}, {7000, "[]"}} {
		var n []string
		for _, j := range s.Unstage(at(step.ms)) {
			n = append(n, j.Name)
		}
		if fmt.Sprint(n) != step.want && !(step.want == "[]" && n == nil) {
			t.Fatalf("at %d ms unstaged %v, want %s", step.ms, n, step.want)
		}
	}
	if g := s.Grants(); len(g) != 0 {
		t.Fatalf("a job being unstaged was granted: %+v", g)
	}
	j := got[4].Job
	limit := j.Limit()
	s.Finished(&got[4])
	s.Unstaged(j)
	if j.Limit() != limit+1 || j.Running || j.Done {
		t.Fatalf("unstaged job: limit %d (was %d), %+v; want its attempt not counted, queued again", j.Limit(), limit, j)
	}
}

// No job is staged where something waits for memory and staged jobs alone stand in its way:
// it would be the next one Unstage stops, its start-up thrown away. Once a task there could
// free memory again, staging goes on.
func TestSchedStagesNothingWhereStagedJobsAloneBlock(t *testing.T) {
	for _, tc := range []struct {
		name    string
		waiters []string // of a, b, c: the tasks holding memory that are not staged
		stalled bool     // the first staged job's grant did not fit
		staged  bool     // f is staged
	}{
		{"every holder waits", []string{"a", "b", "c"}, false, false},
		{"a grant stalls and every holder waits", []string{"a", "b", "c"}, true, false},
		{"c runs on", []string{"a", "b"}, false, true},
		{"a grant stalls, c runs on", []string{"a", "b"}, true, true},
		{"nothing waits", nil, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lend := &nodetest.Fence{}
			s, _, uuid := borrowSched(t, lend, known("a", "b", "c", "d", "e", "f")...)
			s.stageMax = 2
			tokens := map[string]string{}
			for _, l := range s.Next() { // a, b, c admitted; d, e staged; f waits for a slot
				tokens[l.Job.Name] = l.Res.Token
			}
			var w []string
			for _, n := range tc.waiters {
				w = append(w, tokens[n])
			}
			lend.SetWaiters(w...)
			s.stalled[uuid] = tc.stalled
			s.stageMax = 3
			want := "[]"
			if tc.staged {
				want = "[f]"
			}
			if got := fmt.Sprint(stagedNames(s.Next())); got != want {
				t.Fatalf("staged %s, want %s", got, want)
			}
		})
	}
}

// A job that waited a moment ago still counts as waiting when a job is to be staged: the moment a
// neighbour ends, the jobs that waited for its memory are being served it, and none of them
// waits for that instant. Staged there, a job would take what they wait for, and the fence
// would count it as one that may free memory, which hides their tie until the run stops it.
func TestSchedStagesNothingWhereEveryHolderWaitedJustNow(t *testing.T) {
	lend := &nodetest.Fence{}
	s, _, _ := borrowSched(t, lend, known("a", "b", "c", "d", "e")...)
	now := time.Date(2026, 12, 6, 14, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	tokens := map[string]string{}
	for _, l := range s.Next() { // nothing is staged yet: a, b, c admitted; d, e wait
		tokens[l.Job.Name] = l.Res.Token
	}
	s.stageMax = 2
	for _, step := range []struct {
		after   time.Duration
		waiters []string
		want    string
	}{
		{0, []string{"a", "b", "c"}, "[]"},               // every holder waits
		{400 * time.Millisecond, nil, "[]"},              // served a moment ago
		{400 * time.Millisecond, []string{"b"}, "[]"},    // b waits again; a and c waited 0.8 s ago
		{500 * time.Millisecond, []string{"b"}, "[d e]"}, // a and c have not waited for 1.3 s
	} {
		now = now.Add(step.after)
		var w []string
		for _, n := range step.waiters {
			w = append(w, tokens[n])
		}
		lend.SetWaiters(w...)
		if got := fmt.Sprint(stagedNames(s.Next())); got != step.want {
			t.Fatalf("%v in, waiting %v: staged %s, want %s", now.Sub(time.Date(2026, 12, 6, 14, 0, 0, 0, time.UTC)), step.waiters, got, step.want)
		}
	}
}

// A job stopped for a blocked wait is staged again as soon as the block is over, not only once
// nothing waits: here a task that can free memory runs beside the waiting ones again.
func TestSchedStagesAgainOnceTheBlockIsOver(t *testing.T) {
	lend := &nodetest.Fence{}
	s, led, _ := borrowSched(t, lend, known("a", "b", "c", "d", "e")...)
	s.stageMax = 2
	got := s.Next() // a, b, c admitted; d, e staged
	tokens := map[string]string{}
	for _, l := range got {
		tokens[l.Job.Name] = l.Res.Token
	}
	t0 := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	lend.SetWaiters(tokens["a"], tokens["b"], tokens["c"])
	s.Unstage(t0)
	u := s.Unstage(t0.Add(time.Second))
	if len(u) != 1 || u[0].Name != "e" {
		t.Fatalf("unstaged %v, want [e]", u)
	}
	if err := led.Release(got[4].Res.Token, "unstaged"); err != nil {
		t.Fatal(err)
	}
	s.Finished(&got[4])
	s.Unstaged(u[0])
	if n := stagedNames(s.Next()); len(n) != 0 {
		t.Fatalf("staged %v while the block lasts", n)
	}
	lend.SetWaiters(tokens["a"], tokens["b"]) // c runs again: it will free memory
	s.Unstage(t0.Add(2 * time.Second))
	if n := fmt.Sprint(stagedNames(s.Next())); n != "[e]" {
		t.Fatalf("staged %s once c runs, want [e]", n)
	}
}

// Under MPS (with borrowing, where jobs are staged there) the staged job stopped for a blocked
// borrower is the newest one whose allocation waits in the fence, never one that may be running
// kernels, and its promise is withdrawn first so the fence refuses that allocation inside it.
func TestSchedUnstagesUnderMPSOnlyAStagedJobThatWaits(t *testing.T) {
	lend := &nodetest.Fence{}
	s, led, uuid := borrowSched(t, lend, known("a", "b", "c", "d", "e")...)
	if err := led.SetMode(uuid, policy.ModeMPS); err != nil {
		t.Fatal(err)
	}
	s.node = node.New(led, lend, node.Config{Borrow: node.BorrowWait, BorrowMPS: true}) // --mode mps --borrow wait
	s.stageMax = 2
	got := s.Next()
	if n := fmt.Sprint(stagedNames(got)); n != "[d e]" {
		t.Fatalf("staged %s under MPS with borrowing, want [d e]", n)
	}
	for _, l := range got[3:] {
		if l.Res.Limit() != 78*size.GiB {
			t.Fatalf("%s staged with a %s limit: an MPS client's pinned limit is fixed at its start, and must be the budget", l.Job.Name, l.Res.Limit())
		}
	}
	tokens := map[string]string{}
	res := map[string]ledger.Reservation{}
	launch := map[string]*Launch{}
	for i, l := range got {
		tokens[l.Job.Name], res[l.Job.Name], launch[l.Job.Name] = l.Res.Token, l.Res, &got[i]
	}
	t0 := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	lend.SetWaiters(tokens["a"], tokens["b"], tokens["c"])
	for _, step := range []struct {
		ms     int
		stages []string // the staged jobs whose allocations wait for their grants
		want   string
		end    string // a job whose process ends before the round
	}{
		{ms: 0, want: "[]"}, {ms: 1500, want: "[]"}, // e and d start up: neither waits in the fence
		{ms: 2000, stages: []string{"d"}, want: "[d]"},
		{ms: 3500, stages: []string{"d", "e"}, want: "[]"}, // d, withdrawn, is on its way out
		{ms: 4000, stages: []string{"e"}, want: "[]", end: "d"},
		{ms: 5000, stages: []string{"e"}, want: "[e]"},
	} {
		if l := launch[step.end]; l != nil {
			if err := led.Release(l.Res.Token, "unstaged"); err != nil {
				t.Fatal(err)
			}
			s.Finished(l)
			s.Unstaged(l.Job)
		}
		var w []string
		for _, n := range step.stages {
			w = append(w, tokens[n])
		}
		lend.SetStageWaiters(w...)
		var n []string
		for _, j := range s.Unstage(at(step.ms)) {
			n = append(n, j.Name)
			if r, ok := led.Reservation(tokens[j.Name]); !ok || r.StagedFor != 0 || r.Limit() != res[j.Name].CapBytes {
				t.Errorf("%s unstaged: %+v, want its promise and borrowing withdrawn (was %+v)", j.Name, r, res[j.Name])
			}
		}
		if fmt.Sprint(n) != step.want && !(step.want == "[]" && n == nil) {
			t.Fatalf("at %d ms, staged jobs waiting %v: unstaged %v, want %s", step.ms, step.stages, n, step.want)
		}
	}
}

// A withdrawal the ledger took but the fence's table did not (the sync failed) still stops the
// job: the watchdog's next pass writes the table, and a job left staged in the ledger's eyes but
// never stopped would hold the borrower up for good.
func TestSchedUnstagesUnderMPSWhenTheTableLagsTheWithdrawal(t *testing.T) {
	lend := &nodetest.Fence{}
	s, led, uuid := borrowSched(t, lend, known("a", "b", "c", "d")...)
	if err := led.SetMode(uuid, policy.ModeMPS); err != nil {
		t.Fatal(err)
	}
	s.node = node.New(led, lend, node.Config{Borrow: node.BorrowWait, BorrowMPS: true})
	s.stageMax = 1
	got := s.Next()
	if n := fmt.Sprint(stagedNames(got)); n != "[d]" {
		t.Fatalf("staged %s, want [d]", n)
	}
	lend.SetWaiters(got[0].Res.Token, got[1].Res.Token, got[2].Res.Token)
	lend.SetStageWaiters(got[3].Res.Token)
	lend.SetNoRoom(true)
	t0 := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	s.Unstage(t0)
	u := s.Unstage(t0.Add(time.Second))
	if len(u) != 1 || u[0].Name != "d" {
		t.Fatalf("unstaged %v with the table refusing, want [d]", u)
	}
	if r, _ := led.Reservation(got[3].Res.Token); !r.Withdrawn {
		t.Fatalf("d: %+v, want withdrawn in the ledger", r)
	}
}

// A staged job that waits for its grant is not overtaken on its GPU: a later job that would fit
// waits until the staged one is granted.
func TestSchedAdmitsNothingPastAStagedJob(t *testing.T) {
	lend := &nodetest.Fence{}
	small := &Job{Job: queue.Job{Name: "x", Template: "s"}}
	s, led, _ := borrowSched(t, lend, append(known("a", "b", "c", "d"), small)...)
	s.peaks["s"] = 4 * size.GiB // a 6.1 GiB cap: fits the 17 GiB left beside a, b, c and d's unit
	s.stageMax = 1
	got := s.Next()
	if n, st := fmt.Sprint(names(got)), fmt.Sprint(stagedNames(got)); n != "[a b c x d]" || st != "[d]" {
		t.Fatalf("first round admitted %s, staged %s; want [a b c x d], [d]", n, st)
	}
	// x ends; another job like it comes (x again); d still does not fit.
	var x Launch
	for _, l := range got {
		if l.Job == small {
			x = l
		}
	}
	if err := led.Release(x.Res.Token, "done"); err != nil {
		t.Fatal(err)
	}
	s.Finished(&x)
	if g := s.Grants(); len(g) != 0 {
		t.Fatalf("granted %+v with 17 GiB free", g)
	}
	if n := names(s.Next()); len(n) != 0 {
		t.Fatalf("admitted %v past the staged d", n)
	}
}

// Where the first staged job's promise cannot fit beside the other staged jobs' units and only
// staged jobs are left on the GPU, the newest staged job is stopped (one a second) until it
// fits: nothing else ends to make the room, and the jobs it stalls would wait for ever.
func TestSchedUnstagesForAStalledHead(t *testing.T) {
	big := &Job{Job: queue.Job{Name: "big", Template: "big"}}
	s, led, _ := borrowSched(t, &nodetest.Fence{}, append(append(known("a", "b", "c"), big), known("d", "e")...)...)
	s.peaks["big"] = 65 * size.GiB // a 77 GiB cap of the 78 GiB budget
	s.stageMax = 3
	got := s.Next()
	if n, st := fmt.Sprint(names(got)), fmt.Sprint(stagedNames(got)); n != "[a b c big d e]" || st != "[big d e]" {
		t.Fatalf("admitted %s, staged %s; want [a b c big d e], [big d e]", n, st)
	}
	byName := map[string]*Launch{}
	for i := range got {
		byName[got[i].Job.Name] = &got[i]
	}
	end := func(name string) {
		t.Helper()
		l := byName[name]
		if err := led.Release(l.Res.Token, "done"); err != nil {
			t.Fatal(err)
		}
		s.Finished(l)
	}
	t0 := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// a, b and c run: they will end and free memory, so nothing is stopped.
	if g := s.Grants(); len(g) != 0 {
		t.Fatalf("granted %+v beside a, b and c", g)
	}
	if u := s.Unstage(at(0)); len(u) != 0 {
		t.Fatalf("unstaged %d while a, b and c run", len(u))
	}
	if u := s.Unstage(at(2000)); len(u) != 0 {
		t.Fatalf("unstaged %d while a, b and c run", len(u))
	}
	for _, n := range []string{"a", "b", "c"} {
		end(n)
		byName[n].Job.Done = true
	}
	// Only staged jobs are left: big's 77 GiB does not fit beside d's and e's units.
	for _, step := range []struct {
		ms   int
		want string
	}{{3000, "[]"}, {3500, "[]"}, {4000, "[e]"}} {
		if g := s.Grants(); len(g) != 0 {
			t.Fatalf("at %d ms granted %+v", step.ms, g)
		}
		var n []string
		for _, j := range s.Unstage(at(step.ms)) {
			n = append(n, j.Name)
		}
		if fmt.Sprint(n) != step.want && !(step.want == "[]" && n == nil) {
			t.Fatalf("at %d ms unstaged %v, want %s", step.ms, n, step.want)
		}
	}
	end("e")
	s.Unstaged(byName["e"].Job)
	g := s.Grants()
	if len(g) != 1 || g[0].Job != big || g[0].Res.CapBytes != 77*size.GiB {
		t.Fatalf("grants once e stopped: %+v, want big at 77GiB", g)
	}
	if u := s.Unstage(at(6000)); len(u) != 0 {
		t.Fatalf("unstaged %d once big was granted", len(u))
	}
}

// A probe that borrows is staged where a borrower's wait freezes admissions, like a job whose
// cap is known, on a unit and told the probe's guarantee; once nothing waits it is granted that
// guarantee and may borrow the rest.
func TestSchedStagesAProbeWhereABorrowerWaits(t *testing.T) {
	lend := &nodetest.Fence{}
	p := &Job{Job: queue.Job{Name: "p", Template: "p"}}
	s, _, _ := borrowSched(t, lend, append(known("a"), p)...)
	s.stageMax, s.window = 2, 19*time.Second
	lend.Set(40*size.GiB, true)
	got := s.Next()
	if n, st := fmt.Sprint(names(got)), fmt.Sprint(stagedNames(got)); n != "[a p]" || st != "[a p]" {
		t.Fatalf("admitted %s, staged %s while a borrower waits; want [a p] both staged", n, st)
	}
	l := got[1]
	if !l.Probe || !l.InPlace || l.Window != 19*time.Second || l.Res.CapBytes != size.GiB || l.Res.StagedFor != 2*size.GiB {
		t.Fatalf("p staged as %+v, reservation %+v: want an in-place probe on 1GiB, told 2GiB", l, l.Res)
	}
	lend.Set(0, false)
	g := s.Grants()
	if len(g) != 2 || g[1].Job != p || g[1].Res.CapBytes != 2*size.GiB || g[1].Res.LimitBytes <= g[1].Res.CapBytes {
		t.Fatalf("grants once nothing waits: %+v; want a, then p on 2GiB borrowing", g)
	}
}

// One unknown footprint grows at a time: a probe that would load where a job borrows (and
// waits for nothing) starts staged, a known job behind it starts all the same, and the probe
// is granted once nobody borrows, or once it has waited two of its windows.
func TestSchedProbeWaitsStagedWhileAJobBorrows(t *testing.T) {
	for _, tc := range []struct {
		name     string
		after    time.Duration // the clock's step before the second Grants
		borrowed size.Bytes    // what is borrowed then
		want     string        // jobs granted by the second Grants
	}{
		{name: "nobody borrows any more", borrowed: 0, want: "[p]"},
		{name: "still borrowed, within the bound", after: 37 * time.Second, borrowed: 40 * size.GiB, want: "[]"},
		{name: "still borrowed, past the bound", after: 38 * time.Second, borrowed: 40 * size.GiB, want: "[p]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lend := &nodetest.Fence{}
			p := &Job{Job: queue.Job{Name: "p", Template: "p"}}
			s, _, _ := borrowSched(t, lend, append([]*Job{p}, known("a")...)...)
			now := time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC)
			s.now = func() time.Time { return now }
			s.stageMax, s.window = 2, 19*time.Second
			lend.Set(40*size.GiB, false)
			got := s.Next()
			if n, st := fmt.Sprint(names(got)), fmt.Sprint(stagedNames(got)); n != "[a p]" || st != "[p]" {
				t.Fatalf("admitted %s, staged %s beside a borrower; want [a p], p staged", n, st)
			}
			if g := s.Grants(); len(g) != 0 {
				t.Fatalf("granted %s while a job borrows, before any wait; want none", grantedNames(g))
			}
			now = now.Add(tc.after)
			lend.Set(tc.borrowed, false)
			if g := fmt.Sprint(grantedNames(s.Grants())); g != tc.want {
				t.Fatalf("granted %s; want %s", g, tc.want)
			}
		})
	}
}

// Where the probe cannot start staged, it loads beside the borrower as before: no slot, or a
// GPU that does not stage.
func TestSchedProbeLoadsBesideABorrowerWithoutStaging(t *testing.T) {
	lend := &nodetest.Fence{}
	p := &Job{Job: queue.Job{Name: "p", Template: "p"}}
	s, _, _ := borrowSched(t, lend, p)
	s.window = 19 * time.Second
	lend.Set(40*size.GiB, false)
	got := s.Next()
	if n, st := fmt.Sprint(names(got)), fmt.Sprint(stagedNames(got)); n != "[p]" || st != "[]" {
		t.Fatalf("admitted %s, staged %s with staging off; want p admitted, unstaged", n, st)
	}
}

func grantedNames(g []Granted) []string {
	out := []string{}
	for _, x := range g {
		out = append(out, x.Job.Name)
	}
	return out
}

// Of the jobs a round stages, those whose caps are known take the slots before probes, even
// probes ahead of them in the queue.
func TestSchedStagesKnownJobsBeforeProbes(t *testing.T) {
	lend := &nodetest.Fence{}
	p := &Job{Job: queue.Job{Name: "p", Template: "p"}}
	s, _, _ := borrowSched(t, lend, append([]*Job{p}, known("a")...)...)
	s.stageMax = 1
	lend.Set(40*size.GiB, true)
	if st := fmt.Sprint(stagedNames(s.Next())); st != "[a]" {
		t.Fatalf("staged %s with one slot; want [a], the job whose cap is known", st)
	}
	s.stageMax = 2
	if st := fmt.Sprint(stagedNames(s.Next())); st != "[p]" {
		t.Fatalf("staged %s once a second slot is there; want [p]", st)
	}
}
