package ledger

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/size"
)

// The crash test re-executes this test binary as a writer child (selected by these variables in
// TestMain), kills it with SIGKILL at random moments and checks what the parent can reopen.
const (
	envCrashDir   = "GPUFRAC_LEDGER_CRASH_DIR"
	envCrashRound = "GPUFRAC_LEDGER_CRASH_ROUND"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(envCrashDir); dir != "" {
		round, _ := strconv.Atoi(os.Getenv(envCrashRound))
		if err := crashChild(dir, round); err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// liveSet is the sorted job numbers of the reservations in a ledger, as a comparable string.
func liveSet(rs []Reservation) string {
	var n []int
	for _, r := range rs {
		v, _ := strconv.Atoi(strings.TrimPrefix(r.Task.JobName, "job-"))
		n = append(n, v)
	}
	return joinSorted(n)
}

// setString is the sorted members of a set of job numbers, as liveSet writes them.
func setString(m map[int]bool) string {
	var n []int
	for v := range m {
		n = append(n, v)
	}
	return joinSorted(n)
}

func joinSorted(n []int) string {
	slices.Sort(n)
	s := make([]string, len(n))
	for i, v := range n {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

// crashChild reserves and releases in a tight loop. Before each change it prints the generation
// and job set the change will commit ("pending"); after the commit returns, "ok". The parent
// thereby knows every state the child acknowledged and the one that may be in flight.
func crashChild(dir string, round int) error {
	l, err := Open(dir, Options{})
	if err != nil {
		return err
	}
	if err := l.SyncGPUs([]GPUInfo{info(gpuA, 0, 12*size.GiB)}); err != nil {
		return err
	}
	live := map[int]bool{}
	var order []string // tokens, oldest first
	job := map[string]int{}
	for _, r := range l.Reservations() {
		v, _ := strconv.Atoi(strings.TrimPrefix(r.Task.JobName, "job-"))
		live[v] = true
		order = append(order, r.Token)
		job[r.Token] = v
	}
	gen := func() uint64 { l.mu.Lock(); defer l.mu.Unlock(); return l.st.gen }
	fmt.Printf("ready %d %s\n", gen(), setString(live))
	deadline := time.Now().Add(20 * time.Second) // never outlive a parent that died
	for i := 1; time.Now().Before(deadline); i++ {
		n := round*1_000_000 + i
		release := len(order) > 0 && (len(order) >= 5 || rand.IntN(3) == 0)
		if !release {
			units := 1 + rand.IntN(3)
			live[n] = true
			fmt.Printf("pending %d %s\n", gen()+1, setString(live))
			r, err := l.ReserveBytes(gpuA, size.Bytes(units)*size.GiB, Task{JobName: fmt.Sprintf("job-%d", n), TaskName: strconv.Itoa(units)})
			if err == nil {
				order = append(order, r.Token)
				job[r.Token] = n
				fmt.Printf("ok %d %s\n", gen(), setString(live))
				continue
			}
			delete(live, n)
			if len(order) == 0 {
				return fmt.Errorf("denied with nothing reserved: %w", err)
			}
		}
		tok := order[0]
		delete(live, job[tok])
		fmt.Printf("pending %d %s\n", gen()+1, setString(live))
		if err := l.Release(tok, "crash test"); err != nil {
			return err
		}
		order = order[1:]
		fmt.Printf("ok %d %s\n", gen(), setString(live))
	}
	return nil
}

func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary 30 times")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	var lastGen uint64
	commitsSeen := 0
	for round := 1; round <= 30; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envCrashDir+"="+dir, envCrashRound+"="+strconv.Itoa(round))
		out, stderr := testutil.StartPiped(t, cmd)
		ready := make(chan struct{})
		acked := map[uint64]string{}
		pending := map[uint64]string{}
		var lastAcked uint64
		var readErr error
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				f := strings.SplitN(sc.Text(), " ", 3)
				g, err := strconv.ParseUint(f[1], 10, 64)
				if err != nil {
					readErr = fmt.Errorf("child line %q: %v", sc.Text(), err)
					return
				}
				set := ""
				if len(f) == 3 {
					set = f[2]
				}
				switch f[0] {
				case "ready":
					acked[g], lastAcked = set, g
					close(ready)
				case "pending":
					pending[g] = set
				case "ok":
					acked[g], lastAcked = set, g
				}
			}
		}()

		// Readers never take the lock and must never see a torn or regressing state.
		stopReads := make(chan struct{})
		readsDone := make(chan error, 1)
		go func() {
			var prev uint64
			for {
				select {
				case <-stopReads:
					readsDone <- nil
					return
				default:
				}
				snap, err := ReadSnapshot(dir)
				if err != nil && !(errors.Is(err, fs.ErrNotExist) && round == 1) {
					readsDone <- fmt.Errorf("ReadSnapshot during writes: %w", err)
					return
				}
				if err == nil {
					if snap.Generation < prev {
						readsDone <- fmt.Errorf("snapshot generation went back from %d to %d", prev, snap.Generation)
						return
					}
					prev = snap.Generation
				}
			}
		}()

		select {
		case <-ready:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("round %d: child never became ready; stderr: %s", round, stderr.String())
		}
		time.Sleep(time.Duration(rng.IntN(21)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		cmd.Wait()
		close(stopReads)
		if err := <-readsDone; err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if readErr != nil {
			t.Fatalf("round %d: %v", round, readErr)
		}
		if strings.Contains(stderr.String(), "crash child:") {
			t.Fatalf("round %d: child failed: %s", round, stderr.String())
		}

		l, err := Open(dir, Options{})
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		gen := func() uint64 { l.mu.Lock(); defer l.mu.Unlock(); return l.st.gen }()
		got := liveSet(l.Reservations())
		switch {
		case gen < lastGen:
			t.Errorf("round %d: generation went back from %d to %d", round, lastGen, gen)
		case gen == lastAcked:
			if got != acked[gen] {
				t.Errorf("round %d: generation %d holds jobs [%s], the child acknowledged [%s]", round, gen, got, acked[gen])
			}
		case gen == lastAcked+1:
			// The kill came after the rename but before the child printed "ok".
			if got != pending[gen] {
				t.Errorf("round %d: in-flight generation %d holds jobs [%s], the child was committing [%s]", round, gen, got, pending[gen])
			}
		default:
			t.Errorf("round %d: reopened generation %d, but the child acknowledged %d (lost or invented commits)", round, gen, lastAcked)
		}
		for _, r := range l.Reservations() {
			units, _ := strconv.Atoi(r.Task.TaskName)
			if len(r.Token) != 32 || len(r.InstanceIDs) != units || r.CapBytes != size.Bytes(units)*size.GiB || r.GPU != gpuA {
				t.Errorf("round %d: incomplete reservation %+v", round, r)
			}
		}
		checkInvariants(t, mustState(t, l, gpuA), false)
		commitsSeen += int(gen - lastGen)
		lastGen = gen
		l.Close()
	}
	if commitsSeen < 30 {
		t.Errorf("only %d commits in 30 rounds: the child was killed before it did any work", commitsSeen)
	}
	t.Logf("%d commits over 30 SIGKILLed writers", commitsSeen)
}

// TestConcurrentAdmission hammers one ledger from many goroutines (run it with -race) and checks
// after every read that no GPU is over-committed in bytes or tasks.
func TestConcurrentAdmission(t *testing.T) {
	for _, tc := range []struct {
		name    string
		persist bool
		workers int
		ops     int
	}{
		{"memory", false, 16, 400},
		{"disk", true, 8, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l *Ledger
			var dir string
			if tc.persist {
				l, dir = newTest(t, Options{})
			} else {
				var err error
				if l, err = Open("", Options{NoPersist: true}); err != nil {
					t.Fatal(err)
				}
				if err := l.SyncGPUs([]GPUInfo{info(gpuA, 0, 12*size.GiB), info(gpuB, 1, 8*size.GiB)}); err != nil {
					t.Fatal(err)
				}
			}
			var admitted, deniedN sync.Map
			var wg sync.WaitGroup
			for w := range tc.workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 99))
					var mine []string
					for i := range tc.ops {
						gpu := []string{gpuA, gpuB}[rng.IntN(2)]
						var err error
						var r Reservation
						switch op := rng.IntN(6); op {
						case 0, 1:
							n := 1 + rng.IntN(3)
							ks := rng.Perm(10)[:n]
							r, err = l.ReserveIDs(ids(gpu, ks...), Task{JobName: fmt.Sprintf("w%d-%d", w, i)})
						case 2:
							r, err = l.ReserveBytes(gpu, size.Bytes(1+rng.IntN(3))*size.GiB, Task{JobName: fmt.Sprintf("w%d-%d", w, i)})
						case 3:
							if len(mine) > 0 {
								tok := mine[0]
								mine = mine[1:]
								// Another worker may have ended it by reusing an ID.
								if err := l.Release(tok, "done"); err != nil && !errors.Is(err, ErrNoReservation) {
									t.Errorf("Release: %v", err)
								}
							}
							continue
						case 4:
							for _, tok := range mine {
								if err := l.Seen(tok, Task{TaskName: "t"}); err != nil && !errors.Is(err, ErrNoReservation) {
									t.Errorf("Seen: %v", err)
								}
							}
							continue
						case 5:
							for _, s := range l.States() {
								checkInvariants(t, s, false)
							}
							continue
						}
						switch {
						case err == nil:
							mine = append(mine, r.Token)
							admitted.Store(r.Token, true)
						case errors.Is(err, ErrDenied):
							deniedN.Store(fmt.Sprint(w, i), true)
						default:
							t.Errorf("reserve: %v", err)
						}
					}
				}()
			}
			wg.Wait()
			count := func(m *sync.Map) (n int) {
				m.Range(func(any, any) bool { n++; return true })
				return n
			}
			if count(&admitted) == 0 || count(&deniedN) == 0 {
				t.Errorf("admitted %d, denied %d: the test did not exercise both outcomes", count(&admitted), count(&deniedN))
			}
			states := l.States()
			for _, s := range states {
				checkInvariants(t, s, false)
			}
			if tc.persist {
				snap, err := ReadSnapshot(dir)
				if err != nil {
					t.Fatal(err)
				}
				// SeenAt is committed lazily (see Seen), so it is the one field allowed to lag.
				if !reflect.DeepEqual(withoutSeenAt(snap.GPUs), withoutSeenAt(states)) {
					t.Errorf("the file disagrees with memory after concurrent use")
				}
			}
		})
	}
}

func withoutSeenAt(states []GPUState) []GPUState {
	out := make([]GPUState, len(states))
	for i, s := range states {
		s.Reservations = append([]Reservation(nil), s.Reservations...)
		for j := range s.Reservations {
			s.Reservations[j].SeenAt = time.Time{}
		}
		out[i] = s
	}
	return out
}

// fillDisk makes the next write of name's temp file meet a full disk: the temp path becomes a
// link to /dev/full, where every write fails with ENOSPC as on a full file system.
func fillDisk(t *testing.T, dir, name string) func() {
	t.Helper()
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full to stand in for a full disk")
	}
	tmp := filepath.Join(dir, name+tempSuffix)
	if err := os.Symlink("/dev/full", tmp); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.Remove(tmp); err != nil {
			t.Fatal(err)
		}
	}
}

// A full disk during a Reserve, a probe's footprint and a violation: each fails with an error
// that says so and names the file, the files on disk are the previous commit, and nothing is
// admitted or remembered that was not recorded. Once there is room again, all of it works.
func TestFullDiskKeepsTheLedger(t *testing.T) {
	l, dir := newTest(t, Options{})
	kept, err := l.ReserveBytes(gpuA, 2*size.GiB, Task{JobName: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	stateBefore, violBefore := read(StateFile), read(ViolationsFile)
	wantFull := func(what string, err error, file string) {
		t.Helper()
		if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), filepath.Join(dir, file)) {
			t.Errorf("%s on a full disk: %v; want ENOSPC naming %s", what, err, file)
		}
	}

	free := fillDisk(t, dir, StateFile)
	_, err = l.ReserveBytes(gpuA, 4*size.GiB, Task{JobName: "new"})
	wantFull("ReserveBytes", err, StateFile+tempSuffix)
	err = l.RecordProfile(Profile{Template: "t", PeakBytes: size.GiB, Source: ProfileProbe, MeasuredAt: time.Now()})
	wantFull("RecordProfile", err, StateFile+tempSuffix)
	free()
	freeV := fillDisk(t, dir, ViolationsFile)
	err = l.RecordViolation(Violation{Token: kept.Token, GPU: gpuA, Action: "sigkill", CapBytes: 2 * size.GiB})
	wantFull("RecordViolation", err, ViolationsFile+tempSuffix)
	freeV()

	if read(StateFile) != stateBefore || read(ViolationsFile) != violBefore {
		t.Fatal("a failed commit changed the files on disk")
	}
	if rs := l.Reservations(); len(rs) != 1 || rs[0].Token != kept.Token {
		t.Fatalf("reservations %+v: want only the one recorded before the disk filled", rs)
	}
	if len(l.Profiles()) != 0 || len(l.Violations()) != 0 {
		t.Fatalf("profiles %v, violations %v: remembered without being recorded", l.Profiles(), l.Violations())
	}
	if st := mustState(t, l, gpuA); st.ReservedBytes != 2*size.GiB {
		t.Fatalf("GPU A reserves %s, want the 2GiB recorded", st.ReservedBytes)
	}

	if _, err := l.ReserveBytes(gpuA, 4*size.GiB, Task{JobName: "new"}); err != nil {
		t.Fatalf("ReserveBytes with room again: %v", err)
	}
	if err := l.RecordViolation(Violation{Token: kept.Token, GPU: gpuA, Action: "sigkill", CapBytes: 2 * size.GiB}); err != nil {
		t.Fatalf("RecordViolation with room again: %v", err)
	}
	snap, err := ReadSnapshot(dir)
	if err != nil || len(snap.Reservations) != 2 || len(snap.Violations) != 1 {
		t.Fatalf("after the disk freed: %v, %d reservations, %d violations; want 2 and 1", err, len(snap.Reservations), len(snap.Violations))
	}
}
