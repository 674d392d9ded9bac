package fence_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/enforcer/fence/fencetest"
	"github.com/gpufrac/gpufrac/size"
)

func TestMain(m *testing.M) { fencetest.Main(m) }

const (
	tokA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	tokB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// table makes a fence directory with one table for the fake GPU and the given tasks.
func table(t *testing.T, budget size.Bytes, tasks ...fence.Task) (string, *fence.Table) {
	t.Helper()
	dir := t.TempDir()
	tb, err := fence.Create(dir, fencetest.FakeUUID, 80*size.GiB, budget)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	if err := tb.SetTasks(tasks, budget); err != nil {
		t.Fatal(err)
	}
	return dir, tb
}

// taskA is the start of most tests here: the fence's table with task A alone under capBytes (no
// budget of its own), and one process of A started under the fence with extra in its environment.
func taskA(t *testing.T, capBytes size.Bytes, extra ...string) (fencetest.Kit, string, *fence.Table, *fencetest.Proc) {
	t.Helper()
	k := fencetest.Build(t)
	dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: capBytes})
	return k, dir, tb, k.Start(t, k.Env(dir, tokA, extra...))
}

// afterExit is the task's use once a process of it has exited: still charged until a reaper
// gives its slot back (the driver frees its memory only in its teardown, after every
// destructor), then nothing of it, as after the watchdog's next pass.
func afterExit(t *testing.T, tb *fence.Table, token string) fence.TaskUse {
	t.Helper()
	if u := snap(t, tb, token); u.Procs == 0 {
		t.Fatalf("an exited process's slot was given back before any reaper ran: %+v", u)
	}
	if n := tb.Reap(); n == 0 {
		t.Fatal("the reaper found no dead process to give back")
	}
	return snap(t, tb, token)
}

func snap(t *testing.T, tb *fence.Table, token string) fence.TaskUse {
	t.Helper()
	s, err := tb.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	u, ok := s.Task(token)
	if !ok {
		t.Fatalf("task %s… not in the table: %+v", token[:4], s.Tasks)
	}
	return u
}

func want(t *testing.T, got, wantPrefix, what string) {
	t.Helper()
	if !strings.HasPrefix(got, wantPrefix) {
		t.Fatalf("%s: got %q, want %q…", what, got, wantPrefix)
	}
}

// Every allocation path, reached as the runtime reaches it, directly by symbol name, and
// through the per-thread-stream variants, stops the task at its cap and gives bytes back on free.
func TestEveryPathStopsAtCap(t *testing.T) {
	k := fencetest.Build(t)
	paths := []struct{ alloc, big, small string }{
		{"alloc", "alloc 700M", "alloc 300M"},
		{"managed", "managed 700M", "managed 300M"},
		{"async", "async 700M", "async 300M"},
		{"pool", "pool 700M", "pool 300M"},
		{"create", "create 700M", "create 300M"},
		{"pitch", "pitch 1M 700", "pitch 1M 300"},
		{"array", "array 1M 175", "array 1M 75"},          // float32: 4 bytes an element
		{"array3d", "array3d 1M 25 7", "array3d 1M 25 3"}, // 700M and 300M
	}
	modes := []struct {
		name string
		args []string
		env  []string
	}{
		{"runtime", nil, nil},
		{"runtime-ptds", nil, []string{"CLIENT_PTDS=1"}},
		{"direct", []string{"direct"}, nil},
		{"direct-ptsz", []string{"direct"}, []string{"CLIENT_PTDS=1"}},
	}
	for _, m := range modes {
		for _, p := range paths {
			t.Run(m.name+"/"+p.alloc, func(t *testing.T) {
				dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
				c := k.Start(t, k.Env(dir, tokA, m.env...), m.args...)
				want(t, c.Do(p.big), "ok 0", "first allocation under the cap")
				want(t, c.Do(p.big), "err 2", "allocation past the cap")
				want(t, c.Do(p.small), "ok 1", "allocation that still fits")
				if u := snap(t, tb, tokA); u.Used != 1000*size.MiB || u.Refused != 1 || u.Procs != 1 {
					t.Fatalf("table after 700M+300M with one refusal: %+v", u)
				}
				want(t, c.Do("free 0"), "ok", "free")
				want(t, c.Do(p.big), "ok 2", "allocation after a free")
				c.Exit()
				if u := afterExit(t, tb, tokA); u.Used != 0 || u.Procs != 0 {
					t.Fatalf("an exited process kept bytes or a slot: %+v", u)
				}
			})
		}
	}
}

// The cap is the task's, not each process's.
func TestProcessesOfOneTaskShareTheCap(t *testing.T) {
	k := fencetest.Build(t)
	dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB}, fence.Task{Token: tokB, Cap: size.GiB})
	a := k.Start(t, k.Env(dir, tokA))
	b := k.Start(t, k.Env(dir, tokA))
	other := k.Start(t, k.Env(dir, tokB))
	want(t, a.Do("alloc 600M"), "ok", "a")
	want(t, b.Do("alloc 600M"), "err 2", "b past the task's cap")
	want(t, other.Do("alloc 1000M"), "ok", "another task keeps its own cap")
	want(t, b.Do("alloc 400M"), "ok", "b within the task's cap")
	want(t, a.Do("free 0"), "ok", "a frees")
	want(t, b.Do("alloc 600M"), "ok", "b after a's free")
	if u := snap(t, tb, tokA); u.Used != 1000*size.MiB || u.Procs != 2 || u.Peak != 1000*size.MiB {
		t.Fatalf("task A: %+v", u)
	}
	if !strings.Contains(b.Stderr(), "refused 600.0 MiB") || strings.Count(b.Stderr(), "refused") != 1 ||
		!strings.Contains(b.Stderr(), "of its 1024.0 MiB cap: past its limit (after 0.0 s of waiting)") {
		t.Fatalf("the first refusal should be said once on stderr, with its cause, got %q", b.Stderr())
	}
}

// A borrower's allocation that waits long says so once in the task's log (after a quarter of
// its bound here, 10 s at most), and its refusal says the wait ran out.
func TestALongWaitIsSaid(t *testing.T) {
	_, a := blockedBorrower(t)
	// B's guarantee covers the other half of the budget: A's 1.5 GiB waits for it, in vain.
	want(t, a.Do("alloc 1500M"), "err 2", "a borrow that B's guarantee blocks")
	a.WaitStderr("within its wait")
	got := a.Stderr()
	if strings.Count(got, "has waited") != 1 || !strings.Contains(got, "an allocation of 1500.0 MiB") ||
		!strings.Contains(got, "no borrowable memory came free within its wait (after 2.") {
		t.Fatalf("stderr %q: want one line about the wait, then the refusal's cause", got)
	}
}

func TestMemGetInfoShowsTheTaskItsCap(t *testing.T) {
	k, dir, _, c := taskA(t, size.GiB)
	want(t, c.Do("alloc 256M"), "ok", "alloc")
	want(t, c.Do("info"), fmt.Sprintf("info %d %d", 768*size.MiB, size.GiB), "free is what is left of the cap")
	// A GPU with less free memory than the cap leaves: free never exceeds the GPU's own.
	small := k.Start(t, k.Env(dir, tokA, fmt.Sprintf("FAKE_CUDA_TOTAL=%d", 512*size.MiB)))
	want(t, small.Do("info"), fmt.Sprintf("info %d %d", 512*size.MiB, 512*size.MiB), "free and total bounded by the GPU")
}

// A process killed with its bytes held gives them back; the next allocation that would be
// refused reaps it first.
func TestKilledProcessGivesItsBytesBack(t *testing.T) {
	k, dir, tb, a := taskA(t, size.GiB)
	want(t, a.Do("alloc 900M"), "ok", "a")
	a.Kill()
	b := k.Start(t, k.Env(dir, tokA))
	want(t, b.Do("alloc 900M"), "ok", "b after a was killed")
	s, _ := tb.Snapshot()
	if u, _ := s.Task(tokA); u.Used != 900*size.MiB || u.Procs != 1 || s.Reaped != 1 {
		t.Fatalf("after the reap: task %+v, reaped %d", u, s.Reaped)
	}
}

// Killed while the driver works on an allocation the fence already counted.
func TestKilledInsideTheDriver(t *testing.T) {
	_, _, tb, a := taskA(t, size.GiB, "FAKE_CUDA_HANG=1")
	a.Send("alloc 900M")
	a.WaitStderr("fake: hanging")
	if u := snap(t, tb, tokA); u.Used != 900*size.MiB {
		t.Fatalf("an allocation in flight must be counted: %+v", u)
	}
	a.Kill()
	if n := tb.Reap(); n != 1 {
		t.Fatalf("reaped %d slots, want 1", n)
	}
	if u := snap(t, tb, tokA); u.Used != 0 || u.Procs != 0 {
		t.Fatalf("after the reap: %+v", u)
	}
}

// Killed while holding the table's lock, between raising the task's sum and its own: the next
// locker takes the lock over and rebuilds the sums, so nothing is counted twice or lost.
func TestKilledHoldingTheLock(t *testing.T) {
	k, dir, tb, b := taskA(t, size.GiB)
	want(t, b.Do("alloc 100M"), "ok", "b")
	env := k.Env(dir, tokA, "GF_TEST_STALL=charge")
	env[0] = "LD_PRELOAD=" + k.TestLibrary
	a := k.Start(t, env)
	a.Send("alloc 800M")
	a.WaitStderr("gf-test: stalled at charge")
	a.Kill()
	want(t, b.Do("alloc 900M"), "ok", "b after a died holding the lock")
	s, _ := tb.Snapshot()
	u, _ := s.Task(tokA)
	if s.Recoveries != 1 || u.Used != 1000*size.MiB || s.Underflows != 0 {
		t.Fatalf("after the take-over: recoveries %d, underflows %d, task %+v", s.Recoveries, s.Underflows, u)
	}
	if n := tb.Reap(); n != 1 || snap(t, tb, tokA).Procs != 1 {
		t.Fatalf("the dead holder's slot: reaped %d, task %+v", n, snap(t, tb, tokA))
	}
}

func TestThreadsAllocatingAtOnce(t *testing.T) {
	_, _, tb, c := taskA(t, 1000*size.MiB)
	// 8 threads x 100 allocations of 10 MiB with no frees until the end: exactly 100 fit.
	want(t, c.Do("threads 8 100 10M"), "threads ok=100 refused=700", "threads")
	if u := snap(t, tb, tokA); u.Used != 0 || u.Peak != 1000*size.MiB || u.Refused != 700 {
		t.Fatalf("after the threads freed everything: %+v", u)
	}
}

func TestForkedChildCountsForTheTask(t *testing.T) {
	_, _, tb, c := taskA(t, size.GiB)
	want(t, c.Do("alloc 600M"), "ok", "parent")
	want(t, c.Do("fork 300M"), "child ok", "child within the task's cap")
	// The first child left with _exit, its 300M still counted: the refusal reaps it first,
	// and 600M + 500M is still past the cap.
	want(t, c.Do("fork 500M"), "child err 2", "child past the task's cap")
	tb.Reap()
	if u := snap(t, tb, tokA); u.Used != 600*size.MiB || u.Procs != 1 || u.Peak != 900*size.MiB {
		t.Fatalf("children gone, parent's bytes stay: %+v", u)
	}
	want(t, c.Do("alloc 400M"), "ok", "parent after its children left")
}

func TestUnfencedProcessesSayWhyOnce(t *testing.T) {
	k := fencetest.Build(t)
	_, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
	garbage := t.TempDir()
	if err := os.MkdirAll(fence.ControlDir(garbage), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fence.ControlPath(garbage, fencetest.FakeUUID), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	short := t.TempDir()
	if err := os.MkdirAll(fence.ControlDir(short), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fence.ControlPath(short, fencetest.FakeUUID), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, say string
		env       []string
	}{
		{"no table", "No such file", k.Env(t.TempDir(), tokA)},
		{"not a table", "bad magic", k.Env(garbage, tokA)},
		{"short table", "too short", k.Env(short, tokA)},
		{"no fence dir", "GPUFRAC_FENCE_DIR is not set", append(k.Env("", tokA)[:3], "GPUFRAC_RESERVATION="+tokA)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := k.Start(t, tc.env)
			want(t, c.Do("alloc 2G"), "ok", "unfenced allocations pass")
			want(t, c.Do("alloc 2G"), "ok", "unfenced allocations pass")
			c.Exit()
			if got := c.Stderr(); !strings.Contains(got, tc.say) || strings.Count(got, "gpufrac-fence") != 1 {
				t.Fatalf("want one line saying %q, got %q", tc.say, got)
			}
		})
	}
	if u := snap(t, tb, tokA); u.Used != 0 {
		t.Fatalf("unfenced processes charged the table: %+v", u)
	}
}

// A reservation that ends leaves its processes unfenced (the watchdog owns them) and says so.
func TestEndedReservation(t *testing.T) {
	_, _, tb, c := taskA(t, size.GiB)
	want(t, c.Do("alloc 900M"), "ok", "before")
	if err := tb.SetTasks(nil, 0); err != nil {
		t.Fatal(err)
	}
	want(t, c.Do("alloc 900M"), "ok", "after the reservation ended")
	c.WaitStderr("ended or this process lost its slot")
}

// Borrowing: past its guarantee a task may take what no guarantee covers, up to its limit,
// and never what another task was promised.
func TestBorrowingNeverTakesAGuarantee(t *testing.T) {
	dir, tb := table(t, 3*size.GiB,
		fence.Task{Token: tokA, Cap: size.GiB, Limit: 3 * size.GiB},
		fence.Task{Token: tokB, Cap: size.GiB})
	a, err := fence.Attach(dir, fencetest.FakeUUID, tokA)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Detach()
	b, err := fence.Attach(dir, fencetest.FakeUUID, tokB)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Detach()
	steps := []struct {
		c    *fence.Client
		n    size.Bytes
		want fence.Result
		why  string // what the refusal says
	}{
		{a, 2 * size.GiB, fence.Charged, ""},           // 1 GiB borrowed: the budget's unpromised part
		{a, 1, fence.Refused, "borrowers do not wait"}, // the rest is B's guarantee
		{b, size.GiB, fence.Charged, ""},               // B's guarantee is whole
		{b, 1, fence.Refused, "past its limit"},        // B has no limit above its cap
	}
	for i, s := range steps {
		if got := s.c.Charge(s.n); got != s.want {
			t.Fatalf("step %d: charge %s = %v, want %v", i, s.n, got, s.want)
		}
		if s.why != "" {
			refusedFor(t, s.c, s.why, 0)
		}
	}
	a.Uncharge(2 * size.GiB)
	if u := snap(t, tb, tokA); u.Used != 0 || u.Peak != 2*size.GiB {
		t.Fatalf("task A after its free: %+v", u)
	}
}

// A refusal records what the task asked for in all (its use then plus the bytes refused), the
// largest of its refusals: a task refused one large allocation reached far less than it needs,
// and a re-run sized from what it reached would be refused again.
func TestRefusalRecordsWhatWasAsked(t *testing.T) {
	dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
	c := attach(t, dir, tokA)
	if r := c.Charge(512 * size.MiB); r != fence.Charged {
		t.Fatal(r)
	}
	for _, tc := range []struct {
		ask  size.Bytes
		want size.Bytes
	}{
		{6 * size.GiB, 6*size.GiB + 512*size.MiB},
		{2 * size.GiB, 6*size.GiB + 512*size.MiB}, // a smaller refusal lowers nothing
		{^size.Bytes(0), ^size.Bytes(0)},          // past 2^64 in all: as much as can be said
	} {
		if r := c.Charge(tc.ask); r != fence.Refused {
			t.Fatalf("asking for %d bytes: %v, want Refused", tc.ask, r)
		}
		if u := snap(t, tb, tokA); u.Asked != tc.want || u.Used != 512*size.MiB {
			t.Fatalf("after asking for %d bytes: %+v, want asked %d", tc.ask, u, tc.want)
		}
	}
}

func TestUnderflowIsCountedNotWrapped(t *testing.T) {
	dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: size.GiB})
	c, err := fence.Attach(dir, fencetest.FakeUUID, tokA)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Detach()
	if r := c.Charge(100); r != fence.Charged {
		t.Fatal(r)
	}
	c.Uncharge(1 << 40)
	s, _ := tb.Snapshot()
	if u, _ := s.Task(tokA); u.Used != 0 || s.Underflows != 1 {
		t.Fatalf("used %d, underflows %d", u.Used, s.Underflows)
	}
}

func TestCreateRefusesWhatItCannotUse(t *testing.T) {
	dir, _ := table(t, 0)
	if _, err := fence.Create(dir, fencetest.FakeUUID, size.GiB, 0); !errors.Is(err, fence.ErrBusy) {
		t.Fatalf("a second enforcer on one table: %v, want ErrBusy", err)
	}
	bad := t.TempDir()
	if err := os.MkdirAll(fence.ControlDir(bad), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fence.ControlPath(bad, "GPU-x"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := fence.Create(bad, "GPU-x", size.GiB, 0)
	if !errors.Is(err, fence.ErrCorrupt) || !strings.Contains(err.Error(), fence.ControlPath(bad, "GPU-x")) {
		t.Fatalf("a table of zeros: %v, want ErrCorrupt naming the file", err)
	}
	for _, uuid := range []string{"", "../GPU-x", "a/b"} {
		if _, err := fence.Create(t.TempDir(), uuid, size.GiB, 0); !errors.Is(err, fence.ErrBadInput) {
			t.Errorf("uuid %q: %v, want ErrBadInput", uuid, err)
		}
	}
}

func TestSetTasksChecksItsInput(t *testing.T) {
	_, tb := table(t, 0)
	if err := tb.SetTasks([]fence.Task{{Token: strings.Repeat("x", 80), Cap: 1}}, 0); !errors.Is(err, fence.ErrBadInput) || !strings.Contains(err.Error(), "80 characters") {
		t.Fatalf("long token: %v", err)
	}
	var many []fence.Task
	for i := range fence.MaxTasks + 1 {
		many = append(many, fence.Task{Token: fmt.Sprintf("t%03d", i), Cap: size.MiB})
	}
	if err := tb.SetTasks(many, 0); !errors.Is(err, fence.ErrFull) {
		t.Fatalf("%d tasks: %v, want ErrFull", len(many), err)
	}
	// Known tokens keep their slot and what they hold; a new cap applies at once.
	if err := tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB}}, 0); err != nil {
		t.Fatal(err)
	}
	s, _ := tb.Snapshot()
	if len(s.Tasks) != 1 || s.Tasks[0].Cap != size.GiB {
		t.Fatalf("after the resync: %+v", s.Tasks)
	}
}

// A mipmapped array is charged the sum of its levels: each halves every dimension down to 1,
// but a layered array's depth (its layer count). One bound for every shape, 4/3 of the first
// level (right for 2D), left a third of a 1D array's first level uncharged, and most of a
// layered 1D one's.
func TestMipmappedArrayIsChargedItsLevels(t *testing.T) {
	k := fencetest.Build(t)
	for _, tc := range []struct {
		name, create string
	}{
		{"1D, 27 levels", "mipmap 64M 0 0 0 27"},                  // 256MiB, then halves: about 512MiB
		{"2D, 14 levels", "mipmap 8K 8K 0 0 14"},                  // 256MiB, then quarters: about 341MiB
		{"3D, 10 levels", "mipmap 512 512 256 0 10"},              // 256MiB, then eighths: about 293MiB
		{"layered 1D, 8 layers, 24 levels", "mipmap 8M 0 8 1 24"}, // 8 layers of 32MiB halving: about 512MiB
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, tb := table(t, 0, fence.Task{Token: tokA, Cap: 2 * size.GiB})
			c := k.Start(t, k.Env(dir, tokA))
			before := deviceHolds(t, c)
			want(t, c.Do(tc.create), "ok 0", "the mipmapped array")
			held := deviceHolds(t, c) - before
			if u := snap(t, tb, tokA); u.Used != held {
				t.Fatalf("the task is charged %s for a mipmapped array the device holds %s of", u.Used, held)
			}
			want(t, c.Do("free 0"), "ok", "its destroy")
			if u := snap(t, tb, tokA); u.Used != 0 {
				t.Fatalf("after its destroy the task is charged %s", u.Used)
			}
		})
	}
}

// blockedBorrower is task A, which may borrow up to 2 GiB, beside B's 1 GiB guarantee on a
// 2 GiB budget, waits bounded at 2 s, and one process of A: what A asks past its own 1 GiB
// waits for B's guarantee, in vain.
func blockedBorrower(t *testing.T) (*fence.Table, *fencetest.Proc) {
	t.Helper()
	k := fencetest.Build(t)
	dir, tb := table(t, 2*size.GiB)
	tb.SetWait(2 * time.Second) // published by the next SetTasks
	if err := tb.SetTasks([]fence.Task{{Token: tokA, Cap: size.GiB, Limit: 2 * size.GiB}, {Token: tokB, Cap: size.GiB}}, 2*size.GiB); err != nil {
		t.Fatal(err)
	}
	return tb, k.Start(t, k.Env(dir, tokA))
}
