package ledger

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// MaxGPUBytes bounds the memory one GPU may have: many times the largest GPU made (288GB in
// 2025), and low enough that its units (at most 65536 at the smallest 64MiB unit) keep a
// States call, which builds one instance per unit, cheap. SyncGPUs refuses a larger GPU and a
// ledger file claiming one loads with that GPU's size forgotten (see Open).
const MaxGPUBytes = 4 * size.TiB

// GPUInfo is what the ledger needs to know about one physical GPU.
type GPUInfo struct {
	UUID         string     `json:"uuid"`
	Index        int        `json:"index"`
	Model        string     `json:"model"`
	TotalBytes   size.Bytes `json:"total_bytes"`
	PCIBusID     string     `json:"pci_bus_id,omitempty"`
	Healthy      bool       `json:"healthy"`
	HealthReason string     `json:"health_reason,omitempty"`
}

// Task identifies the Nomad task (or runner job) that holds a reservation, when known.
type Task struct {
	AllocID  string `json:"alloc_id,omitempty"`
	JobName  string `json:"job_name,omitempty"`
	TaskName string `json:"task_name,omitempty"`
	Template string `json:"template,omitempty"`
	// Namespace is the allocation's Nomad namespace: an allocation is read in its own, and a
	// namespace-scoped read of it anywhere else finds none.
	Namespace string `json:"namespace,omitempty"`
}

// String is a short human label: "job/task (alloc 1a2b3c4d)" or "unknown task".
func (t Task) String() string {
	if t.JobName == "" && t.TaskName == "" && t.AllocID == "" {
		return "unknown task"
	}
	s := t.JobName + "/" + t.TaskName
	if t.AllocID != "" {
		// Cut between characters: the ID comes from the task's environment, and this label
		// goes into the stats Nomad reads, which protobuf refuses to send unless UTF-8.
		id := t.AllocID
		if r := []rune(id); len(r) > 8 {
			id = string(r[:8])
		}
		s += " (alloc " + id + ")"
	}
	return s
}

// ValidText is s with each byte that is not part of UTF-8 replaced by U+FFFD, as encoding/json
// writes it into the ledger file. Names read from a task's environment may be any bytes; made
// valid where they are read, they are the same in memory as after a restart, and Prometheus
// labels and protobuf strings, which must be UTF-8, take them.
func ValidText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s { // a bad byte comes as one utf8.RuneError
		b.WriteRune(r)
	}
	return b.String()
}

// Reservation is memory promised to one task on one GPU.
type Reservation struct {
	// Token is secret and unguessable; the task carries it in GPUFRAC_RESERVATION.
	Token       string     `json:"token"`
	GPU         string     `json:"gpu"` // UUID
	InstanceIDs []string   `json:"instance_ids"`
	CapBytes    size.Bytes `json:"cap_bytes"`
	// LimitBytes, above CapBytes, lets the task borrow memory that no other task's guarantee
	// covers, up to it, where the allocation fence holds it (docs/enforcement.md); 0 = CapBytes.
	LimitBytes size.Bytes `json:"limit_bytes,omitempty"`
	// StagedFor, above CapBytes, marks a job started early (staged, gpufrac run): it holds
	// CapBytes (what its start-up needs) until Grant raises its cap to StagedFor, and the fence
	// holds its allocations past CapBytes until then; 0 = not staged.
	StagedFor size.Bytes `json:"staged_for,omitempty"`
	// Withdrawn marks a staged reservation whose promise was taken back (Withdraw): it keeps
	// its small cap, borrows nothing, and its allocations past that fail.
	Withdrawn bool `json:"withdrawn,omitempty"`
	Task      Task `json:"task"`
	// Source is "nomad" for Reserve calls and "runner" for gpufrac run.
	Source    string    `json:"source"`
	CreatedAt time.Time `json:"created_at"`
	// SeenAt is the last time a live process carried the token.
	SeenAt time.Time `json:"seen_at"`
	// Holder is the process that made the reservation and ends it (gpufrac run); nil for
	// Nomad's, whose tasks hold them. A reservation whose holder is gone is an orphan.
	Holder *Holder `json:"holder,omitempty"`
}

// Holder names one process for good: its PID and its start time in clock ticks since boot, so
// a recycled PID is not taken for the process that died.
type Holder struct {
	PID        int    `json:"pid"`
	StartTicks uint64 `json:"start_ticks"`
}

// Limit is the most the task may hold: its limit, or its cap when it borrows nothing.
func (r Reservation) Limit() size.Bytes { return max(r.CapBytes, r.LimitBytes) }

// Promised is the cap the task is told: its cap, or the one a staged task will be granted.
func (r Reservation) Promised() size.Bytes { return max(r.CapBytes, r.StagedFor) }

func (h Holder) String() string { return fmt.Sprintf("pid %d", h.PID) }

// HeldBy says whether h made the reservation: false for a reservation without a holder, or
// where h is nil.
func (r Reservation) HeldBy(h *Holder) bool { return h != nil && r.Holder != nil && *r.Holder == *h }

// Instance is one memory unit of one GPU as the fingerprint advertises it.
type Instance struct {
	ID      string `json:"id"`
	Healthy bool   `json:"healthy"`
	// HealthDescription says why an instance is unhealthy.
	HealthDescription string `json:"health_description,omitempty"`
	// Token is the reservation holding this instance, or empty.
	Token string `json:"token,omitempty"`
}

// GPUState is one GPU's capacity as the ledger sees it now.
type GPUState struct {
	GPUInfo
	Mode           policy.Mode `json:"mode"`
	HeadroomBytes  size.Bytes  `json:"headroom_bytes"`
	UnmanagedBytes size.Bytes  `json:"unmanaged_bytes"`
	// BudgetBytes = TotalBytes - HeadroomBytes - UnmanagedBytes, never below zero.
	BudgetBytes size.Bytes `json:"budget_bytes"`
	UnitBytes   size.Bytes `json:"unit_bytes"`
	// Units = BudgetBytes / UnitBytes: the instances that are healthy and placeable.
	Units         int        `json:"units"`
	ReservedBytes size.Bytes `json:"reserved_bytes"`
	// BorrowedBytes is what tasks hold past their guarantees (SetBorrowed), and BorrowWaiting
	// whether an allocation waits for memory to come free: admission counts the one as taken
	// and admits nothing while the other holds.
	BorrowedBytes size.Bytes `json:"borrowed_bytes,omitempty"`
	BorrowWaiting bool       `json:"borrow_waiting,omitempty"`
	// BorrowHeld: admissions pause for a borrower that waited here until it is served
	// (policy.HoldRule, SetBorrowHold); like a wait, it admits nothing and withholds every
	// free unit.
	BorrowHeld bool `json:"borrow_held,omitempty"`
	// Lending: guarantees are lent (SetLending): admission counts guarantees alone and pauses
	// for no borrower, since the fence places a new guarantee on what borrowers hold and lends
	// it back to them until its task's use passes its keep. Not while BorrowStuck.
	Lending bool `json:"lending,omitempty"`
	// BorrowStuck: guarantees are lent, but a borrower here waited StuckWait at a stretch and
	// its GPU's borrowers still hold memory: admission follows the rules without lending (the
	// wait, the hold, what borrowers hold counted as taken) until they hold nothing, so the
	// memory that comes free goes to it first.
	BorrowStuck  bool          `json:"borrow_stuck,omitempty"`
	MaxTasks     int           `json:"max_tasks"`
	Reservations []Reservation `json:"reservations"`
	// Instances is every ID to advertise: 0..Units-1, plus reserved IDs beyond the budget
	// (unhealthy, so Nomad keeps them while their task runs but places nothing new there).
	Instances []Instance `json:"instances"`
}

// Violation is one task caught above its cap.
type Violation struct {
	Token     string      `json:"token"`
	GPU       string      `json:"gpu"`
	Task      Task        `json:"task"`
	Mode      policy.Mode `json:"mode"`
	CapBytes  size.Bytes  `json:"cap_bytes"`
	PeakBytes size.Bytes  `json:"peak_bytes"`
	// Action is what the enforcer did: "oom-in-process", "sigint", "sigkill", "reported".
	Action string `json:"action"`
	// CrossedAt is when usage first passed the cap; ContainedAt when no process of the task
	// held GPU memory any more.
	CrossedAt   time.Time `json:"crossed_at"`
	ContainedAt time.Time `json:"contained_at"`
	// HeldBy names what held a task that failed inside itself at its cap (Action
	// "oom-in-process"); empty for a task the watchdog stopped.
	HeldBy HeldBy `json:"held_by,omitempty"`
	// AskedBytes, for a task the fence refused, is the most a refused allocation would have
	// taken it to: its use then plus the bytes asked for. A task refused one large allocation
	// reached far less than it needs (PeakBytes), and a re-run sized from that is refused again.
	// It is the task's own word (its fence file): it sizes the task's own next attempt, never a
	// template's footprint, which other tasks start from.
	AskedBytes size.Bytes `json:"asked_bytes,omitempty"`
	// Reclaimed: the watchdog stopped a borrower because a neighbour's guarantee needed back
	// the memory it had borrowed (borrowing "lend"), not for memory the fence never saw.
	Reclaimed bool   `json:"reclaimed,omitempty"`
	Detail    string `json:"detail,omitempty"`
}

// Reached is what the violation proves its task needs: what it held at its peak, or what a
// refused allocation would have taken it to, whichever is more.
func (v Violation) Reached() size.Bytes { return max(v.PeakBytes, v.AskedBytes) }

// HeldBy is what refused a task's allocations at its cap.
type HeldBy string

// What holds a task at its cap at allocation time.
const (
	HeldByFence    HeldBy = "allocation fence"
	HeldByMPSLimit HeldBy = "MPS limit"
)

// Profile is a template's measured footprint.
type Profile struct {
	Template   string        `json:"template"`
	PeakBytes  size.Bytes    `json:"peak_bytes"`
	Samples    int           `json:"samples"`
	Duration   time.Duration `json:"duration"`
	MeasuredAt time.Time     `json:"measured_at"`
	// Source is "probe", "run" (observed during a packed run) or "violation" (raised after one).
	Source string `json:"source"`
	// SMActivePercent is the share of its run a job of the template kept the SMs active alone
	// (policy.Template.SMActivePercent); nil is unknown.
	SMActivePercent *float64 `json:"sm_active_percent,omitempty"`
}

// Reason is why admission said no.
type Reason string

// Admission refusals.
const (
	ReasonNoFit      Reason = "does-not-fit"
	ReasonTooMany    Reason = "too-many-tasks"
	ReasonUnhealthy  Reason = "gpu-unhealthy"
	ReasonMixedGPUs  Reason = "ids-from-two-gpus"
	ReasonUnknownIDs Reason = "unknown-ids"
	ReasonNoIDs      Reason = "no-ids"
	// ReasonBorrowed: the cap would fit but for what tasks borrowing past their guarantees
	// hold, or one of their allocations waits for memory to come free.
	ReasonBorrowed Reason = "borrowed"
)

// Free is what of the budget neither guarantees nor borrowers hold.
func (g GPUState) Free() size.Bytes {
	return subFloor(subFloor(g.BudgetBytes, g.ReservedBytes), g.BorrowedBytes)
}

// ErrDenied is matched (errors.Is) by every admission refusal.
var ErrDenied = errors.New("admission denied")

// DeniedError is an admission refusal with its reason and a sentence for people.
type DeniedError struct {
	Reason Reason
	Detail string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("admission denied (%s): %s", e.Reason, e.Detail)
}

// Is makes errors.Is(err, ErrDenied) true.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }
