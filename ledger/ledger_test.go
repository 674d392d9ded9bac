package ledger

import (
	"encoding/json"
	"errors"
	"io"

	"github.com/hashicorp/go-hclog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

func TestInstanceIDRoundTrip(t *testing.T) {
	for _, k := range []int{0, 1, 9, 10, 140, 1 << 20} {
		u, got, err := ParseInstanceID(InstanceID(gpuA, k))
		if err != nil || u != gpuA || got != k {
			t.Errorf("ParseInstanceID(InstanceID(%s, %d)) = %q, %d, %v", gpuA, k, u, got, err)
		}
	}
	for _, bad := range []string{"", "GPU", "-1", "GPU-", "GPU-x", "GPU-01", "GPU-+1", "GPU-99999999999999999999"} {
		if _, _, err := ParseInstanceID(bad); !errors.Is(err, ErrInstanceID) || !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("ParseInstanceID(%q) err = %v, want ErrInstanceID naming the input", bad, err)
		}
	}
}

func TestStatesAndPolicy(t *testing.T) {
	l, _ := newTest(t, Options{})
	if l.Policy() != policy.Default() {
		t.Errorf("Policy() = %+v before SetPolicy, want Default()", l.Policy())
	}
	bad := policy.Default()
	bad.UnitBytes = 1
	if err := l.SetPolicy(bad); !errors.Is(err, policy.ErrInvalid) {
		t.Errorf("SetPolicy(unit 1B) = %v, want policy.ErrInvalid", err)
	}
	withPolicy(t, l, func(p *policy.Policy) { p.UnitBytes = 512 * size.MiB; p.Mode = policy.ModeMPS; p.MaxTasksPerGPU = 4 })
	if err := l.SetMode(gpuB, policy.ModeIsolated); err != nil {
		t.Fatal(err)
	}
	if err := l.SetMode(gpuB, "bogus"); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("SetMode(bogus) = %v", err)
	}
	if err := l.SetUnmanaged(gpuA, 1*size.GiB); err != nil {
		t.Fatal(err)
	}
	if err := l.SetMode("GPU-missing", ""); !errors.Is(err, ErrUnknownGPU) {
		t.Errorf("SetMode(unknown GPU) = %v, want ErrUnknownGPU", err)
	}
	st := l.States()
	if len(st) != 2 || st[0].UUID != gpuA || st[1].UUID != gpuB {
		t.Fatalf("States() order = %v", st)
	}
	a, b := st[0], st[1]
	if a.Mode != policy.ModeMPS || b.Mode != policy.ModeIsolated {
		t.Errorf("modes = %s, %s; want mps (policy default), isolated (per GPU)", a.Mode, b.Mode)
	}
	// A: 12GiB - 2GiB headroom - 1GiB unmanaged = 9GiB = 18 units of 512MiB.
	if a.BudgetBytes != 9*size.GiB || a.Units != 18 || len(a.Instances) != 18 || a.MaxTasks != 4 || a.UnitBytes != 512*size.MiB {
		t.Errorf("A = budget %s units %d instances %d max %d unit %s", a.BudgetBytes, a.Units, len(a.Instances), a.MaxTasks, a.UnitBytes)
	}
	if err := l.SetUnmanaged(gpuA, 20*size.GiB); err != nil {
		t.Fatal(err)
	}
	if a = mustState(t, l, gpuA); a.BudgetBytes != 0 || a.Units != 0 {
		t.Errorf("budget floor: budget %s units %d, want 0 and 0", a.BudgetBytes, a.Units)
	}
	// Setting the same policy again is not a change.
	ch, stop := l.Subscribe()
	defer stop()
	if err := l.SetPolicy(l.Policy()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Errorf("unchanged policy notified subscribers")
	default:
	}
}

func TestSyncGPUsRejectsBadInventory(t *testing.T) {
	l, _ := newTest(t, Options{})
	for _, tc := range []struct {
		gpus []GPUInfo
		want string
	}{
		{[]GPUInfo{info("", 0, size.GiB)}, "empty UUID"},
		{[]GPUInfo{info(gpuA, 0, size.GiB), info(gpuA, 1, size.GiB)}, gpuA + " is listed twice"},
	} {
		if err := l.SyncGPUs(tc.gpus); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SyncGPUs(%v) = %v, want ErrBadInput containing %q", tc.gpus, err, tc.want)
		}
	}
	if len(l.States()) != 2 {
		t.Errorf("a refused inventory changed the GPUs")
	}
}

func TestGraceExpiry(t *testing.T) {
	c := newClock()
	l, dir := newTest(t, Options{Now: c.Now, Grace: time.Minute})
	seen := mustReserve(t, l, Task{JobName: "seen"}, ids(gpuA, 0)...)
	c.Advance(30 * time.Second)
	unseen := mustReserve(t, l, Task{JobName: "unseen"}, ids(gpuA, 1)...)
	c.Advance(20 * time.Second)
	if err := l.Seen(seen.Token, Task{}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		advance time.Duration
		want    []string // job names expired by this step
	}{
		{30 * time.Second, nil},                // unseen at 50s, seen at 30s since sighting
		{10 * time.Second, []string{"unseen"}}, // unseen reaches 60s since creation
		{19 * time.Second, nil},                // seen at 59s since sighting
		{time.Second, []string{"seen"}},
	}
	for i, s := range steps {
		c.Advance(s.advance)
		gone, err := l.ExpireUnseen()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range gone {
			names = append(names, r.Task.JobName)
		}
		if !reflect.DeepEqual(names, s.want) {
			t.Errorf("step %d: expired %v, want %v", i, names, s.want)
		}
	}
	if _, ok := l.Reservation(unseen.Token); ok {
		t.Errorf("expired reservation still present")
	}

	// After a restart every reservation gets a full Grace, even if its last sighting is old,
	// because the watchdog has not had a chance to see it yet.
	r := mustReserve(t, l, Task{JobName: "restart"}, ids(gpuA, 2)...)
	l.Close()
	c.Advance(10 * time.Minute)
	l2, err := Open(dir, Options{Now: c.Now, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if gone, _ := l2.ExpireUnseen(); len(gone) != 0 {
		t.Errorf("reservation expired right after a restart: %v", gone)
	}
	c.Advance(time.Minute)
	if gone, _ := l2.ExpireUnseen(); len(gone) != 1 || gone[0].Token != r.Token {
		t.Errorf("reservation unseen for Grace after restart did not expire: %v", gone)
	}
}

func TestProfiles(t *testing.T) {
	l, _ := newTest(t, Options{})
	steps := []struct {
		p        Profile
		wantPeak size.Bytes
		wantErr  string
	}{
		{Profile{Template: "llama", PeakBytes: 10 * size.GiB, Source: ProfileProbe}, 10 * size.GiB, ""},
		{Profile{Template: "llama", PeakBytes: 8 * size.GiB, Source: ProfileRun}, 8 * size.GiB, ""},               // latest wins
		{Profile{Template: "llama", PeakBytes: 7 * size.GiB, Source: ProfileViolation}, 8 * size.GiB, ""},         // never lowers
		{Profile{Template: "llama", PeakBytes: 12 * size.GiB, Source: ProfileViolation}, 12 * size.GiB, ""},       // raises
		{Profile{Template: "", PeakBytes: size.GiB, Source: ProfileProbe}, 0, "no template"},                      // refused
		{Profile{Template: "llama", PeakBytes: size.GiB, Source: "guess"}, 0, `"guess"`},                          // refused
		{Profile{Template: "bert", PeakBytes: 2 * size.GiB, Source: ProfileProbe, Samples: 40}, 2 * size.GiB, ""}, // other template
	}
	for i, s := range steps {
		err := l.RecordProfile(s.p)
		if s.wantErr != "" {
			if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), s.wantErr) {
				t.Errorf("step %d: err = %v, want ErrBadInput with %q", i, err, s.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		got, ok := l.Profile(s.p.Template)
		if !ok || got.PeakBytes != s.wantPeak || got.Source != s.p.Source || got.MeasuredAt.IsZero() {
			t.Errorf("step %d: Profile = %+v, want peak %s source %s", i, got, s.wantPeak, s.p.Source)
		}
	}
	all := l.Profiles()
	if len(all) != 2 || all[0].Template != "bert" || all[1].Template != "llama" {
		t.Errorf("Profiles() = %v, want bert then llama", all)
	}
}

func TestViolationsBound(t *testing.T) {
	// The bound is an in-memory rule; NoPersist keeps 1000+ commits of a 1000-entry file out of
	// the test's run time. Persistence of violations is checked below and in the restart test.
	l, err := Open("", Options{NoPersist: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.RecordViolation(Violation{}); !errors.Is(err, ErrBadInput) {
		t.Errorf("violation without GPU accepted: %v", err)
	}
	for i := range MaxViolations + 5 {
		if err := l.RecordViolation(Violation{GPU: gpuA, Detail: strconv.Itoa(i), Action: "sigint"}); err != nil {
			t.Fatal(err)
		}
	}
	v := l.Violations()
	if len(v) != MaxViolations || v[0].Detail != "5" || v[len(v)-1].Detail != strconv.Itoa(MaxViolations+4) {
		t.Errorf("kept %d violations from %q to %q, want %d from 5 to %d", len(v), v[0].Detail, v[len(v)-1].Detail, MaxViolations, MaxViolations+4)
	}
}

func TestViolationsPersist(t *testing.T) {
	l, dir := newTest(t, Options{})
	for i := range 3 {
		if err := l.RecordViolation(Violation{GPU: gpuA, Detail: strconv.Itoa(i), CrossedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := ReadSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	if v := l.Violations(); len(v) != 3 || !reflect.DeepEqual(snap.Violations, v) {
		t.Errorf("snapshot violations %v differ from the ledger's %v", snap.Violations, v)
	}
	l.Close()
	// Violations without the state file are refused, not read as an empty ledger (the state
	// without its violations is TestDamagedViolationsKeepTheLedger's).
	for _, missing := range []string{StateFile} {
		path := filepath.Join(dir, missing)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(path)
		if _, err := Open(dir, Options{}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
			t.Errorf("Open without %s = %v, want ErrCorrupt naming it", path, err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l2, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l2.Close()
}

func TestSubscribe(t *testing.T) {
	l, _ := newTest(t, Options{})
	ch, stop := l.Subscribe()
	notified := func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	r := mustReserve(t, l, Task{}, ids(gpuA, 0)...)
	mustReserve(t, l, Task{}, ids(gpuA, 1)...)
	if !notified() {
		t.Errorf("no notification after reserving")
	}
	if notified() {
		t.Errorf("two changes gave two notifications; want them coalesced into one")
	}
	steps := []struct {
		name   string
		change func() error
		want   bool
	}{
		{"violation", func() error { return l.RecordViolation(Violation{GPU: gpuA}) }, false},
		{"profile", func() error { return l.RecordProfile(Profile{Template: "x", Source: ProfileProbe}) }, false},
		{"seen, nothing new", func() error { return l.Seen(r.Token, Task{}) }, false},
		{"seen, task learned", func() error { return l.Seen(r.Token, Task{JobName: "j"}) }, true},
		{"unmanaged", func() error { return l.SetUnmanaged(gpuA, size.GiB) }, true},
		{"unmanaged unchanged", func() error { return l.SetUnmanaged(gpuA, size.GiB) }, false},
		{"health", func() error { return l.SetHealth(gpuA, false, "down") }, true},
		{"mode", func() error { return l.SetMode(gpuA, policy.ModeMPS) }, true},
		{"release", func() error { return l.Release(r.Token, "done") }, true},
		{"same inventory", func() error {
			return l.SyncGPUs([]GPUInfo{info(gpuA, 0, 12*size.GiB), info(gpuB, 1, 8*size.GiB)})
		}, false},
		{"new inventory", func() error { return l.SyncGPUs([]GPUInfo{info(gpuA, 0, 12*size.GiB)}) }, true},
	}
	for _, s := range steps {
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := notified(); got != s.want {
			t.Errorf("%s: notified = %v, want %v", s.name, got, s.want)
		}
	}
	stop()
	if _, open := <-ch; open {
		t.Errorf("channel still open after unsubscribe")
	}
	stop() // idempotent
	// A change after unsubscribing must not send on (and panic over) the closed channel.
	if err := l.SetHealth(gpuA, true, ""); err != nil {
		t.Fatal(err)
	}
}

func TestRestartRestoresEverything(t *testing.T) {
	c := newClock()
	l, dir := newTest(t, Options{Now: c.Now})
	withPolicy(t, l, func(p *policy.Policy) { p.Name = "tight"; p.HeadroomBytes = 1 * size.GiB })
	mustReserve(t, l, Task{JobName: "a", TaskName: "t", AllocID: "alloc-a", Template: "llama"}, ids(gpuA, 0, 4)...)
	c.Advance(time.Second)
	r, err := l.ReserveBytes(gpuB, 3*size.GiB, Task{JobName: "b"})
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second)
	if err := l.Seen(r.Token, Task{TaskName: "learned"}); err != nil {
		t.Fatal(err)
	}
	for _, step := range []error{
		l.SetMode(gpuA, policy.ModeMPS),
		l.SetUnmanaged(gpuB, 300*size.MiB),
		l.SetHealth(gpuB, false, "MPS daemon down"),
		l.RecordViolation(Violation{GPU: gpuA, Token: r.Token, CrossedAt: time.Now(), Action: "sigkill"}),
		l.RecordProfile(Profile{Template: "llama", PeakBytes: 5 * size.GiB, Source: ProfileProbe, Duration: time.Minute}),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	wantStates, wantRes, wantViol, wantProf, wantPol := l.States(), l.Reservations(), l.Violations(), l.Profiles(), l.Policy()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := Open(dir, Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	for name, pair := range map[string][2]any{
		"states":       {wantStates, l2.States()},
		"reservations": {wantRes, l2.Reservations()},
		"violations":   {wantViol, l2.Violations()},
		"profiles":     {wantProf, l2.Profiles()},
		"policy":       {wantPol, l2.Policy()},
	} {
		if !reflect.DeepEqual(pair[0], pair[1]) {
			t.Errorf("%s differ after restart:\nbefore %+v\nafter  %+v", name, pair[0], pair[1])
		}
	}
	snap, err := ReadSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	if snap.SchemaVersion != SchemaVersion || !reflect.DeepEqual(snap.GPUs, wantStates) || !reflect.DeepEqual(snap.Reservations, wantRes) {
		t.Errorf("snapshot differs from the ledger: %+v", snap)
	}
}

func TestSecondWriterRefused(t *testing.T) {
	_, dir := newTest(t, Options{})
	_, err := Open(dir, Options{})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), filepath.Join(dir, LockFile)) ||
		!strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("second Open = %v, want ErrLocked naming the lock file and pid %d", err, os.Getpid())
	}
	// Readers need no lock.
	if _, err := ReadSnapshot(dir); err != nil {
		t.Errorf("ReadSnapshot while a writer holds the lock: %v", err)
	}
}

func TestBadFilesAreErrors(t *testing.T) {
	good := func(t *testing.T) (string, []byte) {
		l, dir := newTest(t, Options{})
		mustReserve(t, l, Task{}, ids(gpuA, 0)...)
		l.Close()
		b, err := os.ReadFile(filepath.Join(dir, StateFile))
		if err != nil {
			t.Fatal(err)
		}
		return dir, b
	}
	tests := []struct {
		name    string
		mangle  func([]byte) []byte
		wantErr error
		want    string
	}{
		// A state file that is not JSON says what to do: nothing of it can be guessed.
		{"empty", func([]byte) []byte { return nil }, ErrCorrupt, "is not a complete JSON document: unexpected end of JSON input; move the ledger directory aside"},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }, ErrCorrupt, "not a complete JSON document"},
		{"newer schema", func(b []byte) []byte {
			return []byte(strings.Replace(string(b), `"schema_version":1`, `"schema_version":2`, 1))
		}, ErrSchema, "schema_version 2"},
		{"no schema", func(b []byte) []byte {
			return []byte(strings.Replace(string(b), `"schema_version":1`, `"schema_versio":1`, 1))
		}, ErrCorrupt, "no valid schema_version"},
		{"reservation on unknown GPU", func(b []byte) []byte {
			return []byte(strings.Replace(string(b), `"gpu":"`+gpuA, `"gpu":"GPU-elsewhere`, 1))
		}, ErrCorrupt, "GPU-elsewhere"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, b := good(t)
			path := filepath.Join(dir, StateFile)
			if err := os.WriteFile(path, tc.mangle(b), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Open(dir, Options{})
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open = %v, want %v naming %s and saying %q", err, tc.wantErr, path, tc.want)
			}
			if _, err := ReadSnapshot(dir); !errors.Is(err, tc.wantErr) {
				t.Errorf("ReadSnapshot = %v, want %v", err, tc.wantErr)
			}
			// The bad file is left as it was: nothing is reset.
			if after, _ := os.ReadFile(path); string(after) != string(tc.mangle(b)) {
				t.Errorf("the refused file was modified")
			}
		})
	}
	if _, err := ReadSnapshot(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadSnapshot(empty dir) = %v, want fs.ErrNotExist", err)
	}
	// Both the sentinel and the decoder's error are wrapped, so a caller can find where it broke.
	dir, b := good(t)
	if err := os.WriteFile(filepath.Join(dir, StateFile), b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	var syntax *json.SyntaxError
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrCorrupt) || !errors.As(err, &syntax) {
		t.Errorf("Open of a truncated state = %v, want ErrCorrupt wrapping the *json.SyntaxError", err)
	}
}

func TestClosed(t *testing.T) {
	l, _ := newTest(t, Options{})
	ch, _ := l.Subscribe()
	l.Close()
	if _, open := <-ch; open {
		t.Errorf("Close left a subscription open")
	}
	for name, err := range map[string]error{
		"ReserveIDs":   func() error { _, err := l.ReserveIDs(ids(gpuA, 0), Task{}); return err }(),
		"SetPolicy":    l.SetPolicy(policy.Default()),
		"SetUnmanaged": l.SetUnmanaged(gpuA, 1),
		"Release":      l.Release("x", "y"),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

func TestTokenLogging(t *testing.T) {
	var buf strings.Builder
	l, _ := newTest(t, Options{Logger: newBufLogger(&buf)})
	r := mustReserve(t, l, Task{JobName: "j"}, ids(gpuA, 0)...)
	if err := l.Release(r.Token, "done"); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, r.Token[:8]) {
		t.Errorf("log does not mention the token prefix %s:\n%s", r.Token[:8], out)
	}
	if strings.Contains(out, r.Token) {
		t.Errorf("log contains a full secret token:\n%s", out)
	}
	if !strings.Contains(out, "ledger") {
		t.Errorf("log lines are not under the logger name \"ledger\":\n%s", out)
	}
}

func newBufLogger(w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "test", Output: w, Level: hclog.Trace})
}

// A commit that cannot be written leaves memory as it was: the ledger never claims what the
// disk does not hold. The temp path is made a directory so that the write fails before rename.
func TestFailedCommitRollsBack(t *testing.T) {
	l, dir := newTest(t, Options{})
	old := mustReserve(t, l, Task{JobName: "old"}, ids(gpuA, 0)...)
	before := l.States()
	ch, stop := l.Subscribe()
	defer stop()
	block := filepath.Join(dir, StateFile+tempSuffix)
	if err := os.Mkdir(block, 0o700); err != nil {
		t.Fatal(err)
	}
	// This request would end old (reuse) and admit a new reservation; neither may stick.
	if _, err := l.ReserveIDs(ids(gpuA, 0, 1), Task{JobName: "new"}); err == nil || !strings.Contains(err.Error(), block) {
		t.Fatalf("ReserveIDs with an unwritable temp file = %v, want an error naming %s", err, block)
	}
	for name, err := range map[string]error{
		"Release":      l.Release(old.Token, "x"),
		"SetUnmanaged": l.SetUnmanaged(gpuA, size.GiB),
		"SetPolicy":    l.SetPolicy(policy.Policy{Name: "p2", HeadroomBytes: size.GiB, MaxTasksPerGPU: 3, UnitBytes: size.GiB, Mode: policy.ModeMPS, WatchdogInterval: time.Second, Unmanaged: policy.UnmanagedStop}),
	} {
		if err == nil {
			t.Errorf("%s succeeded although nothing could be written", name)
		}
	}
	if after := l.States(); !reflect.DeepEqual(before, after) {
		t.Errorf("failed commits changed the state:\nbefore %+v\nafter  %+v", before, after)
	}
	select {
	case <-ch:
		t.Errorf("failed commits notified subscribers")
	default:
	}
	if err := os.Remove(block); err != nil {
		t.Fatal(err)
	}
	mustReserve(t, l, Task{JobName: "new"}, ids(gpuA, 0, 1)...)
	if _, ok := l.Reservation(old.Token); ok {
		t.Errorf("reuse did not end the old reservation once commits worked again")
	}
}

func TestStaleTempFileIgnored(t *testing.T) {
	l, dir := newTest(t, Options{})
	r := mustReserve(t, l, Task{}, ids(gpuA, 0)...)
	l.Close()
	// A writer killed between writing the temp file and the rename leaves this behind.
	tmp := filepath.Join(dir, StateFile+tempSuffix)
	if err := os.WriteFile(tmp, []byte(`{"schema_version":1,"gener`), 0o600); err != nil {
		t.Fatal(err)
	}
	l2, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open with a stale temp file: %v", err)
	}
	defer l2.Close()
	if _, ok := l2.Reservation(r.Token); !ok {
		t.Errorf("committed reservation lost")
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temp file still there: %v", err)
	}
}

// The writer's grace is in the file, so a reader counts a reservation's expiry as the writer
// does; a file written before it was says none (0).
func TestSnapshotCarriesTheWritersGrace(t *testing.T) {
	for _, grace := range []time.Duration{10 * time.Minute, DefaultGrace} {
		t.Run(grace.String(), func(t *testing.T) {
			l, dir := newTest(t, Options{Grace: grace})
			mustReserve(t, l, Task{JobName: "j"}, ids(gpuA, 0)...)
			snap, err := ReadSnapshot(dir)
			if err != nil || snap.Grace != grace {
				t.Fatalf("ReadSnapshot: %v, grace %s, want %s", err, snap.Grace, grace)
			}
		})
	}
	_, dir := newTest(t, Options{Grace: time.Hour})
	path := filepath.Join(dir, StateFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "grace")
	if b, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if snap, err := ReadSnapshot(dir); err != nil || snap.Grace != 0 {
		t.Fatalf("a file without its grace: %v, grace %s, want 0", err, snap.Grace)
	}
}
