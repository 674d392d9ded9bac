package ledger

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

const (
	gpuA = "GPU-aaaaaaaa-1111-2222-3333-000000000001"
	gpuB = "GPU-bbbbbbbb-1111-2222-3333-000000000002"
)

func info(uuid string, index int, total size.Bytes) GPUInfo {
	return GPUInfo{UUID: uuid, Index: index, Model: "NVIDIA H200", TotalBytes: total, Healthy: true}
}

// newClock is the tests' stopped clock, at a fixed date.
func newClock() *testutil.Clock {
	return testutil.NewClock(time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC))
}

// newTest opens a persisted ledger in a fresh directory with two GPUs: A with 12GiB (10 units of
// 1GiB after the 2GiB default headroom) and B with 8GiB (6 units).
func newTest(t testing.TB, opts Options) (*Ledger, string) {
	t.Helper()
	dir := t.TempDir()
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.SyncGPUs([]GPUInfo{info(gpuA, 0, 12*size.GiB), info(gpuB, 1, 8*size.GiB)}); err != nil {
		t.Fatalf("SyncGPUs: %v", err)
	}
	return l, dir
}

func ids(uuid string, ks ...int) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = InstanceID(uuid, k)
	}
	return out
}

func mustReserve(t testing.TB, l *Ledger, task Task, id ...string) Reservation {
	t.Helper()
	r, err := l.ReserveIDs(id, task)
	if err != nil {
		t.Fatalf("ReserveIDs(%v): %v", id, err)
	}
	return r
}

func mustState(t testing.TB, l *Ledger, uuid string) GPUState {
	t.Helper()
	s, err := l.State(uuid)
	if err != nil {
		t.Fatalf("State(%s): %v", uuid, err)
	}
	return s
}

// wantDenied checks err is a DeniedError with reason r whose detail holds every fragment.
func wantDenied(t testing.TB, err error, r Reason, fragments ...string) {
	t.Helper()
	var d *DeniedError
	if !errors.As(err, &d) {
		t.Fatalf("error = %v, want a *DeniedError with reason %s", err, r)
	}
	if !errors.Is(err, ErrDenied) {
		t.Errorf("errors.Is(%v, ErrDenied) = false", err)
	}
	if d.Reason != r {
		t.Errorf("reason = %s, want %s (detail: %s)", d.Reason, r, d.Detail)
	}
	for _, f := range fragments {
		if !strings.Contains(d.Detail, f) {
			t.Errorf("detail %q does not contain %q", d.Detail, f)
		}
	}
}

func withPolicy(t testing.TB, l *Ledger, edit func(*policy.Policy)) {
	t.Helper()
	p := policy.Default()
	edit(&p)
	if err := l.SetPolicy(p); err != nil {
		t.Fatalf("SetPolicy: %v", err)
	}
}

// checkInvariants asserts what must hold for every GPU at every moment: reserved bytes are the
// sum of caps and never exceed the budget unless the budget shrank, tasks never exceed max,
// every reserved ID is advertised and carries its token.
func checkInvariants(t testing.TB, s GPUState, budgetMayHaveShrunk bool) {
	t.Helper()
	var sum size.Bytes
	advertised := map[string]Instance{}
	for _, in := range s.Instances {
		advertised[in.ID] = in
	}
	for _, r := range s.Reservations {
		sum += r.CapBytes
		for _, id := range r.InstanceIDs {
			in, ok := advertised[id]
			if !ok {
				t.Errorf("%s: reserved instance %s is not advertised", s.UUID, id)
			} else if in.Token != r.Token {
				t.Errorf("%s: instance %s carries token %q, want %q", s.UUID, id, RedactToken(in.Token), RedactToken(r.Token))
			}
		}
	}
	if sum != s.ReservedBytes {
		t.Errorf("%s: ReservedBytes = %d, sum of caps = %d", s.UUID, s.ReservedBytes, sum)
	}
	if !budgetMayHaveShrunk && s.ReservedBytes > s.BudgetBytes {
		t.Errorf("%s: over-commit: reserved %s > budget %s", s.UUID, s.ReservedBytes, s.BudgetBytes)
	}
	if len(s.Reservations) > s.MaxTasks {
		t.Errorf("%s: %d tasks > max %d", s.UUID, len(s.Reservations), s.MaxTasks)
	}
}
