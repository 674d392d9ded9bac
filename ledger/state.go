package ledger

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// Health descriptions the ledger writes on instances.
const (
	descVanished    = "GPU no longer detected"
	descBeyondUnits = "budget shrank below this unit; held by a running task until it ends"
	descNoBudget    = "no budget left for this unit: reservations made before the budget shrank still hold it"
	descMaxTasks    = "GPU already runs %d tasks (max_tasks_per_gpu = %d): no new task is admitted until one ends"
	descBorrowed    = "held by tasks borrowing past their guarantees (%s on this GPU): free again when they give it back"
	descBorrowWait  = "a task's allocation waits for memory to come free on this GPU: no new task is placed until it is served"
	descBorrowHold  = "a task that waited for memory on this GPU is being served first: no new task is placed until it is (at most the hold's bound)"
)

// gpuRec is what the ledger stores per GPU: the backend's facts plus the ledger's own settings.
type gpuRec struct {
	Info GPUInfo `json:"info"`
	// Detected is false for a GPU that the last SyncGPUs did not list but that still carries
	// reservations; it is kept so the tasks' instance IDs stay advertised.
	Detected       bool        `json:"detected"`
	Mode           policy.Mode `json:"mode,omitempty"`
	UnmanagedBytes size.Bytes  `json:"unmanaged_bytes,omitempty"`
	// Unhealthy and UnhealthyReason come from SetHealth (e.g. the MPS daemon is down); the zero
	// value means healthy so that old files and new GPUs need no migration.
	Unhealthy       bool   `json:"unhealthy,omitempty"`
	UnhealthyReason string `json:"unhealthy_reason,omitempty"`
	// Borrowed and BorrowWaiting come from SetBorrowed. They are not written to disk: they
	// change with every allocation of a borrower, and the fence's tables are their record, read
	// again by the enforcer's next pass after a restart.
	Borrowed      size.Bytes `json:"-"`
	BorrowWaiting bool       `json:"-"`
	// hold is the borrower hold carried from one look to the next (hold.go), not written to
	// disk either: a restart begins with none, as the fence's next pass reports a wait again.
	hold policy.BorrowHold
	// waitFrom is when the wait BorrowWaiting reports began (zero: none), and stuck whether one
	// lasted StuckWait since the GPU's borrowers last held nothing (hold.go); not on disk.
	waitFrom time.Time
	stuck    bool
}

// state is everything the ledger commits, in one value so that a failed write can be rolled
// back by restoring the previous value.
type state struct {
	gen    uint64
	policy policy.Policy
	gpus   map[string]gpuRec
	res    map[string]Reservation // by token
	byID   map[string]string      // instance ID -> token
	// viol is copy-on-write: it is replaced, never changed in place, so clone can share it.
	viol []Violation
	prof map[string]Profile
	// damage is what readState could not read of the violations file and left out (not
	// persisted).
	damage string
	// gpuDamage is what readState found unsound in the state file's GPUs and repaired in
	// memory, one sentence each naming the file, the GPU and the value (not persisted).
	gpuDamage []string
	// lend: guarantees are lent (SetLending; not persisted).
	lend bool
	// grace is the writer's Options.Grace, written so that readers (gpufrac status) count a
	// reservation's expiry as the writer does; 0 in a file written before it was.
	grace time.Duration
}

// damageReport is every damage readState found, for Snapshot.Damage.
func (s *state) damageReport() []string {
	out := slices.Clone(s.gpuDamage)
	if s.damage != "" {
		out = append(out, s.damage)
	}
	return out
}

func newState() *state {
	return &state{
		policy: policy.Default(),
		gpus:   map[string]gpuRec{},
		res:    map[string]Reservation{},
		byID:   map[string]string{},
		prof:   map[string]Profile{},
	}
}

func (s *state) clone() *state {
	c := *s
	c.gpus = maps.Clone(s.gpus)
	c.res = maps.Clone(s.res)
	c.byID = maps.Clone(s.byID)
	c.prof = maps.Clone(s.prof)
	return &c
}

// gpuOrder is the UUIDs in index order (UUID breaks ties, e.g. a vanished GPU and its successor).
func (s *state) gpuOrder() []string {
	ids := slices.Collect(maps.Keys(s.gpus))
	slices.SortFunc(ids, func(a, b string) int {
		ia, ib := s.gpus[a].Info.Index, s.gpus[b].Info.Index
		if ia != ib {
			return ia - ib
		}
		return strings.Compare(a, b)
	})
	return ids
}

// reservationsOn returns the GPU's reservations, oldest first.
func (s *state) reservationsOn(uuid string) []Reservation {
	var out []Reservation
	for _, r := range s.res {
		if r.GPU == uuid {
			out = append(out, r)
		}
	}
	sortReservations(out)
	return out
}

func sortReservations(rs []Reservation) {
	slices.SortFunc(rs, func(a, b Reservation) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Token, b.Token)
	})
}

// allReservations returns every reservation, oldest first.
func (s *state) allReservations() []Reservation {
	out := slices.Collect(maps.Values(s.res))
	sortReservations(out)
	return out
}

// gpuState computes one GPU's capacity and instances. It is a pure function of the stored state,
// so the writer and lock-free readers (ReadSnapshot) always agree.
func (s *state) gpuState(uuid string) GPUState {
	st := s.capacity(uuid)
	s.fillInstances(&st)
	return st
}

// capacity is gpuState without Instances: all that admission by instance IDs needs.
func (s *state) capacity(uuid string) GPUState {
	g := s.gpus[uuid]
	p := s.policy
	st := GPUState{GPUInfo: g.Info}
	st.Mode = g.Mode
	if st.Mode == "" {
		st.Mode = p.Mode
	}
	st.Healthy, st.HealthReason = health(g)
	st.HeadroomBytes = p.HeadroomBytes
	st.UnmanagedBytes = g.UnmanagedBytes
	st.BudgetBytes = subFloor(subFloor(g.Info.TotalBytes, p.HeadroomBytes), g.UnmanagedBytes)
	st.UnitBytes = p.UnitBytes
	if p.UnitBytes > 0 {
		st.Units = int(min(st.BudgetBytes/p.UnitBytes, maxUnitNumber))
	}
	st.MaxTasks = p.MaxTasksPerGPU
	st.BorrowedBytes, st.BorrowWaiting, st.BorrowHeld = g.Borrowed, g.BorrowWaiting, g.hold.Held()
	st.BorrowStuck = s.lend && g.stuck
	st.Lending = s.lend && !g.stuck
	st.Reservations = s.reservationsOn(uuid)
	for _, r := range st.Reservations {
		st.ReservedBytes += r.CapBytes
	}
	return st
}

func (s *state) fillInstances(st *GPUState) {
	uuid, unit := st.UUID, st.UnitBytes
	held := map[int]string{}
	for _, r := range st.Reservations {
		for _, id := range r.InstanceIDs {
			if _, k, err := ParseInstanceID(id); err == nil {
				held[k] = r.Token
			}
		}
	}
	// Free units that fit the remaining budget. Normally this equals the free IDs below Units;
	// it is smaller only when the budget shrank under existing reservations, and then the excess
	// free IDs are advertised unhealthy so Nomad does not place work that admission would refuse.
	free := 0
	if unit > 0 && st.BudgetBytes > st.ReservedBytes {
		free = int(min((st.BudgetBytes-st.ReservedBytes)/unit, maxUnitNumber))
	}
	// What borrowers hold is withheld from the free units, a unit for each unit or part of one, and
	// every free unit while an allocation waits: the memory it waits for must come free, and
	// the fence would refuse a guarantee placed over either.
	lent, lentWhy := 0, ""
	switch {
	case st.Lending:
	case st.BorrowWaiting:
		lent, lentWhy = free, descBorrowWait
	case st.BorrowHeld:
		lent, lentWhy = free, descBorrowHold
	case st.BorrowedBytes > 0 && unit > 0:
		lent = int(min((st.BorrowedBytes+unit-1)/unit, size.Bytes(free)))
		lentWhy = fmt.Sprintf(descBorrowed, st.BorrowedBytes)
	}
	free -= lent
	// A GPU at max_tasks_per_gpu admits nothing more, so its free units must not look placeable:
	// Nomad would place there and the task would fail at Reserve.
	full := st.MaxTasks > 0 && len(st.Reservations) >= st.MaxTasks
	st.Instances = make([]Instance, 0, st.Units+len(held))
	for k := 0; k < st.Units; k++ {
		in := Instance{ID: InstanceID(uuid, k), Token: held[k], Healthy: true}
		switch {
		case !st.Healthy:
			in.Healthy, in.HealthDescription = false, st.HealthReason
		case in.Token != "":
		case full:
			in.Healthy, in.HealthDescription = false, fmt.Sprintf(descMaxTasks, len(st.Reservations), st.MaxTasks)
		case free > 0:
			free--
		case lent > 0:
			lent--
			in.Healthy, in.HealthDescription = false, lentWhy
		default:
			in.Healthy, in.HealthDescription = false, descNoBudget
		}
		st.Instances = append(st.Instances, in)
	}
	var beyond []int
	for k := range held {
		if k >= st.Units {
			beyond = append(beyond, k)
		}
	}
	slices.Sort(beyond)
	for _, k := range beyond {
		desc := descBeyondUnits
		if !st.Healthy {
			desc = st.HealthReason + "; " + descBeyondUnits
		}
		st.Instances = append(st.Instances, Instance{ID: InstanceID(uuid, k), Token: held[k], HealthDescription: desc})
	}
}

// cloneState deep-copies a GPUState so that callers cannot change the ledger's cached copy.
func cloneState(st GPUState) GPUState {
	st.Instances = slices.Clone(st.Instances)
	st.Reservations = slices.Clone(st.Reservations)
	for i := range st.Reservations {
		st.Reservations[i].InstanceIDs = slices.Clone(st.Reservations[i].InstanceIDs)
	}
	return st
}

// health combines the backend's view, detection and SetHealth into one verdict and sentence.
func health(g gpuRec) (bool, string) {
	var why []string
	if !g.Detected {
		why = append(why, descVanished)
	}
	if !g.Info.Healthy {
		r := g.Info.HealthReason
		if r == "" {
			r = "reported unhealthy by the GPU backend"
		}
		why = append(why, r)
	}
	if g.Unhealthy {
		r := g.UnhealthyReason
		if r == "" {
			r = "marked unhealthy"
		}
		why = append(why, r)
	}
	return len(why) == 0, strings.Join(why, "; ")
}

func subFloor(a, b size.Bytes) size.Bytes {
	if b >= a {
		return 0
	}
	return a - b
}

// utc drops the monotonic reading and the location so that a time read back from the file is
// identical to the one the ledger handed out.
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.Round(0).UTC()
}
