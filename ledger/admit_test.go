package ledger

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

func TestReserveIDsAdmission(t *testing.T) {
	job := Task{JobName: "train", TaskName: "main", AllocID: "1a2b3c4d-5e6f"}
	tests := []struct {
		name   string
		setup  func(t *testing.T, l *Ledger)
		ids    []string
		reason Reason // "" = admitted
		detail []string
	}{
		{name: "admitted", ids: ids(gpuA, 3, 4)},
		{name: "no ids", ids: nil, reason: ReasonNoIDs, detail: []string{"no instance IDs"}},
		{name: "duplicate id", ids: []string{InstanceID(gpuA, 1), InstanceID(gpuA, 1)}, reason: ReasonUnknownIDs,
			detail: []string{InstanceID(gpuA, 1) + " (2 times)"}},
		{name: "malformed id", ids: []string{"garbage", InstanceID(gpuA, 0)}, reason: ReasonUnknownIDs, detail: []string{`"garbage" (malformed)`}},
		{name: "unknown gpu", ids: []string{"GPU-zzzz-7"}, reason: ReasonUnknownIDs, detail: []string{"no known GPU GPU-zzzz"}},
		{name: "outside advertised set", ids: ids(gpuA, 9, 10, 11), reason: ReasonUnknownIDs,
			detail: []string{InstanceID(gpuA, 10), InstanceID(gpuA, 11), "outside the 10 units"}},
		{name: "mixed gpus", ids: []string{InstanceID(gpuA, 0), InstanceID(gpuB, 0)}, reason: ReasonMixedGPUs,
			detail: []string{gpuA, gpuB}},
		{name: "unhealthy by SetHealth", ids: ids(gpuA, 0),
			setup: func(t *testing.T, l *Ledger) {
				if err := l.SetHealth(gpuA, false, "MPS control daemon is not running"); err != nil {
					t.Fatal(err)
				}
			},
			reason: ReasonUnhealthy, detail: []string{gpuA, "MPS control daemon is not running"}},
		{name: "unhealthy by backend", ids: ids(gpuA, 0),
			setup: func(t *testing.T, l *Ledger) {
				g := info(gpuA, 0, 12*size.GiB)
				g.Healthy, g.HealthReason = false, "XID 79: fallen off the bus"
				if err := l.SyncGPUs([]GPUInfo{g, info(gpuB, 1, 8*size.GiB)}); err != nil {
					t.Fatal(err)
				}
			},
			reason: ReasonUnhealthy, detail: []string{"XID 79"}},
		{name: "too many tasks", ids: ids(gpuA, 5),
			setup: func(t *testing.T, l *Ledger) {
				withPolicy(t, l, func(p *policy.Policy) { p.MaxTasksPerGPU = 2 })
				mustReserve(t, l, Task{JobName: "a"}, ids(gpuA, 0)...)
				mustReserve(t, l, Task{JobName: "b"}, ids(gpuA, 1)...)
			},
			reason: ReasonTooMany, detail: []string{gpuA + " already runs 2 tasks (max_tasks_per_gpu = 2)"}},
		{name: "does not fit a shrunken budget", ids: ids(gpuA, 0, 1, 2, 3, 4, 5),
			setup: func(t *testing.T, l *Ledger) {
				mustReserve(t, l, Task{JobName: "old"}, ids(gpuA, 8, 9)...)
				if err := l.SetUnmanaged(gpuA, 3*size.GiB); err != nil {
					t.Fatal(err)
				}
			},
			reason: ReasonNoFit, detail: []string{"cap of 6GiB (6 units)", "2GiB already reserved of a 7GiB budget (5GiB free)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newTest(t, Options{})
			if tc.setup != nil {
				tc.setup(t, l)
			}
			before := l.Reservations()
			r, err := l.ReserveIDs(tc.ids, job)
			if tc.reason != "" {
				wantDenied(t, err, tc.reason, tc.detail...)
				if got := l.Reservations(); len(got) != len(before) {
					t.Errorf("a denied request changed the reservations: %d before, %d after", len(before), len(got))
				}
				return
			}
			if err != nil {
				t.Fatalf("ReserveIDs: %v", err)
			}
			if r.CapBytes != size.Bytes(len(tc.ids))*size.GiB || r.Source != SourceNomad || r.Task != job || r.GPU != gpuA {
				t.Errorf("reservation = %+v", r)
			}
			if len(r.Token) != 32 {
				t.Errorf("token %q is not 32 hex digits", r.Token)
			}
			if !slices.Equal(r.InstanceIDs, tc.ids) {
				t.Errorf("InstanceIDs = %v, want %v", r.InstanceIDs, tc.ids)
			}
			got, ok := l.Reservation(r.Token)
			if !ok || got.Token != r.Token || !got.CreatedAt.Equal(r.CreatedAt) {
				t.Errorf("Reservation(token) = %+v, %v", got, ok)
			}
			checkInvariants(t, mustState(t, l, gpuA), false)
		})
	}
}

func TestReserveBytes(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, l *Ledger)
		gpu     string
		cap     size.Bytes
		reason  Reason
		detail  []string
		wantIDs []string
		wantCap size.Bytes
	}{
		{name: "rounds up to units", gpu: gpuA, cap: size.MustParse("1.5GiB"), wantIDs: ids(gpuA, 0, 1), wantCap: 2 * size.GiB},
		{name: "exact units", gpu: gpuB, cap: 6 * size.GiB, wantIDs: ids(gpuB, 0, 1, 2, 3, 4, 5), wantCap: 6 * size.GiB},
		{name: "lowest free ids", gpu: gpuA, cap: 3 * size.GiB,
			setup: func(t *testing.T, l *Ledger) {
				mustReserve(t, l, Task{}, ids(gpuA, 0, 2)...)
			},
			wantIDs: ids(gpuA, 1, 3, 4), wantCap: 3 * size.GiB},
		{name: "zero bytes", gpu: gpuA, cap: 0, reason: ReasonNoIDs, detail: []string{"0 bytes"}},
		{name: "unknown gpu", gpu: "GPU-nope", cap: size.GiB, reason: ReasonUnknownIDs, detail: []string{`"GPU-nope"`}},
		{name: "too big", gpu: gpuB, cap: 6*size.GiB + 1, reason: ReasonNoFit,
			detail: []string{"cap of 7GiB (7 units)", "0B already reserved of a 6GiB budget"}},
		{name: "does not fit beside others", gpu: gpuA, cap: 5 * size.GiB,
			setup: func(t *testing.T, l *Ledger) {
				mustReserve(t, l, Task{}, ids(gpuA, 0, 1, 2, 3, 4, 5)...)
			},
			reason: ReasonNoFit, detail: []string{"6GiB already reserved of a 10GiB budget (4GiB free)"}},
		{name: "unhealthy", gpu: gpuB, cap: size.GiB,
			setup: func(t *testing.T, l *Ledger) {
				if err := l.SetHealth(gpuB, false, "MPS daemon exited"); err != nil {
					t.Fatal(err)
				}
			},
			reason: ReasonUnhealthy, detail: []string{"MPS daemon exited"}},
		{name: "too many", gpu: gpuB, cap: size.GiB,
			setup: func(t *testing.T, l *Ledger) {
				withPolicy(t, l, func(p *policy.Policy) { p.MaxTasksPerGPU = 1 })
				if _, err := l.ReserveBytes(gpuB, size.GiB, Task{}); err != nil {
					t.Fatal(err)
				}
			},
			reason: ReasonTooMany, detail: []string{"already runs 1 tasks (max_tasks_per_gpu = 1)"}},
		{name: "absurd cap does not overflow", gpu: gpuA, cap: size.Bytes(1<<64 - 1), reason: ReasonNoFit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newTest(t, Options{})
			if tc.setup != nil {
				tc.setup(t, l)
			}
			r, err := l.ReserveBytes(tc.gpu, tc.cap, Task{JobName: "job"})
			if tc.reason != "" {
				wantDenied(t, err, tc.reason, tc.detail...)
				return
			}
			if err != nil {
				t.Fatalf("ReserveBytes: %v", err)
			}
			if !slices.Equal(r.InstanceIDs, tc.wantIDs) || r.CapBytes != tc.wantCap || r.Source != SourceRunner {
				t.Errorf("got ids %v cap %s source %q, want ids %v cap %s source runner", r.InstanceIDs, r.CapBytes, r.Source, tc.wantIDs, tc.wantCap)
			}
			checkInvariants(t, mustState(t, l, tc.gpu), false)
		})
	}
}

// Nomad never calls release: an ID handed out again means its old holder is gone.
func TestReuseEndsHolder(t *testing.T) {
	l, _ := newTest(t, Options{})
	old := mustReserve(t, l, Task{JobName: "old"}, ids(gpuA, 0, 1, 2)...)
	other := mustReserve(t, l, Task{JobName: "other"}, ids(gpuA, 3)...)

	// The new request overlaps one ID of old: old ends entirely, other is untouched.
	nu := mustReserve(t, l, Task{JobName: "new"}, ids(gpuA, 2, 4)...)
	if _, ok := l.Reservation(old.Token); ok {
		t.Errorf("old reservation still present after its instance was reused")
	}
	if _, ok := l.Reservation(other.Token); !ok {
		t.Errorf("unrelated reservation ended")
	}
	s := mustState(t, l, gpuA)
	if s.ReservedBytes != 3*size.GiB {
		t.Errorf("ReservedBytes = %s, want 3GiB (other + new)", s.ReservedBytes)
	}
	for _, in := range s.Instances {
		want := map[string]string{InstanceID(gpuA, 2): nu.Token, InstanceID(gpuA, 4): nu.Token, InstanceID(gpuA, 3): other.Token}[in.ID]
		if in.Token != want {
			t.Errorf("instance %s token = %q, want %q", in.ID, RedactToken(in.Token), RedactToken(want))
		}
	}

	// Reuse ends the holder even when the new request is then denied.
	withPolicy(t, l, func(p *policy.Policy) { p.MaxTasksPerGPU = 1 })
	_, err := l.ReserveIDs(ids(gpuA, 3), Task{JobName: "late"})
	wantDenied(t, err, ReasonTooMany)
	if _, ok := l.Reservation(other.Token); ok {
		t.Errorf("holder of a reused ID survived a denied request")
	}
}

func TestBudgetShrinkKeepsReservedUnits(t *testing.T) {
	l, _ := newTest(t, Options{})
	r := mustReserve(t, l, Task{JobName: "big"}, ids(gpuA, 6, 7, 8, 9)...)
	// Headroom 2GiB -> 6GiB: budget 10GiB -> 6GiB, units 10 -> 6.
	withPolicy(t, l, func(p *policy.Policy) { p.HeadroomBytes = 6 * size.GiB })
	s := mustState(t, l, gpuA)
	if s.Units != 6 || s.BudgetBytes != 6*size.GiB {
		t.Fatalf("units %d budget %s, want 6 and 6GiB", s.Units, s.BudgetBytes)
	}
	checkInvariants(t, s, true)
	byID := map[string]Instance{}
	for _, in := range s.Instances {
		byID[in.ID] = in
	}
	if len(s.Instances) != 10 {
		t.Errorf("%d instances advertised, want 6 in budget + 4 held beyond it", len(s.Instances))
	}
	for k := 6; k < 10; k++ {
		in := byID[InstanceID(gpuA, k)]
		if in.Healthy || in.Token != r.Token || in.HealthDescription != descBeyondUnits {
			t.Errorf("held unit %d beyond budget = %+v, want unhealthy, held, %q", k, in, descBeyondUnits)
		}
	}
	// 6GiB budget - 4GiB reserved leaves 2 placeable units: 0 and 1; 2..5 must not be offered.
	for k := 0; k < 6; k++ {
		in := byID[InstanceID(gpuA, k)]
		if want := k < 2; in.Healthy != want {
			t.Errorf("free unit %d healthy = %v, want %v (%s)", k, in.Healthy, want, in.HealthDescription)
		}
	}
	if _, err := l.ReserveIDs(ids(gpuA, 0, 1, 2), Task{}); err == nil {
		t.Errorf("3 more units admitted into 2 free units")
	}
	// Reusing a held ID beyond the budget ends its holder; the ID then is no longer advertised.
	_, err := l.ReserveIDs(ids(gpuA, 9), Task{})
	wantDenied(t, err, ReasonUnknownIDs, InstanceID(gpuA, 9))
	s = mustState(t, l, gpuA)
	if len(s.Instances) != 6 || s.ReservedBytes != 0 {
		t.Errorf("after reuse: %d instances, %s reserved; want 6 and 0B", len(s.Instances), s.ReservedBytes)
	}
}

func TestVanishedGPU(t *testing.T) {
	l, dir := newTest(t, Options{})
	r := mustReserve(t, l, Task{JobName: "stays"}, ids(gpuB, 0, 1)...)
	if err := l.SyncGPUs([]GPUInfo{info(gpuA, 0, 12*size.GiB)}); err != nil {
		t.Fatal(err)
	}
	// The vanished GPU and its reservation survive a restart too.
	l.Close()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := mustState(t, l, gpuB)
	if s.Healthy || s.HealthReason != descVanished {
		t.Errorf("vanished GPU healthy=%v reason=%q", s.Healthy, s.HealthReason)
	}
	if len(s.Reservations) != 1 || s.Instances[0].Token != r.Token || s.Instances[0].Healthy {
		t.Errorf("vanished GPU lost its reservation or shows it healthy: %+v", s.Instances[:2])
	}
	_, err = l.ReserveIDs(ids(gpuB, 3), Task{})
	wantDenied(t, err, ReasonUnhealthy, descVanished)
	if err := l.Release(r.Token, "done"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.State(gpuB); !errors.Is(err, ErrUnknownGPU) {
		t.Errorf("vanished GPU without reservations still known: err = %v", err)
	}
	if got := len(l.States()); got != 1 {
		t.Errorf("States() has %d GPUs, want 1", got)
	}
}

func TestReleaseAndSeen(t *testing.T) {
	c := newClock()
	l, _ := newTest(t, Options{Now: c.Now})
	r, err := l.ReserveBytes(gpuA, size.GiB, Task{JobName: "j"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release("0123456789abcdef0123456789abcdef", "x"); !errors.Is(err, ErrNoReservation) {
		t.Errorf("Release(unknown) = %v, want ErrNoReservation", err)
	}
	c.Advance(time.Second)
	if err := l.Seen(r.Token, Task{JobName: "other", TaskName: "t", AllocID: "alloc", Namespace: "ml"}); err != nil {
		t.Fatal(err)
	}
	got, _ := l.Reservation(r.Token)
	if want := (Task{JobName: "j", TaskName: "t", AllocID: "alloc", Namespace: "ml"}); got.Task != want {
		t.Errorf("Seen filled Task = %+v, want %+v (set fields kept, empty ones filled)", got.Task, want)
	}
	if !got.SeenAt.Equal(c.Now()) {
		t.Errorf("SeenAt = %v, want %v", got.SeenAt, c.Now())
	}
	if err := l.Release(r.Token, "job exited"); err != nil {
		t.Fatal(err)
	}
	if err := l.Seen(r.Token, Task{}); !errors.Is(err, ErrNoReservation) {
		t.Errorf("Seen(released) = %v, want ErrNoReservation", err)
	}
}

func TestTokens(t *testing.T) {
	l, _ := newTest(t, Options{})
	seen := map[string]bool{}
	for range 200 {
		r, err := l.ReserveIDs(ids(gpuA, 0), Task{}) // each reuse ends the previous holder
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Token) != 32 || strings.Trim(r.Token, "0123456789abcdef") != "" {
			t.Fatalf("token %q is not 32 lower-case hex digits", r.Token)
		}
		if seen[r.Token] {
			t.Fatalf("token repeated after %d reservations", len(seen))
		}
		seen[r.Token] = true
	}

	for _, tc := range []struct {
		name string
		gen  func() (string, error)
		want string
	}{
		{"generator fails", func() (string, error) { return "", errors.New("entropy exhausted") }, "entropy exhausted"},
		{"too short", func() (string, error) { return "abc", nil }, "3-character token"},
		{"repeats", func() (string, error) { return "0123456789abcdef0123456789abcdef", nil }, "repeated token 01234567"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := newTest(t, Options{NewToken: tc.gen})
			if tc.name == "repeats" {
				mustReserve(t, l, Task{}, ids(gpuA, 0)...)
			}
			before := l.Reservations()
			_, err := l.ReserveBytes(gpuA, size.GiB, Task{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
			if after := l.Reservations(); len(after) != len(before) {
				t.Errorf("a failed reservation left %d reservations, want %d", len(after), len(before))
			}
		})
	}
}

// A unit size change moves the budget's unit boundaries; reserved IDs keep their bytes and stay
// advertised until their tasks end.
func TestUnitSizeChange(t *testing.T) {
	l, _ := newTest(t, Options{})
	r := mustReserve(t, l, Task{JobName: "old-units"}, ids(gpuA, 8, 9)...)
	withPolicy(t, l, func(p *policy.Policy) { p.UnitBytes = 2 * size.GiB }) // 10GiB budget = 5 units
	s := mustState(t, l, gpuA)
	checkInvariants(t, s, false)
	if s.Units != 5 || s.ReservedBytes != 2*size.GiB || len(s.Instances) != 7 {
		t.Fatalf("units %d reserved %s instances %d, want 5, 2GiB, 7", s.Units, s.ReservedBytes, len(s.Instances))
	}
	healthy := 0
	for _, in := range s.Instances {
		if in.Healthy {
			healthy++
		}
	}
	// 8GiB left in the budget = 4 placeable units of 2GiB.
	if healthy != 4 {
		t.Errorf("%d healthy instances, want 4", healthy)
	}
	got, err := l.ReserveBytes(gpuA, 8*size.GiB, Task{})
	if err != nil {
		t.Fatalf("the remaining 8GiB did not admit an 8GiB cap: %v", err)
	}
	if !slices.Equal(got.InstanceIDs, ids(gpuA, 0, 1, 2, 3)) {
		t.Errorf("picked %v", got.InstanceIDs)
	}
	if _, ok := l.Reservation(r.Token); !ok {
		t.Errorf("old reservation dropped by the unit change")
	}
	checkInvariants(t, mustState(t, l, gpuA), false)
}

// The watchdog calls Seen every sample; only a sighting that matters reaches the disk.
func TestSeenCommitsSparingly(t *testing.T) {
	c := newClock()
	l, dir := newTest(t, Options{Now: c.Now, Grace: time.Minute})
	r := mustReserve(t, l, Task{}, ids(gpuA, 0)...)
	stored := func() (uint64, time.Time) {
		t.Helper()
		snap, err := ReadSnapshot(dir)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Generation, snap.Reservations[0].SeenAt
	}
	gen0, _ := stored()
	first := c.Now()
	if err := l.Seen(r.Token, Task{}); err != nil { // first sighting: committed
		t.Fatal(err)
	}
	for range 15 { // 15s of samples, within Grace/4: memory only
		c.Advance(time.Second)
		if err := l.Seen(r.Token, Task{}); err != nil {
			t.Fatal(err)
		}
	}
	gen, seen := stored()
	if gen != gen0+1 || !seen.Equal(first) {
		t.Errorf("after 16 sightings in 15s: generation %d (want %d), stored SeenAt %v (want %v)", gen, gen0+1, seen, first)
	}
	if got, _ := l.Reservation(r.Token); !got.SeenAt.Equal(c.Now()) {
		t.Errorf("in-memory SeenAt = %v, want the latest sighting %v", got.SeenAt, c.Now())
	}
	c.Advance(time.Second) // 16s since the stored sighting: more than Grace/4
	if err := l.Seen(r.Token, Task{}); err != nil {
		t.Fatal(err)
	}
	if gen, seen = stored(); gen != gen0+2 || !seen.Equal(c.Now()) {
		t.Errorf("a sighting lagging Grace/4 was not committed: generation %d, SeenAt %v", gen, seen)
	}
	if err := l.Seen(r.Token, Task{JobName: "named"}); err != nil { // task learned: committed
		t.Fatal(err)
	}
	if gen, _ = stored(); gen != gen0+3 {
		t.Errorf("a sighting that filled the task was not committed: generation %d, want %d", gen, gen0+3)
	}
}

// TestMaxTasksMarksFreeUnitsUnhealthy: a GPU at max_tasks_per_gpu advertises no placeable unit,
// with the reason, so the scheduler stops offering units that admission would refuse.
func TestMaxTasksMarksFreeUnitsUnhealthy(t *testing.T) {
	l, _ := newTest(t, Options{})
	withPolicy(t, l, func(p *policy.Policy) { p.MaxTasksPerGPU = 2 })
	first := mustReserve(t, l, Task{JobName: "a"}, ids(gpuA, 0)...)
	mustReserve(t, l, Task{JobName: "b"}, ids(gpuA, 1)...)
	healthyFree := func(uuid string) (n int, desc string) {
		for _, in := range mustState(t, l, uuid).Instances {
			if in.Token == "" && in.Healthy {
				n++
			}
			if in.Token == "" && !in.Healthy {
				desc = in.HealthDescription
			}
		}
		return n, desc
	}
	if n, desc := healthyFree(gpuA); n != 0 || !strings.Contains(desc, "max_tasks_per_gpu = 2") {
		t.Errorf("GPU at its task limit: %d healthy free units, description %q; want 0 and the limit named", n, desc)
	}
	for _, in := range mustState(t, l, gpuA).Instances {
		if in.Token != "" && !in.Healthy {
			t.Errorf("held unit %s turned unhealthy: %q", in.ID, in.HealthDescription)
		}
	}
	if n, _ := healthyFree(gpuB); n != 6 {
		t.Errorf("the other GPU has %d healthy free units, want all 6", n)
	}
	if err := l.Release(first.Token, "test"); err != nil {
		t.Fatal(err)
	}
	if n, _ := healthyFree(gpuA); n != 9 {
		t.Errorf("after one task ended: %d healthy free units, want 9", n)
	}
}

// A probe's protective cap is lowered in place: the token stays, the freed units are admissible
// at once, and the lower cap survives a reopen.
func TestShrink(t *testing.T) {
	l, dir := newTest(t, Options{})
	probe, err := l.ReserveBytes(gpuA, 8*size.GiB, Task{JobName: "probe"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReserveBytes(gpuA, 3*size.GiB, Task{JobName: "late"}); err == nil {
		t.Fatal("3GiB fitted beside an 8GiB reservation on a 10GiB budget")
	}
	got, err := l.Shrink(probe.Token, size.MustParse("2.5GiB"))
	if err != nil {
		t.Fatalf("Shrink: %v", err)
	}
	if got.Token != probe.Token || got.CapBytes != 3*size.GiB || !slices.Equal(got.InstanceIDs, ids(gpuA, 0, 1, 2)) {
		t.Fatalf("after Shrink: token %s cap %s ids %v, want the same token, 3GiB, units 0-2", got.Token, got.CapBytes, got.InstanceIDs)
	}
	st := mustState(t, l, gpuA)
	if st.ReservedBytes != 3*size.GiB {
		t.Fatalf("reserved %s after Shrink, want 3GiB", st.ReservedBytes)
	}
	checkInvariants(t, st, false)
	late, err := l.ReserveBytes(gpuA, 7*size.GiB, Task{JobName: "late"})
	if err != nil {
		t.Fatalf("the freed units are not admissible: %v", err)
	}
	if !slices.Equal(late.InstanceIDs, ids(gpuA, 3, 4, 5, 6, 7, 8, 9)) {
		t.Fatalf("late got %v", late.InstanceIDs)
	}
	l.Close()
	back, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if r, ok := back.Reservation(probe.Token); !ok || r.CapBytes != 3*size.GiB {
		t.Fatalf("after reopen: %+v %v, want the 3GiB cap", r, ok)
	}
}

func TestShrinkRefuses(t *testing.T) {
	l, _ := newTest(t, Options{})
	runner, err := l.ReserveBytes(gpuA, 4*size.GiB, Task{JobName: "j"})
	if err != nil {
		t.Fatal(err)
	}
	nomad := mustReserve(t, l, Task{JobName: "n"}, ids(gpuA, 8, 9)...)
	tests := []struct {
		name  string
		token string
		cap   size.Bytes
		is    error
		frag  string
	}{
		{"unknown token", "no-such-token-at-all", size.GiB, ErrNoReservation, "no-such"},
		{"grow", runner.Token, 5 * size.GiB, ErrBadInput, "more than reservation"},
		{"zero", runner.Token, 0, ErrBadInput, "a cap of 0B"},
		{"overflow", runner.Token, size.Bytes(1<<64 - 1), ErrBadInput, "does not grow in place"},
		{"nomad reservation", nomad.Token, size.GiB, ErrBadInput, "comes from nomad"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Shrink(tc.token, tc.cap)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.frag) {
				t.Fatalf("Shrink: %v, want %v naming %q", err, tc.is, tc.frag)
			}
		})
	}
	// Nothing was lost on the way.
	if r, _ := l.Reservation(runner.Token); r.CapBytes != 4*size.GiB || len(r.InstanceIDs) != 4 {
		t.Fatalf("a refused Shrink changed the reservation: %+v", r)
	}
	// The same cap is a no-op.
	if r, err := l.Shrink(runner.Token, 4*size.GiB); err != nil || r.CapBytes != 4*size.GiB {
		t.Fatalf("Shrink to the same cap: %+v %v", r, err)
	}
}
