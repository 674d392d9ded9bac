package violations

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpufrac/gpufrac/size"
)

// PathPrefix is the variable prefix the plugin's token must be allowed to write (and nothing
// else), and the controller's to read, list and write.
const PathPrefix = "gpufrac/violations/"

// ActionOOMInProcess is the enforcer's action for a task that the fence (or an MPS pinned limit)
// refused and that then left the GPU: it failed inside itself, or its framework asked again
// and it went on (enforcer.ActionOOMInProcess, the same string).
const ActionOOMInProcess = "oom-in-process"

// Record is one published violation.
type Record struct {
	AllocID, Job, Task, Template string
	// Namespace is the allocation's Nomad namespace, as its task's environment gives it; ""
	// in a record published before plugins wrote it.
	Namespace string
	GPU       string // UUID
	Node      string // the node's host name
	// GPUUnits is how many units the GPU's whole budget holds: the count a re-run on a whole
	// GPU asks for.
	GPUUnits  int
	UnitBytes size.Bytes
	CapBytes  size.Bytes
	PeakBytes size.Bytes
	// AskedBytes: what a refused allocation would have taken the task to (ledger.Violation's).
	AskedBytes         size.Bytes
	Action, Mode       string
	CrossedAt          time.Time
	ContainedAt        time.Time
	Handled, HandledBy string // set by the controller: what it did, and which controller
	HandledAt          time.Time
}

// Item keys of a violation variable.
const (
	KeyAlloc       = "alloc_id"
	KeyNamespace   = "namespace"
	KeyJob         = "job"
	KeyTask        = "task"
	KeyTemplate    = "template"
	KeyGPU         = "gpu"
	KeyNode        = "node"
	KeyGPUUnits    = "gpu_units"
	KeyUnitBytes   = "unit_bytes"
	KeyCapBytes    = "cap_bytes"
	KeyPeakBytes   = "peak_bytes"
	KeyAskedBytes  = "asked_bytes"
	KeyAction      = "action"
	KeyMode        = "mode"
	KeyCrossedAt   = "crossed_at"
	KeyContainedAt = "contained_at"
	KeyHandled     = "handled"
	KeyHandledBy   = "handled_by"
	KeyHandledAt   = "handled_at"
)

// Path is where r is published: one variable per task and crossing, so a second violation of
// the same allocation is a second variable and a republish of the same one is the same path.
func (r Record) Path() string {
	owner := "unattributed-" + pathSafe(strings.TrimPrefix(r.GPU, "GPU-"), 40)
	if r.AllocID != "" {
		owner = pathSafe(r.AllocID, 40)
	}
	task := pathSafe(r.Task, 40)
	if task == "" {
		task = "task"
	}
	return PathPrefix + owner + "/" + task + "-" + strconv.FormatInt(r.CrossedAt.UnixMilli(), 10)
}

// pathSafe keeps the characters Nomad allows in a variable path and bounds the length.
func pathSafe(s string, n int) string {
	var b strings.Builder
	for _, c := range s {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '~' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= n {
			break
		}
	}
	return b.String()
}

// Items encodes r as variable items.
func (r Record) Items() map[string]string {
	it := map[string]string{
		KeyAlloc: r.AllocID, KeyNamespace: r.Namespace, KeyJob: r.Job, KeyTask: r.Task, KeyTemplate: r.Template, KeyGPU: r.GPU, KeyNode: r.Node,
		KeyGPUUnits: strconv.Itoa(r.GPUUnits), KeyUnitBytes: bytesItem(r.UnitBytes), KeyCapBytes: bytesItem(r.CapBytes),
		KeyPeakBytes: bytesItem(r.PeakBytes), KeyAction: r.Action, KeyMode: r.Mode,
		KeyAskedBytes: askedItem(r.AskedBytes),
		KeyCrossedAt:  timeItem(r.CrossedAt), KeyContainedAt: timeItem(r.ContainedAt),
	}
	if r.Handled != "" {
		it[KeyHandled], it[KeyHandledBy], it[KeyHandledAt] = r.Handled, r.HandledBy, timeItem(r.HandledAt)
	}
	for k, v := range it {
		if v == "" {
			delete(it, k)
		}
	}
	return it
}

func bytesItem(b size.Bytes) string { return strconv.FormatUint(uint64(b), 10) }

// askedItem leaves the item out where nothing was refused (and for a watchdog's stop).
func askedItem(b size.Bytes) string {
	if b == 0 {
		return ""
	}
	return bytesItem(b)
}

// Reached is what the violation proves the task needs: its peak, or what a refused allocation
// would have taken it to, whichever is more.
func (r Record) Reached() size.Bytes { return max(r.PeakBytes, r.AskedBytes) }

func timeItem(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// Decode reads a violation variable's items; the error names the bad item and its value.
func Decode(items map[string]string) (Record, error) {
	r := Record{AllocID: items[KeyAlloc], Namespace: items[KeyNamespace], Job: items[KeyJob], Task: items[KeyTask], Template: items[KeyTemplate],
		GPU: items[KeyGPU], Node: items[KeyNode], Action: items[KeyAction], Mode: items[KeyMode],
		Handled: items[KeyHandled], HandledBy: items[KeyHandledBy]}
	var errs []error
	num := func(k string) uint64 {
		v, ok := items[k]
		if !ok {
			return 0
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("item %s = %q: not a whole number", k, v))
		}
		return n
	}
	when := func(k string) time.Time {
		v, ok := items[k]
		if !ok {
			return time.Time{}
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("item %s = %q: not an RFC 3339 time", k, v))
		}
		return t
	}
	units := num(KeyGPUUnits)
	if units > 1<<24 {
		errs = append(errs, fmt.Errorf("item %s = %d: more units than any GPU has", KeyGPUUnits, units))
		units = 0
	}
	r.GPUUnits = int(units)
	r.UnitBytes, r.CapBytes, r.PeakBytes = size.Bytes(num(KeyUnitBytes)), size.Bytes(num(KeyCapBytes)), size.Bytes(num(KeyPeakBytes))
	r.AskedBytes = size.Bytes(num(KeyAskedBytes))
	r.CrossedAt, r.ContainedAt, r.HandledAt = when(KeyCrossedAt), when(KeyContainedAt), when(KeyHandledAt)
	if err := errors.Join(errs...); err != nil {
		return Record{}, fmt.Errorf("violation record: %w", err)
	}
	return r, nil
}

// Publish writes r under its path, create-only: a violation already published (by this node
// before a restart) is left as it is, with whatever the controller has added.
func Publish(vars *api.Variables, namespace string, r Record) (path string, err error) {
	path = r.Path()
	_, _, err = vars.CheckedCreate(&api.Variable{Namespace: namespace, Path: path, Items: r.Items()},
		&api.WriteOptions{Namespace: namespace})
	var conflict api.ErrCASConflict
	if errors.As(err, &conflict) {
		return path, nil
	}
	if err != nil {
		return path, fmt.Errorf("publishing violation %s: %w", path, err)
	}
	return path, nil
}
