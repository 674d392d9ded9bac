package fence_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

// livePath is the lock file of token's task as placed now, which must be there.
func livePath(t *testing.T, dir, token string) string {
	t.Helper()
	p, err := fence.LivePath(dir, token, fencetest.FakeUUID)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A task sees the host through the mounts fence.TaskMounts gives it. There it writes its own
// accounting and allocates (borrowing reads the neighbour's file read-only), and the file
// system refuses it the neighbour's accounting, the control copy, and the fence directory. The
// neighbour's lock file and the enforcer's claim on the GPU it cannot open at all, so it can
// take no lock on them, not even a read lock.
func TestTaskCannotWriteAnotherTasksAccounting(t *testing.T) {
	k := fencetest.Build(t)
	dir, tb := table(t, 4*size.GiB, fence.Task{Token: tokA, Cap: size.GiB, Limit: 2 * size.GiB}, fence.Task{Token: tokB, Cap: size.GiB})
	b := attach(t, dir, tokB)
	if r := b.Charge(512 * size.MiB); r != fence.Charged {
		t.Fatalf("the neighbour's charge: %v", r)
	}
	ro, rw := taskMountPaths(dir, tokA)
	tenant := k.StartToolMounted(t, ro, rw)
	neighbour := fence.AccountPath(dir, tokB, fencetest.FakeUUID)
	for _, c := range []string{
		"tamper " + neighbour + " used 1G " + tokB,
		"tamper " + neighbour + " nowed 1 " + tokB,
		"tamper " + neighbour + " lock 1",
		"tamper-control " + fence.ControlPath(dir, fencetest.FakeUUID) + " cap 0 " + tokB,
	} {
		if got := tenant.DoWithin(c, bound); !strings.Contains(got, "Read-only file system") {
			t.Fatalf("%s: %q, want the file system to refuse it", c, got)
		}
	}
	for _, f := range []string{livePath(t, dir, tokB), filepath.Join(fence.EnforcerDir(dir), fencetest.FakeUUID+".lock")} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s must exist on the host: %v", f, err)
		}
		if got := tenant.DoWithin("rdlock "+f+" all", bound); !strings.Contains(got, "No such file or directory") {
			t.Fatalf("rdlock %s: %q, want the task not to find it", f, got)
		}
	}
	if got := tenant.DoWithin("tamper "+fence.AccountPath(dir, tokA, fencetest.FakeUUID)+" used 0 "+tokA, bound); got != "ok" {
		t.Fatalf("the task's own accounting must be writable to it: %q", got)
	}
	want(t, tenant.DoWithin("attach "+fence.Path(dir, fencetest.FakeUUID)+" "+tokA, bound), "ok ", "the task attaches in its mounts")
	want(t, tenant.DoWithin("charge 1536M", bound), "ok", "it borrows past its guarantee, reading the neighbour read-only")
	want(t, tenant.DoWithin("charge 1G", bound), "refused", "past its limit")
	if r := b.Charge(512 * size.MiB); r != fence.Charged {
		t.Fatalf("the neighbour within its guarantee after all that: %v", r)
	}
	s := snapshotWithin(t, tb)
	if u, _ := s.Task(tokB); u.Used != size.GiB || u.Owed || u.Waiting {
		t.Fatalf("the neighbour as the enforcer sees it: %+v", u)
	}
	if u, _ := s.Task(tokA); u.Used != 1536*size.MiB || u.Borrowed() != 512*size.MiB {
		t.Fatalf("the task as the enforcer sees it: %+v", u)
	}
}

// A tenant that takes the borrowers' lock (a flock on the control copy, which it holds
// read-only) and keeps it fails the other tasks' borrows within a bound, never their
// allocations within their guarantees; once it is gone (the kernel drops a dead holder's flock)
// borrowing works again.
func TestHeldBorrowLockFailsBorrowsNotGuarantees(t *testing.T) {
	k := fencetest.Build(t)
	dir, _ := table(t, 4*size.GiB, fence.Task{Token: tokA, Cap: size.GiB, Limit: 3 * size.GiB}, fence.Task{Token: tokB, Cap: size.GiB})
	a, b := attach(t, dir, tokA), attach(t, dir, tokB)
	holder := k.StartTool(t)
	want(t, holder.Do("flock "+fence.ControlPath(dir, fencetest.FakeUUID)), "ok", "the tenant takes the borrowers' lock")

	var r fence.Result
	start := time.Now()
	within(t, bound, "a borrow while the borrowers' lock is kept", func() { r = a.Charge(2 * size.GiB) })
	if r != fence.Refused {
		t.Fatalf("a borrow while another keeps the borrowers' lock: %v, want refused", r)
	}
	t.Logf("refused after %s", time.Since(start))
	start = time.Now()
	within(t, bound, "allocations within their guarantees", func() {
		if r = a.Charge(size.GiB); r == fence.Charged {
			r = b.Charge(size.GiB)
		}
	})
	if r != fence.Charged {
		t.Fatalf("an allocation within its guarantee while the borrowers' lock is kept: %v", r)
	}
	// A wait for the borrowers' lock is 200 ms (GF_BORROW_WAIT_NS): less, for both, is none.
	if d := time.Since(start); d >= 200*time.Millisecond {
		t.Fatalf("allocations within their guarantees took %s: they never wait for the borrowers' lock", d)
	}
	holder.Kill()
	within(t, bound, "a borrow once the holder is gone", func() { r = a.Charge(size.GiB) })
	if r != fence.Charged {
		t.Fatalf("a borrow once the tenant is gone: %v", r)
	}
}

// Claim, then check: an owner arming its guarantee and a borrower taking the same memory,
// racing, never both hold it. Each round places a fresh owner (unarmed, so its guarantee is lent
// but for a keep), then its first allocation of its whole guarantee races a borrow of most of
// it; whichever wins, the other is refused or waits for the winner to give it back. With a
// grace the owner's first charge arms, finds the memory borrowed and disarms again, each poll.
func TestOwnerAndBorrowerRacingNeverOvercommit(t *testing.T) {
	for _, grace := range []time.Duration{0, time.Second} {
		t.Run(fmt.Sprintf("grace %v", grace), func(t *testing.T) { raceOwnerAndBorrower(t, grace) })
	}
}

func raceOwnerAndBorrower(t *testing.T, grace time.Duration) {
	dir, tb := table(t, 2*size.GiB)
	tb.SetWait(0)
	borrower := fence.Task{Token: tokB, Cap: 512 * size.MiB, Limit: 2 * size.GiB}
	rounds := 300
	if testing.Short() {
		rounds = 60
	}
	var borrowed, owned, overlaps atomic.Int64
	deadline := time.Now().Add(60 * time.Second)
	for i := range rounds {
		if time.Now().After(deadline) {
			t.Fatalf("%d rounds in 60s: a charge waited for nothing", i)
		}
		tok := fmt.Sprintf("owner-%04d-%s", i, tokA[:8])
		owner := fence.Task{Token: tok, Cap: size.GiB, Keep: size.MiB, Grace: grace}
		if err := tb.SetTasks([]fence.Task{borrower, owner}, 2*size.GiB); err != nil {
			t.Fatal(err)
		}
		b := attach(t, dir, tokB)
		var o *fence.Client
		var attachErr error
		var wg sync.WaitGroup
		// hold takes n bytes and, while it holds them, reads the other side as the enforcer
		// does (each file under its lock: a claim being judged is settled by then): the other
		// may hold nothing of the same memory.
		hold := func(c *fence.Client, n size.Bytes, count *atomic.Int64, other string, most size.Bytes) {
			defer wg.Done()
			if c == nil {
				// The owner's attach races the borrow too (its first charge arms it).
				if o, attachErr = fence.Attach(dir, fencetest.FakeUUID, tok); attachErr != nil {
					return
				}
				c = o
			}
			if c.Charge(n) != fence.Charged {
				return
			}
			count.Add(1)
			if s, err := tb.Snapshot(); err == nil {
				if u, _ := s.Task(other); u.Used > most {
					overlaps.Add(1)
				}
			}
			c.Uncharge(n)
		}
		wg.Add(2)
		// The borrower: 1 GiB past its guarantee, the owner's but for the keep; meanwhile the
		// owner holds nothing. The owner: its whole guarantee; meanwhile the borrower nothing
		// past its own.
		go hold(b, 1536*size.MiB, &borrowed, tok, 0)
		go hold(nil, size.GiB, &owned, tokB, borrower.Cap)
		within(t, bound, "a racing round", wg.Wait)
		if attachErr != nil {
			t.Fatal(attachErr)
		}
		o.Detach()
		b.Detach()
	}
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("%d of %d rounds granted the owner its guarantee and the borrower the same memory at once", n, rounds)
	}
	if owned.Load() != int64(rounds) {
		t.Fatalf("the owner got its guarantee in %d of %d rounds: a guarantee is always served", owned.Load(), rounds)
	}
	t.Logf("%d rounds: the borrower won %d", rounds, borrowed.Load())
	s := snapshotWithin(t, tb)
	for _, u := range s.Tasks {
		if u.Used != 0 {
			t.Fatalf("after the rounds, task %+v holds bytes nobody holds", u)
		}
	}
}

// Claim, then check, on the enforcer's side: placing a new guarantee while a borrower takes the
// same memory never grants both. Each round starts both at once; each keeps what it got until the
// other is done, so two grants would stand side by side.
func TestPlacementAndBorrowerRacingNeverOvercommit(t *testing.T) {
	dir, tb := table(t, 2*size.GiB)
	tb.SetWait(0)
	borrower := fence.Task{Token: tokB, Cap: 512 * size.MiB, Limit: 2 * size.GiB}
	if err := tb.SetTasks([]fence.Task{borrower}, 2*size.GiB); err != nil {
		t.Fatal(err)
	}
	b := attach(t, dir, tokB)
	rounds := 400
	if testing.Short() {
		rounds = 80
	}
	var placed, borrowed, both int
	for i := range rounds {
		tok := fmt.Sprintf("newcomer-%04d-%s", i, tokC[:8])
		var wg sync.WaitGroup
		var gotBorrow, gotPlace bool
		begin := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-begin
			gotBorrow = b.Charge(1536*size.MiB) == fence.Charged // 1 GiB past its guarantee
		}()
		go func() {
			defer wg.Done()
			<-begin
			gotPlace = tb.SetTasks([]fence.Task{borrower, {Token: tok, Cap: size.GiB}}, 2*size.GiB) == nil
		}()
		close(begin)
		within(t, bound, "a racing round", wg.Wait)
		if gotBorrow {
			borrowed++
			b.Uncharge(1536 * size.MiB)
		}
		if gotPlace {
			placed++
		}
		if gotBorrow && gotPlace {
			both++
		}
		if err := tb.SetTasks([]fence.Task{borrower}, 2*size.GiB); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rounds: placed %d, borrowed %d", rounds, placed, borrowed)
	if both > 0 {
		t.Fatalf("%d of %d rounds placed a guarantee over the memory a borrower held", both, rounds)
	}
	if placed+borrowed < rounds {
		t.Fatalf("placed %d, borrowed %d of %d rounds: one side a round at least must win", placed, borrowed, rounds)
	}
}

// Borrowers of different tasks racing for the same free memory, started at once, each keeping
// what it got until the other is done: one at a time (the borrowers' flock), so exactly one a
// round, never both, and never neither (two claims checking each other would both back off).
func TestBorrowersRacingNeverOvercommit(t *testing.T) {
	dir, _ := table(t, 3*size.GiB,
		fence.Task{Token: tokA, Cap: size.GiB, Limit: 3 * size.GiB}, fence.Task{Token: tokB, Cap: size.GiB, Limit: 3 * size.GiB})
	clients := []*fence.Client{attach(t, dir, tokA), attach(t, dir, tokB)}
	const want = size.GiB + 768*size.MiB // 1 GiB is free past the two guarantees: each wants 768 MiB of it
	rounds := 3000
	if testing.Short() {
		rounds = 300
	}
	var both, neither int
	for range rounds {
		var wg sync.WaitGroup
		var got [2]bool
		begin := make(chan struct{})
		for me := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-begin
				got[me] = clients[me].Charge(want) == fence.Charged
			}()
		}
		close(begin)
		within(t, bound, "a racing round", wg.Wait)
		switch {
		case got[0] && got[1]:
			both++
		case !got[0] && !got[1]:
			neither++
		}
		for me := range 2 {
			if got[me] {
				clients[me].Uncharge(want)
			}
		}
	}
	if both > 0 || neither > 0 {
		t.Fatalf("of %d rounds, %d granted both borrowers the same memory and %d neither", rounds, both, neither)
	}
}

// The preload library writes its own task's file and only reads the other tasks': in a borrowing
// process, its own accounting file is mapped shared writable, the control copy read-only, and the
// neighbour's file is not mapped at all (it is read with pread) and open read-only.
func TestLibraryMapsOtherTasksReadOnly(t *testing.T) {
	k := fencetest.Build(t)
	dir, _ := table(t, 4*size.GiB, fence.Task{Token: tokA, Cap: size.GiB, Limit: 2 * size.GiB}, fence.Task{Token: tokB, Cap: size.GiB})
	c := k.Start(t, k.Env(dir, tokA))
	if got := c.Do("alloc 1536M"); !strings.HasPrefix(got, "ok") {
		t.Fatalf("a borrow through the library: %q", got)
	}
	proc := fmt.Sprintf("/proc/%d", c.PID())
	maps, err := os.ReadFile(proc + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	perms := map[string]string{}
	for _, line := range strings.Split(string(maps), "\n") {
		if f := strings.Fields(line); len(f) == 6 {
			perms[f[5]] = f[1]
		}
	}
	own, other := fence.AccountPath(dir, tokA, fencetest.FakeUUID), fence.AccountPath(dir, tokB, fencetest.FakeUUID)
	control := fence.ControlPath(dir, fencetest.FakeUUID)
	if perms[own] != "rw-s" || perms[other] != "" || perms[control] != "r--s" {
		t.Fatalf("the library's maps: own %q, the neighbour's %q, the control copy's %q; want rw-s, none, r--s",
			perms[own], perms[other], perms[control])
	}
	fds, err := os.ReadDir(proc + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	opened := false
	for _, fd := range fds {
		if target, _ := os.Readlink(proc + "/fd/" + fd.Name()); target != other {
			continue
		}
		info, err := os.ReadFile(proc + "/fdinfo/" + fd.Name())
		if err != nil {
			t.Fatal(err)
		}
		var flags int
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				fmt.Sscanf(strings.TrimSpace(v), "%o", &flags)
			}
		}
		if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
			t.Fatalf("the neighbour's file is open with flags %o, want read-only", flags)
		}
		opened = true
	}
	if !opened {
		t.Fatal("the borrow never read the neighbour's file")
	}
}

// A task may truncate its own accounting file (it writes it). A neighbour that borrows reads it
// with pread, so it does not fault: it takes the file for unreadable (the task holds its whole
// guarantee) and goes on.
func TestTruncatedNeighbourFaultsNoBorrower(t *testing.T) {
	k := fencetest.Build(t)
	dir, _ := table(t, 4*size.GiB, fence.Task{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, fence.Task{Token: tokB, Cap: size.GiB})
	a := k.StartTool(t)
	want(t, a.Do("attach "+fence.Path(dir, fencetest.FakeUUID)+" "+tokA), "ok ", "A attaches")
	want(t, a.Do("charge 1536M"), "ok", "A borrows, reading B's file")
	if err := os.Truncate(fence.AccountPath(dir, tokB, fencetest.FakeUUID), 0); err != nil {
		t.Fatal(err)
	}
	want(t, a.DoWithin("charge 1G", bound), "ok", "A borrows on beside a truncated neighbour")
	want(t, a.DoWithin("charge 1G", bound), "refused", "but not into the neighbour's guarantee")
}

// An accounting directory, and a lock directory, is its task's to write, and the enforcer (root on
// the host) and the other tasks' processes open what lies in it by name: a symbolic link there is
// never followed (a tenant would have the enforcer write a host file) and a FIFO never opened (a
// borrowing neighbour, or the enforcer, would hang on it).
func TestNothingFollowsWhatATaskLeftInItsDirectory(t *testing.T) {
	dir, tb := table(t, 4*size.GiB, fence.Task{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, fence.Task{Token: tokB, Cap: size.GiB})
	victim := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(victim, []byte("a host file"), 0o600); err != nil {
		t.Fatal(err)
	}
	own, ownLive := fence.AccountPath(dir, tokA, fencetest.FakeUUID), livePath(t, dir, tokA)
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	// The tenant of A swaps its files for links to the host file and plants others where the
	// enforcer writes fresh files; B's files become FIFOs.
	for _, f := range []string{own, ownLive} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
		for _, l := range []string{f, fmt.Sprintf("%s.new.%d", f, os.Getpid())} {
			if err := os.Symlink(victim, l); err != nil {
				t.Fatal(err)
			}
		}
	}
	fifos := []string{fence.AccountPath(dir, tokB, fencetest.FakeUUID), livePath(t, dir, tokB)}
	for _, fifo := range fifos {
		if err := os.Remove(fifo); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(fifo, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	within(t, bound, "an enforcer starting over the planted files", func() {
		if tb, err = fence.Create(dir, fencetest.FakeUUID, 80*size.GiB, 4*size.GiB); err == nil {
			err = tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB, Limit: 4 * size.GiB}, {Token: tokB, Cap: size.GiB}}, 4*size.GiB)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	if b, err := os.ReadFile(victim); err != nil || string(b) != "a host file" {
		t.Fatalf("the host file behind the link: %q %v", b, err)
	}
	for _, f := range []string{own, livePath(t, dir, tokA), fifos[0], livePath(t, dir, tokB)} {
		if st, err := os.Lstat(f); err != nil || !st.Mode().IsRegular() {
			t.Fatalf("%s: %v %v, want a fresh regular file in place of what the task left", f, st, err)
		}
	}
	// The new files' lock files are named for their inodes, which may be the old ones'.
	for _, f := range []string{ownLive, fifos[1]} {
		if st, err := os.Lstat(f); err == nil && !st.Mode().IsRegular() {
			t.Fatalf("%s: %v, want what the task left under its lock file's name gone", f, st.Mode())
		}
	}
	a := attach(t, dir, tokA)
	var r fence.Result
	within(t, bound, "a borrow beside a neighbour whose file is a FIFO", func() { r = a.Charge(2 * size.GiB) })
	if r != fence.Charged {
		t.Fatalf("a borrow that the neighbour's guarantee leaves room for: %v", r)
	}
	within(t, bound, "a borrow into the neighbour's guarantee", func() { r = a.Charge(1536 * size.MiB) })
	if r != fence.Refused {
		t.Fatalf("a borrow into a neighbour whose file cannot be read: %v, want refused (it holds its guarantee)", r)
	}
}

// The control copy is written inside a sequence counter: an enforcer stopped in the middle of a
// write leaves nothing a process acts on. Its allocations go on unfenced after a bound (the
// watchdog holds the cap) instead of reading half a write or hanging, and the next enforcer makes
// the copy whole.
func TestHalfWrittenControlCopyDecidesNothing(t *testing.T) {
	k := fencetest.Build(t)
	dir := t.TempDir()
	path := fence.Path(dir, fencetest.FakeUUID)
	first := k.StartTool(t)
	want(t, first.Do("create "+path+" "+fencetest.FakeUUID+" 80G"), "ok", "the first enforcer")
	want(t, first.Do("set "+tokA+" 1G"), "placed 1", "places A")
	c := k.StartTool(t)
	want(t, c.Do("attach "+path+" "+tokA), "ok ", "A attaches")
	want(t, c.Do("charge 100M"), "ok", "A charges")
	first.Kill()
	second := k.StartTool(t, "GF_TEST_STALL=set-tasks")
	want(t, second.DoWithin("create "+path+" "+fencetest.FakeUUID+" 80G", bound), "ok", "the next enforcer")
	second.Send("set " + tokA + " 8G")
	second.WaitStderr("gf-test: stalled at set-tasks")
	want(t, c.DoWithin("charge 2G", bound), "busy", "a charge while the copy is half written")
	second.Kill()

	tb := startOver(t, dir, "over a half-written copy")
	want(t, c.DoWithin("charge 2G", bound), "refused", "past its guarantee once the copy is whole")
	want(t, c.DoWithin("charge 100M", bound), "ok", "within it")
	s := snapshotWithin(t, tb)
	if u, _ := s.Task(tokA); u.Used != 200*size.MiB || u.Cap != size.GiB || s.Recoveries < 1 {
		t.Fatalf("after the half-written copy: task %+v, recoveries %d", u, s.Recoveries)
	}
}

// Only its own task's mount reaches a task's lock file (TestTaskCannotWriteAnotherTasksAccounting),
// but a descriptor opened only for reading may take read locks on any byte of a file. An owner (a
// live process's slot, a lock holder's owner index) holds its byte for writing: a read lock on a
// dead owner's byte, by whoever may open the file to read it, must keep nothing alive. Before
// (when the bytes lay in the accounting files, which every task reads), a neighbour's read lock
// kept a task's exited process charged for good, so that task was refused its own guarantee
// and the enforcer never reaped it, and it kept a dead lock holder alive, so that task's next
// process waited a second and ran unfenced.
func TestNeighboursReadLocksKeepNoDeadOwnerAlive(t *testing.T) {
	k := fencetest.Build(t)
	t.Run("exited process", func(t *testing.T) {
		dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB}, fence.Task{Token: tokB, Cap: size.GiB})
		file := livePath(t, dir, tokB)
		a := k.StartTool(t)
		for i, slot := range []string{"0", "1"} {
			c := k.Start(t, k.Env(dir, tokB))
			want(t, c.Do("alloc 900M"), "ok", "B's process")
			c.Exit()
			want(t, a.DoWithin("rdlock "+file+" live "+slot, bound), "ok", "a reader read-locks the byte of B's exited process")
			if i == 0 {
				continue // B's next process reaps it before it would refuse
			}
			if n := tb.Reap(); n != 1 {
				t.Fatalf("the enforcer reaped %d of B's exited processes, want 1", n)
			}
		}
		if u := snap(t, tb, tokB); u.Used != 0 || u.Procs != 0 {
			t.Fatalf("B's exited processes are still charged: %+v", u)
		}
	})
	t.Run("lock holder", func(t *testing.T) {
		dir, _ := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB}, fence.Task{Token: tokB, Cap: size.GiB})
		file := livePath(t, dir, tokB)
		attachB := "attach " + fence.Path(dir, fencetest.FakeUUID) + " " + tokB
		victim := k.StartTool(t, "GF_TEST_STALL=charge")
		want(t, victim.Do(attachB), "ok", "B's process attaches")
		victim.Send("charge 100M")
		victim.WaitStderr("gf-test: stalled at charge")
		victim.Kill()
		a := k.StartTool(t)
		want(t, a.DoWithin("rdlock "+file+" holder "+fence.AccountPath(dir, tokB, fencetest.FakeUUID), bound), "ok",
			"a reader read-locks the dead holder's owner byte")
		next := k.StartTool(t)
		start := time.Now()
		want(t, next.DoWithin(attachB, bound), "ok ", "B's next process attaches")
		want(t, next.DoWithin("charge 200M", bound), "ok", "and charges")
		if d := time.Since(start); d > underAWait {
			t.Fatalf("B's next process took %s: it waited for a dead holder a neighbour kept alive", d)
		}
	})
}

// A task reads the others' accounting files to borrow, and a read-only descriptor may take read
// locks on every byte of them. The bytes a process write-locks to attach (an owner index, a
// process slot's liveness) lie in a file only its own task reaches, so a neighbour that
// read-locks the whole of a task's accounting file keeps none of that task's processes from
// attaching: the next one is fenced, refused inside itself past its cap. Before, it found no
// byte it could lock, could not attach, and ran under the watchdog alone.
func TestReadLockedNeighbourStillAttaches(t *testing.T) {
	k := fencetest.Build(t)
	dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB}, fence.Task{Token: tokB, Cap: size.GiB})
	ro, rw := taskMountPaths(dir, tokA)
	a := k.StartToolMounted(t, ro, rw)
	want(t, a.DoWithin("rdlock "+fence.AccountPath(dir, tokB, fencetest.FakeUUID)+" all", bound), "ok",
		"A read-locks every byte of B's accounting file")
	c := k.Start(t, k.Env(dir, tokB))
	want(t, c.DoWithin("alloc 900M", bound), "ok", "B's new process within its cap")
	want(t, c.DoWithin("alloc 200M", bound), "err 2", "B's new process past its cap, refused inside itself")
	if strings.Contains(c.Stderr(), "watchdog alone") {
		t.Fatalf("B's process did not attach: %s", c.Stderr())
	}
	if u := snap(t, tb, tokB); u.Used != 900*size.MiB || u.Procs != 1 {
		t.Fatalf("B as the enforcer sees it: %+v, want its process's 900 MiB", u)
	}
}

// The enforcer's claim on a GPU (what refuses a second enforcer) is a lock on a file no task can
// open. A tenant that read-locks every byte of the control copy, which it may read, while the
// enforcer is down (a restart, an upgrade) keeps no enforcer that starts again from the GPU:
// before, that enforcer was refused (ErrBusy), and no task's allocations there were fenced while
// the tenant lived. A second live enforcer is still refused.
func TestReadLockedControlCopyKeepsNoEnforcerOut(t *testing.T) {
	k := fencetest.Build(t)
	tasks := []fence.Task{{Token: tokA, Cap: size.GiB}, {Token: tokB, Cap: size.GiB}}
	dir, tb := table(t, 0, tasks...)
	ro, rw := taskMountPaths(dir, tokA)
	a := k.StartToolMounted(t, ro, rw)
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	want(t, a.DoWithin("rdlock "+fence.ControlPath(dir, fencetest.FakeUUID)+" all", bound), "ok",
		"A read-locks every byte of the control copy")
	again, err := fence.Create(dir, fencetest.FakeUUID, 80*size.GiB, 0)
	if err != nil {
		t.Fatalf("an enforcer that starts again while a tenant read-locks the control copy: %v", err)
	}
	t.Cleanup(func() { again.Close() })
	if _, err := fence.Create(dir, fencetest.FakeUUID, 80*size.GiB, 0); !errors.Is(err, fence.ErrBusy) {
		t.Fatalf("a second enforcer beside a live one: %v, want ErrBusy", err)
	}
	if err := again.SetTasks(tasks, 0); err != nil {
		t.Fatal(err)
	}
	c := k.Start(t, k.Env(dir, tokB))
	want(t, c.DoWithin("alloc 900M", bound), "ok", "B within its cap")
	want(t, c.DoWithin("alloc 200M", bound), "err 2", "B past its cap")
}

// taskMountPaths are the paths Reserve mounts into task tok's container, read-only and
// read-write: what a tenant under them can reach of the fence directory dir.
func taskMountPaths(dir, tok string) (ro, rw []string) {
	for _, m := range fence.TaskMounts(dir, "", tok) {
		if m.ReadOnly {
			ro = append(ro, m.Path)
		} else {
			rw = append(rw, m.Path)
		}
	}
	return ro, rw
}
