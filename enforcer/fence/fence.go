//go:build cgo

package fence

/*
#cgo CFLAGS: -std=gnu11 -O2 -Wall -Wextra
#include <stdlib.h>
#include "state.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/gpufrac/gpufrac/size"
)

// Available says whether this build can manage fence tables (it needs cgo).
const Available = true

const errLen = 512

func cError(rc C.int, buf *C.char) error {
	msg := C.GoString(buf)
	switch rc {
	case C.GF_ERR_CORRUPT:
		return fmt.Errorf("%w: %s", ErrCorrupt, msg)
	case C.GF_ERR_BUSY:
		return fmt.Errorf("%w: %s", ErrBusy, msg)
	case C.GF_ERR_LOCKED:
		return fmt.Errorf("%w: %s", ErrLocked, msg)
	}
	return errors.New("fence: " + msg)
}

// MaxProcs must be GF_PROCS, NewProcs GF_NEW_PROCS and OwedWait GF_OWED_WAIT_NS: a negative
// length fails the build where they differ.
var (
	_ [MaxProcs - C.GF_PROCS]struct{}
	_ [C.GF_PROCS - MaxProcs]struct{}
	_ [NewProcs - C.GF_NEW_PROCS]struct{}
	_ [C.GF_NEW_PROCS - NewProcs]struct{}
	_ [uint64(OwedWait) - C.GF_OWED_WAIT_NS]struct{}
	_ [C.GF_OWED_WAIT_NS - uint64(OwedWait)]struct{}
)

// Table is the enforcer's handle on one GPU: the control copy it writes and the tasks'
// accounting files, read as one table. Safe for concurrent use.
type Table struct {
	mu   sync.Mutex
	m    *C.struct_gf_gpu
	path string
	wait time.Duration
	// ctx and spare: SetContext's
	ctx, spare size.Bytes
	// names turns the files' token hashes back into the tokens SetTasks was given: they hold
	// hashes only, since every task reads them.
	names map[[hashLen]byte]string
	// set and budget are what SetTasks was last asked for, and expect what it placed: what
	// Verify holds the table to.
	set    []Task
	budget size.Bytes
	expect *Snapshot
}

const hashLen = C.GF_HASH_LEN

// tokenHash is what the files hold for token (tasks.c hashes with the same C).
func tokenHash(token string) [hashLen]byte {
	var h [hashLen]byte
	c := C.CString(token)
	defer C.free(unsafe.Pointer(c))
	C.gf_sha256(unsafe.Pointer(c), C.size_t(len(token)), (*C.uint8_t)(unsafe.Pointer(&h[0])))
	return h
}

// Create opens the control copy of GPU uuid for the fence directory dir (in ControlDir(dir)),
// creating it when missing, and takes it over for this process: a second enforcer on the same
// GPU gets ErrBusy, a file of another layout ErrCorrupt. The tasks' accounting files a previous
// enforcer placed stay until SetTasks says otherwise. total is the GPU's memory, budget what
// guarantees and borrowing may fill together.
func Create(dir, uuid string, total, budget size.Bytes) (*Table, error) {
	if uuid == "" || filepath.Base(uuid) != uuid {
		return nil, fmt.Errorf("%w: GPU UUID %q", ErrBadInput, uuid)
	}
	path := Path(dir, uuid)
	cpath, cuuid := C.CString(path), C.CString(uuid)
	defer C.free(unsafe.Pointer(cpath))
	defer C.free(unsafe.Pointer(cuuid))
	buf := (*C.char)(C.calloc(errLen, 1))
	defer C.free(unsafe.Pointer(buf))
	m := (*C.struct_gf_gpu)(C.calloc(1, C.sizeof_struct_gf_gpu))
	if rc := C.gf_create(cpath, cuuid, C.uint64_t(total), C.uint64_t(budget), m, buf, errLen); rc != 0 {
		C.free(unsafe.Pointer(m))
		return nil, cError(rc, buf)
	}
	return &Table{m: m, path: path, names: map[[hashLen]byte]string{}}, nil
}

// Path names the GPU as the fence's files do (Path(dir, uuid)).
func (t *Table) Path() string { return t.path }

// Close gives the GPU up (its files stay for the tasks that use them).
func (t *Table) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		return nil
	}
	C.gf_close(t.m)
	C.free(unsafe.Pointer(t.m))
	t.m = nil
	return nil
}

// SetWait sets how long an allocation that would borrow memory that is not free may wait for
// it (0: it fails at once), from the next SetTasks on.
func (t *Table) SetWait(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.wait = max(d, 0)
}

// SetContext makes ctx what each process's CUDA context is taken to hold (no fenced call shows
// it), and spare what the GPU holds past the budget (its headroom), from the next SetTasks:
// beside the budget rule, a borrow leaves every process's context, on top of its task's
// guarantee or use, within budget + spare, and while anyone borrows a new guarantee fits the
// same sum (Snapshot.Borrowed). A ctx of 0 (the default) counts none.
func (t *Table) SetContext(ctx, spare size.Bytes) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ctx, t.spare = ctx, spare
}

// SetTasks makes tasks the GPU's whole set: new tokens get a slot and a fresh accounting file
// (AccountDir), known ones their new cap and limit, and tokens not listed leave, their files
// removed (their processes then pass through unfenced). A known token whose file cannot serve
// it (gone, not a table, its lock file gone) is placed anew, with a fresh file and generation;
// one whose file could not be opened for another reason keeps it, and Verify opens it again. A new or raised guarantee that would cover memory borrowers hold, or that would be placed while an
// allocation waits for memory, is left out: the error is a *NoRoomError naming its tokens.
func (t *Table) SetTasks(tasks []Task, budget size.Bytes) error {
	for _, k := range tasks {
		if k.Token == "" || len(k.Token) >= C.GF_TOKEN_MAX {
			return fmt.Errorf("%w: a reservation token of %d characters (1 to %d)", ErrBadInput, len(k.Token), C.GF_TOKEN_MAX-1)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		return ErrClosed
	}
	return t.setTasks(tasks, budget)
}

// setTasks is SetTasks with t.mu held.
func (t *Table) setTasks(tasks []Task, budget size.Bytes) error {
	n := len(tasks)
	specs := (*C.struct_gf_task_spec)(C.calloc(C.size_t(max(n, 1)), C.sizeof_struct_gf_task_spec))
	defer C.free(unsafe.Pointer(specs))
	view := unsafe.Slice(specs, max(n, 1))
	for i, k := range tasks {
		view[i].token = C.CString(k.Token)
		view[i].cap = C.uint64_t(k.Cap)
		view[i].limit = C.uint64_t(k.Limit)
		view[i].keep = C.uint64_t(k.Keep)
		view[i].grace_ns = C.uint64_t(max(k.Grace, 0))
		view[i].stage = C.uint64_t(k.Stage)
		view[i].seen = C.uint64_t(max(k.Seen, 0))
		if k.Unheeded {
			view[i].unheeded = 1
		}
		if k.Sealed {
			view[i].sealed = 1
		}
		view[i].unseen = C.uint64_t(k.Unseen)
	}
	defer func() {
		for i := range n {
			C.free(unsafe.Pointer(view[i].token))
		}
	}()
	clear(t.names)
	for _, k := range tasks {
		t.names[tokenHash(k.Token)] = k.Token
	}
	t.set, t.budget = slices.Clone(tasks), budget
	rc := int(C.gf_set_tasks(t.m, specs, C.int(n), C.uint64_t(budget), C.uint64_t(t.wait.Nanoseconds()), C.uint64_t(t.ctx), C.uint64_t(t.spare)))
	// What left a guarantee no room may be a dead process's: one killed while its allocation
	// waited, or one that held borrowed bytes, until a reaper comes by. Reaped, it is asked again.
	if rc == C.GF_SET_NOROOM && C.gf_reap_all(t.m) > 0 {
		rc = int(C.gf_set_tasks(t.m, specs, C.int(n), C.uint64_t(budget), C.uint64_t(t.wait.Nanoseconds()), C.uint64_t(t.ctx), C.uint64_t(t.spare)))
	}
	t.expect = nil
	if placed, err := t.snapshot(); err == nil {
		t.expect = &placed
	}
	switch {
	case rc == C.GF_SET_FULL:
		return fmt.Errorf("%w: %s holds %d tasks, %d were asked for", ErrFull, t.path, MaxTasks, n)
	case rc == C.GF_SET_NOFILE:
		return fmt.Errorf("%w for %s: %w", ErrNoFile, t.path, syscall.Errno(t.m.file_errno))
	case rc == C.GF_SET_NOROOM:
		return t.noRoom(tasks)
	}
	return nil
}

// noRoom names the tasks the table left out or kept at a smaller guarantee. Called with t.mu.
func (t *Table) noRoom(tasks []Task) error {
	s, err := t.snapshot()
	if err != nil {
		return errors.Join(ErrNoRoom, err)
	}
	e := &NoRoomError{Path: t.path, Borrowed: s.Borrowed(), Waiting: s.Waiting()}
	for _, k := range tasks {
		if u, ok := s.Task(k.Token); !ok || u.Cap < k.Cap {
			e.Tokens = append(e.Tokens, k.Token)
		}
	}
	return e
}

// Verify compares the control copy with what SetTasks last wrote into it, which only the
// enforcer writes (tasks get it read-only: a difference means something else on the host
// wrote it). What differs is written again and named in the answer (nil: all is as set). Tasks
// that SetTasks left out for lack of room are not a difference. A task's sum that is not its
// processes' (the task wrote its own file around the API) is rebuilt from them; a task's file
// that cannot be read (cut short, garbage) is named, and one this enforcer could not open is
// named and opened again.
func (t *Table) Verify() ([]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		return nil, ErrClosed
	}
	if t.expect == nil {
		return nil, nil
	}
	s, err := t.snapshot()
	if err != nil {
		return nil, err
	}
	// A file its task cut or overwrote is named, never written: the enforcer does not map a
	// task's file, and what it wrote there the task could cut again (docs/enforcement.md).
	diffs := append(s.differs(*t.expect), s.unreadable()...)
	if sums := s.unsummed(); len(sums) > 0 {
		diffs = append(diffs, sums...)
		if C.gf_rebuild(t.m) != 0 {
			return diffs, fmt.Errorf("%w: %s", ErrLocked, t.path)
		}
	}
	if len(diffs) == 0 {
		return nil, nil
	}
	if err := t.setTasks(t.set, t.budget); err != nil && !errors.Is(err, ErrNoRoom) {
		return diffs, err
	}
	return diffs, nil
}

// Reap gives back the slots of processes that died and returns how many there were.
func (t *Table) Reap() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		return 0
	}
	return int(C.gf_reap_all(t.m))
}

// Snapshot merges the control copy and every task's accounting file (each under its lock for a
// moment, without it past that) into one table.
func (t *Table) Snapshot() (Snapshot, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		return Snapshot{}, ErrClosed
	}
	return t.snapshot()
}

// snapshot merges the open GPU's files. Called with t.mu.
func (t *Table) snapshot() (Snapshot, error) {
	raw := (*C.struct_gf_table)(C.malloc(C.sizeof_struct_gf_table))
	defer C.free(unsafe.Pointer(raw))
	if C.gf_snapshot(t.m, raw) != 0 {
		return Snapshot{}, fmt.Errorf("%w: %s", ErrLocked, t.path)
	}
	return snapshotOf(raw, t.names), nil
}

// snapshotOf copies raw; a task whose hash names does not know (one a previous enforcer placed,
// until SetTasks replaces it) has no Token.
func snapshotOf(raw *C.struct_gf_table, names map[[hashLen]byte]string) Snapshot {
	s := Snapshot{
		UUID:       C.GoString(&raw.h.uuid[0]),
		Total:      size.Bytes(raw.h.total),
		Budget:     size.Bytes(raw.h.budget),
		Recoveries: uint64(raw.h.recoveries),
		Underflows: uint64(raw.h.underflows),
		Reaped:     uint64(raw.h.reaped),
		Wait:       time.Duration(raw.h.wait_ns),
		Context:    size.Bytes(raw.h.ctx),
		Spare:      size.Bytes(raw.h.spare),
	}
	tokens := map[int]string{}
	for i := range C.GF_TASKS {
		k := &raw.tasks[i]
		if k.state != C.GF_LIVE {
			continue
		}
		var h [hashLen]byte
		copy(h[:], unsafe.Slice((*byte)(unsafe.Pointer(&k.token_hash[0])), hashLen))
		tok := names[h]
		tokens[i] = tok
		s.Tasks = append(s.Tasks, TaskUse{Token: tok, Cap: size.Bytes(k.cap), Limit: size.Bytes(k.limit),
			Used: size.Bytes(k.used), Peak: size.Bytes(k.peak), Refused: uint64(k.refused), Asked: size.Bytes(k.asked), Procs: int(k.procs), Seen: int(k.seen),
			Asking: size.Bytes(k.gwant) + size.Bytes(k.bwant), Waits: uint64(k.waits), OwedWaits: uint64(k.owed), Keep: size.Bytes(k.keep), Armed: k.armed != 0, Sealed: k.sealed != 0, Unseen: size.Bytes(k.unseen), Stage: size.Bytes(k.stage),
			Unheeded: k.unheeded != 0, Unlocked: k.unlocked != C.GF_READ_SETTLED, Unreadable: k.unlocked == C.GF_READ_BAD, Unopened: k.unlocked == C.GF_READ_UNOPENED,
			// A file holds its task's waits twice, in its processes' slots (below) and in the sums
			// the other tasks' rules read (peers.c), and its task writes it: either one says it.
			Waiting: k.nwait > 0 || k.nowed > 0 || k.ngrace > 0 || k.bwant > 0, Owed: k.nowed > 0, Grace: k.ngrace > 0})
	}
	for i := range C.GF_PROCS {
		p := &raw.procs[i]
		if p.state != C.GF_LIVE {
			continue
		}
		tok := ""
		if int(p.task) < C.GF_TASKS && raw.tasks[p.task].gen == p.task_gen {
			tok = tokens[int(p.task)]
		}
		s.Procs = append(s.Procs, ProcUse{Token: tok, PID: int(p.pid), Used: size.Bytes(p.used), Peak: size.Bytes(p.peak),
			Allocs: uint64(p.allocs), Refused: uint64(p.refused), Waiting: waitsForMemory(p.waiting),
			Owed: p.waiting == C.GF_WAIT_OWED, Grace: p.waiting == C.GF_WAIT_GRACE, Staged: p.waiting == C.GF_WAIT_STAGE,
			Asking: size.Bytes(p.wanted)})
		if p.waiting != C.GF_WAIT_NONE && tok != "" {
			for i := range s.Tasks {
				if s.Tasks[i].Token == tok && p.waiting == C.GF_WAIT_STAGE {
					s.Tasks[i].StageWaiting = true
				} else if s.Tasks[i].Token == tok {
					s.Tasks[i].Waiting = true
					s.Tasks[i].Owed = s.Tasks[i].Owed || p.waiting == C.GF_WAIT_OWED
					s.Tasks[i].Grace = s.Tasks[i].Grace || p.waiting == C.GF_WAIT_GRACE
				}
			}
		}
	}
	return s
}

// waitsForMemory says whether a process's wait is for memory other tasks hold: a staged task's
// waits for its own guarantee, which admission grants, and must not stop admission on its GPU.
func waitsForMemory(w C.uint32_t) bool { return w != C.GF_WAIT_NONE && w != C.GF_WAIT_STAGE }

// Result is what the fence said to one charge.
type Result int

// Results of Client.Charge.
const (
	Charged Result = C.GF_OK
	Refused Result = C.GF_REFUSED
	// NoTask: the reservation ended or the process lost its slot; the bytes were not counted.
	NoTask Result = C.GF_NOTASK
)

// Client is one process's attachment to its task's accounting file on a GPU, as the preload
// library makes it. The simulated GPU backend's jobs use it, so simulated tasks are fenced by
// the same code.
type Client struct {
	mu sync.Mutex
	m  *C.struct_gf_map
}

// Attach claims a process slot in the accounting file of token's task on GPU uuid in dir.
func Attach(dir, uuid, token string) (*Client, error) {
	cpath, ctok := C.CString(Path(dir, uuid)), C.CString(token)
	defer C.free(unsafe.Pointer(cpath))
	defer C.free(unsafe.Pointer(ctok))
	buf := (*C.char)(C.calloc(errLen, 1))
	defer C.free(unsafe.Pointer(buf))
	m := (*C.struct_gf_map)(C.calloc(1, C.sizeof_struct_gf_map))
	if rc := C.gf_attach(cpath, ctok, m, buf, errLen); rc != 0 {
		C.free(unsafe.Pointer(m))
		return nil, cError(rc, buf)
	}
	return &Client{m: m}, nil
}

// Charge asks for n bytes; a refusal first gives back what dead processes held.
func (c *Client) Charge(n size.Bytes) Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		return NoTask
	}
	r := Result(C.gf_charge(c.m, C.uint64_t(n)))
	switch r {
	case C.GF_OK_OWED:
		r = Charged // the simulated GPU frees a stopped process's memory at once
	case C.GF_BUSY:
		r = NoTask // the task's lock is kept by a stopped or hostile process: unfenced
	}
	return r
}

// Refusal says why the client's last refused charge was refused, in the words the preload
// library's message uses, and how long it waited first.
func (c *Client) Refusal() (why string, waited time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		return "", 0
	}
	return C.GoString(C.gf_why_text(c.m.why)), time.Duration(c.m.waited_ns)
}

// Uncharge gives n bytes back.
func (c *Client) Uncharge(n size.Bytes) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m != nil {
		C.gf_uncharge(c.m, C.uint64_t(n))
	}
}

// View is the task's cap and what all its processes hold.
func (c *Client) View() (capBytes, used size.Bytes, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		return 0, 0, false
	}
	var cp, u C.uint64_t
	if C.gf_view(c.m, &cp, &u) != C.GF_OK {
		return 0, 0, false
	}
	return size.Bytes(cp), size.Bytes(u), true
}

// Detach gives the slot and its bytes back.
func (c *Client) Detach() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m != nil {
		C.gf_detach(c.m)
		C.free(unsafe.Pointer(c.m))
		c.m = nil
	}
}
