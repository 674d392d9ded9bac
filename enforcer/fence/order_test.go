package fence_test

import (
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

const tokD = "dddddddddddddddddddddddddddddddd"

// orderTable is a 5.5 GiB budget, full, of four borrowers with 512 MiB guarantees: W has
// borrowed 1 GiB, B 1.5 GiB, S nothing, and F 1 GiB, which it gives back in the tests.
func orderTable(t *testing.T) (dir string, tb *fence.Table, w, b, s, f *fence.Client) {
	t.Helper()
	dir, tb = table(t, 5*size.GiB+512*size.MiB)
	tb.SetWait(time.Minute)
	task := func(tok string) fence.Task { return fence.Task{Token: tok, Cap: 512 * size.MiB, Limit: 5 * size.GiB} }
	if err := tb.SetTasks([]fence.Task{task(tokA), task(tokB), task(tokC), task(tokD)}, 5*size.GiB+512*size.MiB); err != nil {
		t.Fatal(err)
	}
	w, b, s, f = attach(t, dir, tokA), attach(t, dir, tokB), attach(t, dir, tokC), attach(t, dir, tokD)
	for _, c := range []struct {
		c *fence.Client
		n size.Bytes
	}{{w, 1536 * size.MiB}, {b, 2 * size.GiB}, {s, 512 * size.MiB}, {f, 1536 * size.MiB}} {
		if r := c.c.Charge(c.n); r != fence.Charged {
			t.Fatalf("setting up: %v", r)
		}
	}
	return dir, tb, w, b, s, f
}

// A waiting borrower that has borrowed less goes first: memory freed while it waits is not
// taken by one that has borrowed more, however fast that one asks; and one that has borrowed
// more holds nobody up. Here the other tasks' waits are written into their files, as their own
// processes could (tablectl), so that only W's rule decides.
func TestLesserBorrowerIsServedFirst(t *testing.T) {
	k := fencetest.Build(t)
	dir, tb, w, _, _, f := orderTable(t)
	tenant := k.StartTool(t)
	waitsFor := func(tok, ask string) {
		t.Helper()
		path := fence.AccountPath(dir, tok, fencetest.FakeUUID)
		n := "1"
		if ask == "0" {
			n = "0"
		}
		want(t, tenant.Do("tamper "+path+" nwait "+n+" "+tok), "ok", "tamper")
		want(t, tenant.Do("tamper "+path+" bwant "+ask+" "+tok), "ok", "tamper")
	}

	// B, which has borrowed more than W, waits for 512 MiB: what F frees goes to W all the same.
	got := charging(w, 512*size.MiB)
	waitFor(t, tb, "W waiting", func(s fence.Snapshot) bool { u, _ := s.Task(tokA); return u.Waiting })
	waitsFor(tokB, "512M")
	f.Uncharge(512 * size.MiB)
	if r := <-got; r != fence.Charged {
		t.Fatalf("W beside a waiting B that borrowed more: %v, want Charged", r)
	}

	// S, which has borrowed nothing, waits for 512 MiB: W may not take what F frees next.
	got = charging(w, 512*size.MiB)
	waitFor(t, tb, "W waiting again", func(s fence.Snapshot) bool { u, _ := s.Task(tokA); return u.Waiting })
	waitsFor(tokC, "512M")
	f.Uncharge(512 * size.MiB)
	select {
	case r := <-got:
		t.Fatalf("W's charge returned %v: it took what S, waiting with less borrowed, asks for", r)
	case <-time.After(300 * time.Millisecond): // a hundred of W's looks
	}
	waitsFor(tokC, "0")
	if r := <-got; r != fence.Charged {
		t.Fatalf("W once S asked for nothing: %v, want Charged", r)
	}
}

// Both waits real, each written into its task's file with what it asks for: when F frees room
// for one of them, the task that has borrowed less (S) is served and W waits on; W is served
// when F frees more.
func TestWaitingBorrowersAreServedLeastBorrowedFirst(t *testing.T) {
	_, tb, w, _, s, f := orderTable(t)
	gotS := charging(s, 512*size.MiB)
	gotW := charging(w, 512*size.MiB)
	waitFor(t, tb, "S and W waiting, each asking for its 512 MiB", func(sn fence.Snapshot) bool {
		us, _ := sn.Task(tokC)
		uw, _ := sn.Task(tokA)
		return us.Waiting && uw.Waiting && us.Asking == 512*size.MiB && uw.Asking == 512*size.MiB
	})
	f.Uncharge(512 * size.MiB)
	if r := <-gotS; r != fence.Charged {
		t.Fatalf("S, which borrowed nothing: %v, want Charged", r)
	}
	select {
	case r := <-gotW:
		t.Fatalf("W's charge returned %v with no room left for it", r)
	default:
	}
	f.Uncharge(512 * size.MiB)
	if r := <-gotW; r != fence.Charged {
		t.Fatalf("W once F freed more: %v, want Charged", r)
	}
}
