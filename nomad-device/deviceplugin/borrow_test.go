package deviceplugin

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/enforcer/fence"
	"github.com/gpufrac/gpufrac/ledger"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/size"
)

// reservation is the ledger's record of the task Reserve answered with res.
func reservation(t *testing.T, s *Server, res *devicepb.ContainerReservation) ledger.Reservation {
	t.Helper()
	tok := res.GetEnvs()[enforcer.EnvReservation]
	_, l, _ := s.runtime().parts()
	for _, st := range l.States() {
		for _, r := range st.Reservations {
			if r.Token == tok {
				return r
			}
		}
	}
	t.Fatalf("no reservation %s… in the ledger", ledger.RedactToken(tok))
	return ledger.Reservation{}
}

// unhealthyFor counts a group's units withheld with a description containing why.
func unhealthyFor(g *devicepb.DeviceGroup, why string) int {
	n := 0
	for _, d := range g.GetDevices() {
		if !d.GetHealthy() && strings.Contains(d.GetHealthDescription(), why) {
			n++
		}
	}
	return n
}

// With borrow on, a task's units are its guarantee and the GPU's budget its limit; the units
// borrowers hold are withheld from the fingerprint while they hold them, and a Reserve that
// would place a guarantee over borrowed memory is refused as exhausted, not admitted uncapped.
func TestBorrowingTasks(t *testing.T) {
	s, dir := newSim(t, "H100=80GiB", `borrow = "wait"`)
	m, stream := firstFingerprint(t, s)
	g := m.DeviceGroup[0]
	uuid := g.Attributes[AttrUUID].GetStringVal()
	res := mustReserve(t, s, ids(g, 4))
	r := reservation(t, s, res)
	if r.CapBytes != 4*size.GiB || r.LimitBytes != 78*size.GiB {
		t.Fatalf("reservation cap %s limit %s: want a 4GiB guarantee and the 78GiB budget as limit", r.CapBytes, r.LimitBytes)
	}
	// The task's process borrows 6 GiB past its guarantee, as the preload library would charge.
	c, err := fence.Attach(filepath.Join(dir, "fence"), uuid, r.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Detach()
	if got := c.Charge(10 * size.GiB); got != fence.Charged {
		t.Fatalf("borrowing 6GiB past a 4GiB guarantee on an empty GPU: %v", got)
	}
	deadline := time.After(20 * time.Second)
	for unhealthyFor(g, "borrowing past their guarantees") != 6 {
		select {
		case next := <-stream:
			g = next.DeviceGroup[0]
		case <-deadline:
			t.Fatalf("no fingerprint withholding the 6 borrowed units; last: %v", g.GetDevices()[70:])
		}
	}
	wantDocumentedHealth(t, unhealthyDescs(g)...)
	// Nomad placed on units it saw free before the loan: 69 more guarantees would cover borrowed memory.
	var stale []string
	for _, d := range m.DeviceGroup[0].GetDevices()[4:73] {
		stale = append(stale, d.GetID())
	}
	_, err = s.Reserve(context.Background(), stale)
	if !errors.Is(err, ErrBorrowed) || grpcCode(err) != codes.ResourceExhausted {
		t.Fatalf("a Reserve over borrowed memory: %v (code %v), want ErrBorrowed and ResourceExhausted", err, grpcCode(err))
	}
	_, l, _ := s.runtime().parts()
	if st, _ := l.State(uuid); len(st.Reservations) != 1 {
		t.Fatalf("the refused reservation stayed in the ledger: %d reservations", len(st.Reservations))
	}
	// What is really free is still placeable.
	if _, err := s.Reserve(context.Background(), stale[:60]); err != nil {
		t.Fatalf("60 units beside the 4 reserved and 6 borrowed: %v", err)
	}
	// The borrower gives its loan back: the units come back.
	c.Uncharge(6 * size.GiB)
	deadline = time.After(20 * time.Second)
	for unhealthyFor(g, "borrowing past their guarantees") != 0 {
		select {
		case next := <-stream:
			g = next.DeviceGroup[0]
		case <-deadline:
			st, _ := l.State(uuid)
			cp, used, ok := c.View()
			t.Fatalf("the withheld units did not come back after the borrower gave its memory back; ledger: borrowed %s waiting %v; client view %s %s %v; last: %v",
				st.BorrowedBytes, st.BorrowWaiting, cp, used, ok, g.GetDevices()[70:])
		}
	}
}

// Borrowing is the node's default, auto: a task on an isolated GPU under the fence may borrow up
// to the budget (wait), and a cap stays the most a task may use where the fence is off or
// borrowing is turned off.
func TestBorrowingDefault(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra string
		limit size.Bytes
	}{
		{"default", "", 78 * size.GiB},
		{"asked off", `borrow = "off"`, 0},
		{"fence off", "fence = false", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newSim(t, "H100=80GiB", tc.extra)
			m, _ := firstFingerprint(t, s)
			res := mustReserve(t, s, ids(m.DeviceGroup[0], 4))
			if r := reservation(t, s, res); r.LimitBytes != tc.limit {
				t.Fatalf("reservation limit %s (cap %s): want %s", r.LimitBytes, r.CapBytes, tc.limit)
			}
		})
	}
}
