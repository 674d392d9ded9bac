package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/policy"
)

// SchemaVersion is the version of the ledger file this package writes. A file with a newer
// version is refused rather than misread.
const SchemaVersion = 1

// File names inside the ledger directory. Violations live in their own file because they are
// the bulk of the data (up to MaxViolations) and change rarely: keeping them out of StateFile
// keeps the commit on the admission path small.
const (
	StateFile      = "ledger.json"
	ViolationsFile = "violations.json"
	LockFile       = "ledger.lock"
	tempSuffix     = ".tmp"
)

// ErrCorrupt is wrapped when the ledger file cannot be read as a committed state.
var ErrCorrupt = errors.New("ledger file is corrupt")

// ErrSchema is wrapped when the ledger file was written by a newer gpufrac.
var ErrSchema = errors.New("unsupported ledger schema version")

// Snapshot is the last committed state, as ReadSnapshot returns it.
type Snapshot struct {
	SchemaVersion int
	// Generation counts commits; it only grows.
	Generation   uint64
	Policy       policy.Policy
	GPUs         []GPUState
	Reservations []Reservation
	Violations   []Violation
	Profiles     []Profile
	WrittenAt    time.Time
	// Grace is how long the writer keeps a reservation that no live process carries
	// (Options.Grace); 0 when the file does not say (written before it did).
	Grace time.Duration
	// Damage says what of the ledger could not be read (a damaged violations file, a GPU size
	// no GPU has) and was left out; empty when everything read whole.
	Damage string
}

// fileState is the on-disk document. Everything is in one file so that one rename commits it.
type fileState struct {
	SchemaVersion int           `json:"schema_version"`
	Generation    uint64        `json:"generation"`
	WrittenAt     time.Time     `json:"written_at"`
	Policy        policy.Policy `json:"policy"`
	GPUs          []gpuRec      `json:"gpus"`
	Reservations  []Reservation `json:"reservations"`
	Profiles      []Profile     `json:"profiles"`
	// Grace is the writer's Options.Grace, for readers; older readers ignore it.
	Grace time.Duration `json:"grace,omitempty"`
}

// violationsDoc is the document in ViolationsFile.
type violationsDoc struct {
	SchemaVersion int         `json:"schema_version"`
	Violations    []Violation `json:"violations"`
}

func (s *state) encode(now time.Time) ([]byte, error) {
	f := fileState{
		SchemaVersion: SchemaVersion,
		Generation:    s.gen,
		WrittenAt:     utc(now),
		Policy:        s.policy,
		GPUs:          make([]gpuRec, 0, len(s.gpus)),
		Reservations:  s.allReservations(),
		Profiles:      s.profiles(),
		Grace:         s.grace,
	}
	for _, u := range s.gpuOrder() {
		f.GPUs = append(f.GPUs, s.gpus[u])
	}
	if f.Reservations == nil {
		f.Reservations = []Reservation{}
	}
	return encodeLine("state", f)
}

func (s *state) encodeViolations() ([]byte, error) {
	d := violationsDoc{SchemaVersion: SchemaVersion, Violations: s.viol}
	if d.Violations == nil {
		d.Violations = []Violation{}
	}
	return encodeLine("violations", d)
}

// encodeLine is v as one line of JSON, the form of every file the ledger writes.
func encodeLine(what string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("ledger: encode %s: %w", what, err)
	}
	return append(b, '\n'), nil
}

func (s *state) profiles() []Profile {
	out := slices.Collect(maps.Values(s.prof))
	slices.SortFunc(out, func(a, b Profile) int { return strings.Compare(a.Template, b.Template) })
	if out == nil {
		out = []Profile{}
	}
	return out
}

// writeFile commits data: temp file, fsync, rename over the old file, fsync the directory. A
// crash before the rename leaves the old file; after it, the new one; never a mixture, because
// rename within one directory is atomic and the temp file is complete on disk before it.
func writeFile(dir string, dirf *os.File, name string, data []byte) error {
	tmp := filepath.Join(dir, name+tempSuffix)
	// The os package's errors already name the operation and the file (write <tmp>: no space
	// left on device); wrapping them once more would say the path twice.
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("ledger: %w", werr)
	}
	dst := filepath.Join(dir, name)
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("ledger: commit %s: %w", dst, err)
	}
	if err := dirf.Sync(); err != nil {
		return fmt.Errorf("ledger: sync directory %s: %w", dir, err)
	}
	return nil
}

// readState loads and checks the committed file. A missing file wraps fs.ErrNotExist; anything
// unreadable is an error naming the file, never an empty state, so nothing is silently lost.
func readState(dir string) (*state, time.Time, error) {
	path := filepath.Join(dir, StateFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("ledger: read %s: %w", path, err)
	}
	if err := checkHeader(path, b); err != nil {
		if errors.Is(err, ErrCorrupt) {
			// The state file is what admits and caps tasks: nothing of it can be guessed.
			err = fmt.Errorf("%w; move the ledger directory aside to start empty, which forgets its reservations", err)
		}
		return nil, time.Time{}, err
	}
	var f fileState
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)
	}
	s, err := f.toState()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)
	}
	for i, d := range s.gpuDamage {
		s.gpuDamage[i] = path + ": " + d
	}
	// The violations file is written before the first state file, so it always exists beside one.
	// Violations are history: a damaged file costs what cannot be read of it, never the state.
	viol, damage, err := readViolations(filepath.Join(dir, ViolationsFile), path)
	if err != nil {
		return nil, time.Time{}, err
	}
	if len(viol) > 0 {
		s.viol = viol
	}
	s.damage = damage
	return s, f.WrittenAt, nil
}

// orphanViolations refuses to start a new ledger beside a violations file that holds anything:
// a fresh ledger writes an empty one first, so recorded violations without a state file mean
// the state file was removed, and starting empty would hide that.
func orphanViolations(dir string) error {
	vpath := filepath.Join(dir, ViolationsFile)
	vb, err := os.ReadFile(vpath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ledger: read %s: %w", vpath, err)
	}
	var vd violationsDoc
	if err := checkHeader(vpath, vb); err != nil {
		return err
	}
	if err := json.Unmarshal(vb, &vd); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, vpath, err)
	}
	if len(vd.Violations) > 0 {
		return fmt.Errorf("%w: %s is missing but %s holds %d violations; restore the state file or move the directory aside",
			ErrCorrupt, filepath.Join(dir, StateFile), vpath, len(vd.Violations))
	}
	return nil
}

// checkHeader refuses a document that is not complete JSON or has a schema this code cannot read.
// What to do about it is the caller's to say: a damaged state file means moving the ledger
// aside, a damaged violations file costs only its violations.
func checkHeader(path string, b []byte) error {
	var head struct {
		SchemaVersion *int `json:"schema_version"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return fmt.Errorf("%w: %s (%d bytes) is not a complete JSON document: %w", ErrCorrupt, path, len(b), err)
	}
	switch {
	case head.SchemaVersion == nil || *head.SchemaVersion < 1:
		return fmt.Errorf("%w: %s has no valid schema_version", ErrCorrupt, path)
	case *head.SchemaVersion > SchemaVersion:
		return fmt.Errorf("%w: %s has schema_version %d; this gpufrac reads up to %d, so upgrade gpufrac",
			ErrSchema, path, *head.SchemaVersion, SchemaVersion)
	}
	return nil
}

// toState rebuilds the in-memory state and checks that it is one the ledger could have written.
func (f *fileState) toState() (*state, error) {
	s := newState()
	s.gen = f.Generation
	s.grace = max(f.Grace, 0)
	if err := f.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	s.policy = f.Policy
	var oversized []gpuRec
	for _, g := range f.GPUs {
		if g.Info.UUID == "" {
			return nil, errors.New("a GPU has an empty uuid")
		}
		if _, dup := s.gpus[g.Info.UUID]; dup {
			return nil, fmt.Errorf("GPU %s is listed twice", g.Info.UUID)
		}
		if g.Info.TotalBytes > MaxGPUBytes {
			// Every unit is an instance to build and advertise, so an absurd size would make
			// each States call (each fingerprint pass) cost time and memory in proportion to
			// it. The size is a fact the backend restates at the next SyncGPUs, so forgetting
			// it loses nothing that cannot come back; the GPU's reservations are still sound.
			oversized = append(oversized, g)
			claimed := g.Info.TotalBytes
			g.Info.TotalBytes = 0
			g.Info.Healthy = false
			g.Info.HealthReason = fmt.Sprintf("the ledger file claimed %s for this GPU, more than any GPU has (at most %s): "+
				"no unit is offered until the GPU backend reports its size", claimed, MaxGPUBytes)
		}
		s.gpus[g.Info.UUID] = g
	}
	for _, r := range f.Reservations {
		if len(r.Token) < 16 {
			return nil, fmt.Errorf("reservation with token %q is too short to be one the ledger made", RedactToken(r.Token))
		}
		if _, dup := s.res[r.Token]; dup {
			return nil, fmt.Errorf("reservation %s is listed twice", RedactToken(r.Token))
		}
		if _, ok := s.gpus[r.GPU]; !ok {
			return nil, fmt.Errorf("reservation %s is on GPU %q, which the file does not list", RedactToken(r.Token), r.GPU)
		}
		if len(r.InstanceIDs) == 0 {
			return nil, fmt.Errorf("reservation %s holds no instance IDs", RedactToken(r.Token))
		}
		for _, id := range r.InstanceIDs {
			u, _, err := ParseInstanceID(id)
			if err != nil {
				return nil, fmt.Errorf("reservation %s: %w", RedactToken(r.Token), err)
			}
			if u != r.GPU {
				return nil, fmt.Errorf("reservation %s on GPU %s holds instance %s of another GPU", RedactToken(r.Token), r.GPU, id)
			}
			if other, dup := s.byID[id]; dup {
				return nil, fmt.Errorf("instance %s is held by both %s and %s", id, RedactToken(other), RedactToken(r.Token))
			}
			s.byID[id] = r.Token
		}
		s.res[r.Token] = r
	}
	for _, p := range f.Profiles {
		if p.Template == "" {
			return nil, errors.New("a profile has an empty template name")
		}
		s.prof[p.Template] = p
	}
	for _, g := range oversized {
		s.gpuDamage = append(s.gpuDamage, fmt.Sprintf("GPU %s claims total_bytes %d (%s), more than any GPU has (at most %s): "+
			"its size is forgotten and it offers no unit until the GPU backend reports it again; its %d reservation(s) are kept",
			g.Info.UUID, uint64(g.Info.TotalBytes), g.Info.TotalBytes, MaxGPUBytes, len(s.reservationsOn(g.Info.UUID))))
	}
	return s, nil
}

// ReadSnapshot reads the last committed state without taking the writer lock, so `gpufrac
// status` works while the plugin runs. It sees either the previous or the next commit, never a
// partial one, because commits replace the file by rename. A directory with no ledger yet gives
// an error that wraps fs.ErrNotExist.
func ReadSnapshot(dir string) (Snapshot, error) {
	s, written, err := readState(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// As for Open: recorded violations without a state file mean the state file was
			// removed, which a reader must not show as a fresh, empty ledger either.
			if verr := orphanViolations(dir); verr != nil {
				return Snapshot{}, verr
			}
			return Snapshot{}, fmt.Errorf("ledger: no ledger in %s yet (nothing has been recorded): %w", dir, err)
		}
		return Snapshot{}, err
	}
	snap := Snapshot{
		SchemaVersion: SchemaVersion,
		Generation:    s.gen,
		Policy:        s.policy,
		Reservations:  s.allReservations(),
		Violations:    slices.Clone(s.viol),
		Profiles:      s.profiles(),
		WrittenAt:     written,
		Grace:         s.grace,
		Damage:        strings.Join(s.damageReport(), "; "),
	}
	for _, u := range s.gpuOrder() {
		snap.GPUs = append(snap.GPUs, s.gpuState(u))
	}
	return snap, nil
}
