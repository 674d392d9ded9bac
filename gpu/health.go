package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// XIDClass says what an XID means for the GPU that raised it.
type XIDClass int

const (
	// XIDCritical: the GPU itself is in doubt (memory, bus, firmware, links); it takes no new
	// work until it has been reset.
	XIDCritical XIDClass = iota + 1
	// XIDApplication: one context's own fault (a bad address, a kernel that hung); the driver
	// tears that context down and the GPU serves everyone else as before.
	XIDApplication
)

// applicationXIDs are those a tenant can raise by faulting its own context. They never mark a
// GPU: gpufrac shares GPUs, and a tenant that could take one out of service by crashing itself
// would harm every neighbour. The codes are NVIDIA's (its XID catalogue); NVIDIA's own device
// plugins leave the same six alone.
var applicationXIDs = map[uint64]string{
	13:  "graphics engine exception",
	31:  "GPU memory page fault",
	43:  "GPU stopped processing",
	45:  "preemptive cleanup, due to previous errors",
	68:  "video processor exception",
	109: "context switch timeout",
}

// criticalXIDNames name the critical XIDs an operator meets most, so that a health reason says
// what happened without a look-up. Any XID outside applicationXIDs is critical, named or not:
// the driver adds codes faster than a list here would follow, and an unknown fault on a shared
// GPU is safer drained than trusted.
var criticalXIDNames = map[uint64]string{
	48:  "double-bit ECC error",
	61:  "internal micro-controller breakpoint or warning",
	62:  "internal micro-controller halt",
	63:  "ECC page retirement or row remapping recorded",
	64:  "ECC page retirement or row remapping failed",
	74:  "NVLink error",
	79:  "GPU has fallen off the bus",
	92:  "high single-bit ECC error rate",
	94:  "contained ECC error",
	95:  "uncontained ECC error",
	119: "GSP RPC timeout",
	120: "GSP error",
	140: "unrecovered ECC error",
}

// ClassifyXID is the one place that decides whether an XID takes a GPU out of service; both
// backends use it.
func ClassifyXID(code uint64) XIDClass {
	if _, ok := applicationXIDs[code]; ok {
		return XIDApplication
	}
	return XIDCritical
}

// XIDName is a short description of a known XID, "" for one gpufrac has no name for.
func XIDName(code uint64) string {
	if n, ok := applicationXIDs[code]; ok {
		return n
	}
	return criticalXIDNames[code]
}

// ApplicationXIDs lists the XIDs that never mark a GPU, in order (for docs and errors).
func ApplicationXIDs() []uint64 {
	out := make([]uint64, 0, len(applicationXIDs))
	for c := range applicationXIDs {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// CheckIgnoredXID says why code cannot be in an operator's list of ignored XIDs, or nil. An
// application XID is accepted, and changes nothing (it never marks a GPU): operators copy the
// skip lists of NVIDIA's own tools, which name those XIDs, and a list that is right in effect
// is not bad input.
func CheckIgnoredXID(code uint64) error {
	if code == 0 {
		return errors.New("XID 0 does not exist (XIDs start at 1)")
	}
	return nil
}

// ParseXIDs reads a comma-separated list of XIDs to ignore ("63,92"), each checked by
// CheckIgnoredXID; empty means none. Errors name the bad entry.
func ParseXIDs(s string) ([]uint64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []uint64
	for _, raw := range strings.Split(s, ",") {
		code, err := strconv.ParseUint(strings.TrimSpace(raw), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("XID %q: not a whole number such as 63", raw)
		}
		if err := CheckIgnoredXID(code); err != nil {
			return nil, err
		}
		if !slices.Contains(out, code) {
			out = append(out, code)
		}
	}
	slices.Sort(out)
	return out, nil
}

// HealthOptions tune how a backend turns GPU events into health.
type HealthOptions struct {
	// IgnoredXIDs are critical XIDs the operator chose to leave a GPU healthy after (a fleet
	// whose GPUs raise a benign one often); each must pass CheckIgnoredXID.
	IgnoredXIDs []uint64
}

// HealthEventKind is what a GPU reported.
type HealthEventKind int

const (
	// EventXID is an XID error; HealthEvent.XID holds its code.
	EventXID HealthEventKind = iota + 1
	// EventDoubleBitECC is an uncorrectable (double-bit) ECC error in the GPU's memory.
	EventDoubleBitECC
)

// HealthEvent is one event a GPU raised that may take it out of service.
type HealthEvent struct {
	Kind HealthEventKind
	XID  uint64
	At   time.Time
}

// stickyNote ends every event mark: no event says a GPU is well again, so a mark lasts as long
// as the process that saw the event. Resetting the GPU (or reloading the driver) and then
// restarting gpufrac is what clears it.
const stickyNote = "kept until this gpufrac process restarts"

// markOf turns an event into the reason a GPU is unhealthy, or "" when the event leaves the GPU
// in service (an application's XID, one the operator ignores). Both backends mark through it.
func markOf(ev HealthEvent, ignored map[uint64]bool) string {
	at := ev.At.UTC().Format(time.RFC3339)
	switch ev.Kind {
	case EventXID:
		if ClassifyXID(ev.XID) != XIDCritical || ignored[ev.XID] {
			return ""
		}
		what := XIDName(ev.XID)
		if what == "" {
			what = "critical (not an application's own fault)"
		}
		return fmt.Sprintf("XID %d at %s: %s; %s", ev.XID, at, what, stickyNote)
	case EventDoubleBitECC:
		return fmt.Sprintf("double-bit ECC error at %s; %s", at, stickyNote)
	}
	return ""
}

func xidSet(codes []uint64) map[uint64]bool {
	s := make(map[uint64]bool, len(codes))
	for _, c := range codes {
		s[c] = true
	}
	return s
}

// healthMarks are the sticky per-GPU marks one process has seen. The first mark of a GPU stays:
// it is the fault that took the GPU out, and the ones after it are often its consequences.
type healthMarks struct {
	mu     sync.Mutex
	byUUID map[string]eventMark
}

// eventMark is why an event took a GPU out of service, and when the event came.
type eventMark struct {
	reason string
	at     time.Time
}

// set records m for uuid unless the GPU already has a mark; true when it was recorded.
func (m *healthMarks) set(uuid string, mark eventMark) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byUUID[uuid]; ok {
		return false
	}
	if m.byUUID == nil {
		m.byUUID = map[string]eventMark{}
	}
	m.byUUID[uuid] = mark
	return true
}

func (m *healthMarks) get(uuid string) eventMark {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byUUID[uuid]
}

// apply takes d out of service for mark, if it is one.
func (mark eventMark) apply(d *Device) {
	if mark.reason != "" {
		d.Healthy, d.HealthReason, d.EventAt = false, mark.reason, mark.at
	}
}

// MemoryErrors is what a GPU's memory says of itself when asked (no event carries it).
type MemoryErrors struct {
	// Uncorrectable counts uncorrectable ECC errors: as the driver reports them, its volatile
	// counter since it loaded; as a backend judges them, those since it first read the counter
	// (eccBaseline).
	Uncorrectable uint64
	// RemapPending: a bad row is waiting for a GPU reset to be remapped (Ampere and newer).
	RemapPending bool
	// RemapFailed: a row could not be remapped (no spare rows left).
	RemapFailed bool
}

// reason is why memory in this state takes its GPU out of service, or "". Unlike an event mark
// it clears by itself: the counters are the driver's, and a reset that fixes the GPU zeroes them.
func (m MemoryErrors) reason() string {
	switch {
	case m.RemapFailed:
		return "row remapping failed: the GPU has a bad memory row it cannot replace; reset it, and have it serviced if this recurs"
	case m.RemapPending:
		return "row remapping pending: reset the GPU to apply it"
	case m.Uncorrectable > 0:
		return fmt.Sprintf("uncorrectable ECC errors since gpufrac started (%d): reset the GPU", m.Uncorrectable)
	}
	return ""
}

// check refuses options a backend cannot honour, naming the bad value.
func (h HealthOptions) check() error {
	for _, c := range h.IgnoredXIDs {
		if err := CheckIgnoredXID(c); err != nil {
			return fmt.Errorf("ignored XIDs: %w", err)
		}
	}
	return nil
}

// eccBaseline turns the driver's volatile uncorrectable ECC counter of each GPU into the errors
// counted since this process first read it. What the counter held before is history that the
// GPU has served through since: on a GPU with a row remapper (Ampere and newer) an error that
// still needs a reset shows as a pending remapping, which is judged on its own, and a GPU whose
// count alone stood above 0 at start would be drained for good, with every job that could use
// it, by a restart of gpufrac. A counter that went down (a reset) starts a new baseline.
type eccBaseline struct {
	mu   sync.Mutex
	base map[string]uint64
}

// since is how many of count, GPU uuid's counter now, came after the first reading.
func (b *eccBaseline) since(uuid string, count uint64) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	base, ok := b.base[uuid]
	if !ok || count < base {
		if b.base == nil {
			b.base = map[string]uint64{}
		}
		b.base[uuid] = count
		return 0
	}
	return count - base
}
