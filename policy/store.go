package policy

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Meta is a stored object's version. ModifyIndex is the check-and-set value: pass it back to
// Put or Delete to change exactly the version you read.
type Meta struct {
	ModifyIndex, CreateIndex uint64
	ModifyTime               time.Time
}

// Errors every Store returns, wrapped with the path; test them with errors.Is.
var (
	// ErrNotFound: the policy or template does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a check-and-set failed; errors.As gives a *ConflictError with the current version.
	ErrConflict = errors.New("check-and-set conflict")
	// ErrPermissionDenied: the store refused the token (HTTP 403). It is always an error and
	// never means "absent": a reader must keep what it has, a provider must not drop state.
	ErrPermissionDenied = errors.New("permission denied")
)

// ConflictError is returned when a check-and-set does not match. errors.Is(err, ErrConflict)
// holds for it.
type ConflictError struct {
	// Path is the variable path (or file entry) that conflicted.
	Path string
	// CAS is the index the caller expected (0: "must not exist").
	CAS uint64
	// Current is the version that is there now; Current.ModifyIndex is 0 when the object is
	// absent (or, on Nomad, locked by someone else).
	Current Meta
}

func (e *ConflictError) Error() string {
	if e.Current.ModifyIndex == 0 {
		return fmt.Sprintf("%s: %s: expected modify index %d, but it does not exist", ErrConflict, e.Path, e.CAS)
	}
	if e.CAS == 0 {
		return fmt.Sprintf("%s: %s: expected it not to exist, but it does (modify index %d)", ErrConflict, e.Path, e.Current.ModifyIndex)
	}
	return fmt.Sprintf("%s: %s: expected modify index %d, found %d (changed by someone else)", ErrConflict, e.Path, e.CAS, e.Current.ModifyIndex)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Exists reports whether the object existed when the conflict happened.
func (e *ConflictError) Exists() bool { return e.Current.ModifyIndex != 0 }

// Store holds policies and templates. Implementations: NomadStore (Nomad Variables) and
// FileStore (one local JSON file). All methods are safe for concurrent use.
//
// Check-and-set, the same for both stores and for policies and templates:
//   - Put(x, 0) creates x only if it does not exist yet (Terraform create).
//   - Put(x, n) with n > 0 replaces x only if its ModifyIndex is still n (Terraform update with
//     the modify index from state). An object that changed or vanished since gives a
//     *ConflictError: that is drift, and the caller should re-read instead of overwriting.
//   - PutUnchecked(x) is a plain upsert for tools and tests that do not care.
//   - Delete(name, 0) deletes unconditionally; Delete(name, n) with n > 0 deletes only if the
//     ModifyIndex is still n. Deleting something absent with cas 0 succeeds (idempotent).
//
// Every successful write returns the new Meta; a write always bumps ModifyIndex, even when the
// items are unchanged, so callers should not rewrite equal values (each write wakes watchers).
// Get returns an error wrapping ErrNotFound when absent, ErrPermissionDenied on 403, and
// ErrInvalid when the stored items do not decode or validate (naming the path).
type Store interface {
	GetPolicy(ctx context.Context, name string) (Policy, Meta, error)
	PutPolicy(ctx context.Context, p Policy, cas uint64) (Meta, error)
	PutPolicyUnchecked(ctx context.Context, p Policy) (Meta, error)
	DeletePolicy(ctx context.Context, name string, cas uint64) error

	GetTemplate(ctx context.Context, name string) (Template, Meta, error)
	PutTemplate(ctx context.Context, t Template, cas uint64) (Meta, error)
	PutTemplateUnchecked(ctx context.Context, t Template) (Meta, error)
	DeleteTemplate(ctx context.Context, name string, cas uint64) error

	// ListTemplates returns every template sorted by name. Templates that do not decode are
	// left out and reported in a non-nil error wrapping ErrInvalid alongside the good ones;
	// any other error comes with a nil slice.
	ListTemplates(ctx context.Context) ([]Template, error)
}

// PolicySource can wait for a policy to change; Watcher follows one. Both stores implement it.
type PolicySource interface {
	// WaitPolicy returns the named policy once its state differs from the one described by
	// after (0: return at once), or when a store-specific wait bound passes. index is an
	// opaque token to pass as after next time; it is non-zero whenever the store answered,
	// including answers that are ErrNotFound or ErrInvalid, and 0 when the store could not be
	// reached or refused the token.
	WaitPolicy(ctx context.Context, name string, after uint64) (p Policy, m Meta, index uint64, err error)
}

var (
	_ Store        = (*FileStore)(nil)
	_ PolicySource = (*FileStore)(nil)
)
