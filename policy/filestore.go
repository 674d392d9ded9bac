package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"
)

// FileFormat names the store form of a policy file (see docs/policy-file.md).
const FileFormat = "gpufrac-policy-file"

// FileOptions tunes a FileStore's watching.
type FileOptions struct {
	// PollInterval is how often WaitPolicy re-reads the file (default 1s).
	PollInterval time.Duration
	// WaitTime bounds one WaitPolicy call (default 5m), like a Nomad blocking query.
	WaitTime time.Duration
}

// FileStore keeps policies and templates in one local JSON file, for single machines and
// tests. It accepts two forms (docs/policy-file.md):
//
//   - the store form, {"format": "gpufrac-policy-file", "index": N, "policies": {name: entry},
//     "templates": {name: entry}} where entry is {"items": {...}, "create_index",
//     "modify_index", "modify_time"} and items are exactly the Nomad Variable items. Writes keep
//     a file-wide index so check-and-set works as on Nomad;
//   - the single-policy form: one policy's items as a flat JSON object. It is read-only.
//
// Writes replace the file atomically (temp file, fsync, rename, fsync of the directory) under
// an in-process mutex and, on Unix, an flock on "<path>.lock", so readers never see half a file.
// A missing file is an empty store.
type FileStore struct {
	path string
	opts FileOptions
	mu   sync.Mutex
}

// NewFileStore returns a store on path; nothing is read until used.
func NewFileStore(path string, opts FileOptions) *FileStore {
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	if opts.WaitTime <= 0 {
		opts.WaitTime = 5 * time.Minute
	}
	return &FileStore{path: path, opts: opts}
}

// Path is the file the store reads and writes.
func (s *FileStore) Path() string { return s.path }

// String names the store.
func (s *FileStore) String() string { return "policy file " + s.path }

type fileEntry struct {
	Items       map[string]string `json:"items"`
	CreateIndex uint64            `json:"create_index,omitempty"`
	ModifyIndex uint64            `json:"modify_index,omitempty"`
	ModifyTime  time.Time         `json:"modify_time,omitzero"`
}

type fileDoc struct {
	Format    string                `json:"format"`
	Index     uint64                `json:"index"`
	Policies  map[string]*fileEntry `json:"policies"`
	Templates map[string]*fileEntry `json:"templates"`

	single bool // the file is one policy's items: read-only
}

// parseFile reads either form. Hand-written store entries may leave the indexes out; they get
// the file's index so that a check-and-set against them still means something.
func parseFile(path string, data []byte, mtime time.Time) (*fileDoc, error) {
	doc := &fileDoc{Format: FileFormat, Policies: map[string]*fileEntry{}, Templates: map[string]*fileEntry{}}
	if len(bytes.TrimSpace(data)) == 0 {
		return doc, nil
	}
	// Walked first: Unmarshal's errors say neither the line nor, for an item that is no
	// string or a field it does not know, where it is, and it keeps the last of a key written
	// twice without a word.
	vals, err := walkJSON(path, data)
	if err != nil {
		return nil, fmt.Errorf("%w: policy file %w", ErrInvalid, err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("%w: policy file %s: not a JSON object: %w", ErrInvalid, path, err)
	}
	_, hasFormat := top["format"]
	_, hasPolicies := top["policies"]
	_, hasTemplates := top["templates"]
	if !hasFormat && !hasPolicies && !hasTemplates {
		if err := itemKinds(path, data, vals, func(keys []string) (string, bool) {
			return "policy", len(keys) == 1
		}); err != nil {
			return nil, fmt.Errorf("%w: policy file %w (so neither the store form, with \"policies\", nor one policy's items)", ErrInvalid, err)
		}
		var items map[string]string
		if err := json.Unmarshal(data, &items); err != nil {
			return nil, fmt.Errorf("%w: policy file %s: neither the store form (with \"policies\") nor one policy's items (all string values): %w", ErrInvalid, path, err)
		}
		name := items[KeyName]
		if !ValidName(name) {
			// The policy is found by its name item alone: without one (misspelt, left out) the
			// file holds no policy by any name, and "not found" sent every reader to the
			// built-in defaults, the file's values ignored without a word.
			_, derr := DecodePolicy(items)
			return nil, fmt.Errorf("%w: policy file %s holds one policy's items but no valid %q item to find it by: %w",
				ErrInvalid, path, KeyName, derr)
		}
		doc.single, doc.Index = true, 1
		doc.Policies[name] = &fileEntry{Items: items, CreateIndex: 1, ModifyIndex: 1, ModifyTime: mtime}
		return doc, nil
	}
	if err := itemKinds(path, data, vals, func(keys []string) (string, bool) {
		if len(keys) != 4 || keys[2] != "items" || (keys[0] != "policies" && keys[0] != "templates") {
			return "", false
		}
		return map[string]string{"policies": "policy", "templates": "template"}[keys[0]] + " " + strconv.Quote(keys[1]), true
	}); err != nil {
		return nil, fmt.Errorf("%w: policy file %w", ErrInvalid, err)
	}
	if err := unknownKeys(path, data, vals); err != nil {
		return nil, fmt.Errorf("%w: policy file %w", ErrInvalid, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(doc); err != nil {
		return nil, fmt.Errorf("%w: policy file %s: %w", ErrInvalid, path, err)
	}
	if doc.Format != FileFormat {
		return nil, fmt.Errorf("%w: policy file %s: format %q, want %q", ErrInvalid, path, doc.Format, FileFormat)
	}
	if doc.Policies == nil {
		doc.Policies = map[string]*fileEntry{}
	}
	if doc.Templates == nil {
		doc.Templates = map[string]*fileEntry{}
	}
	if doc.Index == 0 {
		doc.Index = 1
	}
	for _, m := range []map[string]*fileEntry{doc.Policies, doc.Templates} {
		for name, e := range m {
			if e == nil {
				return nil, fmt.Errorf("%w: policy file %s: entry %q is null", ErrInvalid, path, name)
			}
			if e.ModifyIndex == 0 {
				e.ModifyIndex = doc.Index
			}
			if e.CreateIndex == 0 {
				e.CreateIndex = e.ModifyIndex
			}
			if e.ModifyTime.IsZero() {
				e.ModifyTime = mtime
			}
		}
	}
	return doc, nil
}

// load returns the document and a token that changes whenever the file's bytes do.
func (s *FileStore) load() (*fileDoc, uint64, error) {
	data, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		doc, _ := parseFile(s.path, nil, time.Time{})
		return doc, 2, nil // an even token: content tokens are odd
	case errors.Is(err, fs.ErrPermission):
		return nil, 0, fmt.Errorf("policy file %s: %w: %w", s.path, ErrPermissionDenied, err)
	case err != nil:
		return nil, 0, fmt.Errorf("policy file %s: %w", s.path, err)
	}
	h := fnv.New64a()
	_, _ = h.Write(data)
	token := h.Sum64() | 1
	var mtime time.Time
	if fi, err := os.Stat(s.path); err == nil {
		mtime = fi.ModTime()
	}
	doc, err := parseFile(s.path, data, mtime)
	return doc, token, err
}

func (s *FileStore) save(doc *fileDoc) error {
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	dir := filepath.Dir(s.path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(s.path)+".tmp*")
	if err != nil {
		return fmt.Errorf("policy file %s: %w", s.path, err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err = tmp.Write(data); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		mode := os.FileMode(0o644) // policies are not secret; keep a stricter mode someone chose
		if fi, serr := os.Stat(s.path); serr == nil {
			mode = fi.Mode().Perm()
		}
		err = os.Chmod(tmp.Name(), mode)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.path)
	}
	if err != nil {
		return fmt.Errorf("policy file %s: write: %w", s.path, err)
	}
	// The rename is durable only once the directory entry is.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// update runs fn on the current document under both locks and saves the result.
func (s *FileStore) update(fn func(doc *fileDoc) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, err := lockFile(s.path + ".lock")
	if err != nil {
		return fmt.Errorf("policy file %s: lock: %w", s.path, err)
	}
	defer unlock()
	doc, _, err := s.load()
	if err != nil {
		return err
	}
	if doc.single {
		return fmt.Errorf("policy file %s holds a single policy and is read-only; use the store form to write (docs/policy-file.md)", s.path)
	}
	if err := fn(doc); err != nil {
		return err
	}
	return s.save(doc)
}

func (s *FileStore) put(m func(*fileDoc) map[string]*fileEntry, kind, name string, items map[string]string, cas uint64, checked bool) (Meta, error) {
	var meta Meta
	err := s.update(func(doc *fileDoc) error {
		cur, exists := m(doc)[name]
		if checked {
			switch {
			case cas == 0 && exists, cas != 0 && !exists, exists && cur.ModifyIndex != cas:
				ce := &ConflictError{Path: s.path + "#" + kind + "/" + name, CAS: cas}
				if exists {
					ce.Current = Meta{ModifyIndex: cur.ModifyIndex, CreateIndex: cur.CreateIndex, ModifyTime: cur.ModifyTime}
				}
				return ce
			}
		}
		doc.Index++
		e := &fileEntry{Items: items, CreateIndex: doc.Index, ModifyIndex: doc.Index, ModifyTime: time.Now().UTC()}
		if exists {
			e.CreateIndex = cur.CreateIndex
		}
		m(doc)[name] = e
		meta = Meta{ModifyIndex: e.ModifyIndex, CreateIndex: e.CreateIndex, ModifyTime: e.ModifyTime}
		return nil
	})
	return meta, err
}

func (s *FileStore) del(m func(*fileDoc) map[string]*fileEntry, kind, name string, cas uint64) error {
	return s.update(func(doc *fileDoc) error {
		cur, exists := m(doc)[name]
		if cas != 0 && (!exists || cur.ModifyIndex != cas) {
			ce := &ConflictError{Path: s.path + "#" + kind + "/" + name, CAS: cas}
			if exists {
				ce.Current = Meta{ModifyIndex: cur.ModifyIndex, CreateIndex: cur.CreateIndex, ModifyTime: cur.ModifyTime}
			}
			return ce
		}
		doc.Index++ // like Nomad, a delete of nothing still moves the index
		delete(m(doc), name)
		return nil
	})
}

func (s *FileStore) get(m func(*fileDoc) map[string]*fileEntry, kind, name string) (map[string]string, Meta, uint64, error) {
	doc, token, err := s.load()
	if err != nil {
		return nil, Meta{}, token, err
	}
	e, ok := m(doc)[name]
	if !ok {
		return nil, Meta{}, token, fmt.Errorf("%s %q in %s: %w", kind, name, s.path, ErrNotFound)
	}
	return e.Items, Meta{ModifyIndex: e.ModifyIndex, CreateIndex: e.CreateIndex, ModifyTime: e.ModifyTime}, token, nil
}

func (s *FileStore) where(kind, name string) string { return s.path + "#" + kind + "/" + name }

// GetPolicy reads and decodes the named policy.
func (s *FileStore) GetPolicy(ctx context.Context, name string) (Policy, Meta, error) {
	p, m, _, err := s.getPolicy(name)
	return p, m, err
}

func (s *FileStore) getPolicy(name string) (Policy, Meta, uint64, error) {
	return fileGet(s, PolicyKind, name)
}

// PutPolicy writes p with check-and-set (see Store).
func (s *FileStore) PutPolicy(ctx context.Context, p Policy, cas uint64) (Meta, error) {
	return filePut(s, PolicyKind, p, cas, true)
}

// PutPolicyUnchecked writes p without check-and-set.
func (s *FileStore) PutPolicyUnchecked(ctx context.Context, p Policy) (Meta, error) {
	return filePut(s, PolicyKind, p, 0, false)
}

// DeletePolicy deletes the named policy (cas 0: unconditionally).
func (s *FileStore) DeletePolicy(ctx context.Context, name string, cas uint64) error {
	return fileDel(s, PolicyKind, name, cas)
}

// GetTemplate reads and decodes the named template.
func (s *FileStore) GetTemplate(ctx context.Context, name string) (Template, Meta, error) {
	t, m, _, err := fileGet(s, TemplateKind, name)
	return t, m, err
}

// PutTemplate writes t with check-and-set (see Store).
func (s *FileStore) PutTemplate(ctx context.Context, t Template, cas uint64) (Meta, error) {
	return filePut(s, TemplateKind, t, cas, true)
}

// PutTemplateUnchecked writes t without check-and-set.
func (s *FileStore) PutTemplateUnchecked(ctx context.Context, t Template) (Meta, error) {
	return filePut(s, TemplateKind, t, 0, false)
}

// DeleteTemplate deletes the named template (cas 0: unconditionally).
func (s *FileStore) DeleteTemplate(ctx context.Context, name string, cas uint64) error {
	return fileDel(s, TemplateKind, name, cas)
}

// fileGet reads and decodes the object of kind k called name, with the file's token.
func fileGet[T any](s *FileStore, k Kind[T], name string) (T, Meta, uint64, error) {
	var zero T
	if err := CheckName(k.Name, name); err != nil {
		return zero, Meta{}, 0, err
	}
	items, m, token, err := s.get(k.entries, k.Name, name)
	if err != nil {
		return zero, Meta{}, token, err
	}
	v, err := k.DecodeAt(s.where(k.Name, name), name, items)
	return v, m, token, err
}

func filePut[T any](s *FileStore, k Kind[T], v T, cas uint64, checked bool) (Meta, error) {
	items, err := k.Encode(v)
	if err != nil {
		return Meta{}, err
	}
	return s.put(k.entries, k.Name, k.NameOf(v), items, cas, checked)
}

func fileDel[T any](s *FileStore, k Kind[T], name string, cas uint64) error {
	if err := CheckName(k.Name, name); err != nil {
		return err
	}
	return s.del(k.entries, k.Name, name, cas)
}

// ListTemplates returns every template in the file sorted by name (see Store).
func (s *FileStore) ListTemplates(ctx context.Context) ([]Template, error) {
	doc, _, err := s.load()
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(doc.Templates))
	for n := range doc.Templates {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []Template
	var bad []error
	for _, n := range names {
		t, err := TemplateKind.DecodeAt(s.where("template", n), n, doc.Templates[n].Items)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		out = append(out, t)
	}
	return out, errors.Join(bad...)
}

// WaitPolicy polls the file every PollInterval until its bytes differ from those that gave
// the token after, or WaitTime passes (see PolicySource). The token is a hash of the file's
// bytes, so hand edits are seen even when they leave the indexes alone.
func (s *FileStore) WaitPolicy(ctx context.Context, name string, after uint64) (Policy, Meta, uint64, error) {
	deadline := time.Now().Add(s.opts.WaitTime)
	for {
		p, m, token, err := s.getPolicy(name)
		if after == 0 || token != after || token == 0 || !time.Now().Before(deadline) {
			return p, m, token, err
		}
		t := time.NewTimer(min(s.opts.PollInterval, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return Policy{}, Meta{}, 0, ctx.Err()
		case <-t.C:
		}
	}
}
