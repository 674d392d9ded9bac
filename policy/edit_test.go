package policy_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
	"github.com/gpufrac/gpufrac/size"
)

// meddler is a Store in which another writer (a terraform apply at the same moment) rewrites
// the template just before each of the next races writes of EditTemplate reach the store, so
// that each of those writes meets a version it did not read.
type meddler struct {
	policy.Store
	t       *testing.T
	races   int
	theirs  func(*policy.Template)
	readErr error
	puts    int
}

func (m *meddler) GetTemplate(ctx context.Context, name string) (policy.Template, policy.Meta, error) {
	if m.readErr != nil {
		return policy.Template{}, policy.Meta{}, fmt.Errorf("get %s: %w", name, m.readErr)
	}
	return m.Store.GetTemplate(ctx, name)
}

func (m *meddler) PutTemplate(ctx context.Context, t policy.Template, cas uint64) (policy.Meta, error) {
	m.puts++
	if m.races > 0 {
		m.races--
		cur, _, err := m.Store.GetTemplate(ctx, t.Name)
		if err != nil {
			m.t.Fatalf("the other writer's read: %v", err)
		}
		m.theirs(&cur)
		if _, err := m.Store.PutTemplateUnchecked(ctx, cur); err != nil {
			m.t.Fatalf("the other writer's write: %v", err)
		}
	}
	return m.Store.PutTemplate(ctx, t, cas)
}

// TestEditTemplate: an edit survives another writer's change, is given up with a clear error
// when it never stops losing to one, and writes nothing it did not change; on both stores,
// whose check-and-set conflicts must look alike to it.
func TestEditTemplate(t *testing.T) {
	stores := []struct {
		kind string
		open func(t *testing.T) policy.Store
	}{
		{"file", func(t *testing.T) policy.Store {
			return policy.NewFileStore(filepath.Join(t.TempDir(), "policy.json"), policy.FileOptions{})
		}},
		{"nomad", func(t *testing.T) policy.Store {
			srv := varserver.New(varserver.Options{})
			t.Cleanup(srv.Close)
			st, err := nomadvars.New(nomadvars.Config{Address: srv.URL()})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
	}
	stored := policy.Template{Name: "lora", Policy: "default", Description: "v1", PeakBytes: size.GiB}
	// raise is the controller's edit: a footprint only ever grows, and an absent template is
	// not made.
	raise := func(t *policy.Template, exists bool) (bool, error) {
		if !exists || t.PeakBytes >= 4*size.GiB {
			return false, nil
		}
		t.PeakBytes = 4 * size.GiB
		return true, nil
	}
	describe := func(t *policy.Template) { t.Description = "v2 by terraform" }
	errEdit := errors.New("the edit refuses")

	tests := []struct {
		name    string
		stored  bool // stored holds the template before the edit
		races   int
		theirs  func(*policy.Template)
		readErr error
		edit    func(*policy.Template, bool) (bool, error)

		wantErr   error  // what the error wraps; nil: success, unless wantMsg
		wantMsg   string // what the error says, where it wraps nothing of its own
		wantEdits int
		wantPuts  int
		want      *policy.Template // what the store holds after; nil: absent
	}{
		{
			name: "conflict, then success on the other writer's version", stored: true, races: 1, theirs: describe, edit: raise,
			wantEdits: 2, wantPuts: 2,
			want: &policy.Template{Name: "lora", Policy: "default", Description: "v2 by terraform", PeakBytes: 4 * size.GiB},
		},
		{
			name: "the other writer's version already says enough", stored: true, races: 1, edit: raise,
			theirs:    func(t *policy.Template) { t.PeakBytes = 8 * size.GiB },
			wantEdits: 2, wantPuts: 1,
			want: &policy.Template{Name: "lora", Policy: "default", Description: "v1", PeakBytes: 8 * size.GiB},
		},
		{
			name: "conflict at every attempt", stored: true, races: 100, theirs: describe, edit: raise,
			wantErr: policy.ErrConflict, wantEdits: 5, wantPuts: 5,
			want: &policy.Template{Name: "lora", Policy: "default", Description: "v2 by terraform", PeakBytes: size.GiB},
		},
		{
			name: "the edit's error", stored: true, edit: func(*policy.Template, bool) (bool, error) { return false, errEdit },
			wantErr: errEdit, wantEdits: 1, want: &stored,
		},
		{
			name: "no change writes nothing", stored: true,
			edit:      func(t *policy.Template, _ bool) (bool, error) { return false, nil },
			wantEdits: 1, want: &stored,
		},
		{
			name: "absent and made by the edit",
			edit: func(t *policy.Template, exists bool) (bool, error) {
				if exists {
					return false, errors.New("told it exists")
				}
				t.Policy, t.PeakBytes = "default", 2*size.GiB
				return true, nil
			},
			wantEdits: 1, wantPuts: 1, want: &policy.Template{Name: "lora", Policy: "default", PeakBytes: 2 * size.GiB},
		},
		{
			name: "absent and left alone", edit: raise,
			wantErr: policy.ErrNotFound, wantEdits: 1,
		},
		{
			name: "the read fails", stored: true, readErr: policy.ErrPermissionDenied, edit: raise,
			wantErr: policy.ErrPermissionDenied, want: &stored,
		},
		{
			name: "a rename is refused", stored: true,
			edit:    func(t *policy.Template, _ bool) (bool, error) { t.Name = "other"; return true, nil },
			wantMsg: `renamed it to "other"`, wantEdits: 1, want: &stored,
		},
	}
	for _, sk := range stores {
		for _, tc := range tests {
			t.Run(sk.kind+"/"+tc.name, func(t *testing.T) {
				ctx := t.Context()
				st := sk.open(t)
				var before policy.Meta
				if tc.stored {
					var err error
					if before, err = st.PutTemplateUnchecked(ctx, stored); err != nil {
						t.Fatal(err)
					}
				}
				m := &meddler{Store: st, t: t, races: tc.races, theirs: tc.theirs, readErr: tc.readErr}
				edits := 0
				err := policy.EditTemplate(ctx, m, "lora", func(tp *policy.Template, exists bool) (bool, error) {
					edits++
					return tc.edit(tp, exists)
				})
				wantErr := tc.wantErr != nil || tc.wantMsg != ""
				switch {
				case !wantErr && err != nil:
					t.Fatalf("error %v, want none", err)
				case wantErr && err == nil:
					t.Fatalf("no error, want one wrapping %v or saying %q", tc.wantErr, tc.wantMsg)
				case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
					t.Errorf("error %v, want one wrapping %v", err, tc.wantErr)
				case err != nil && !strings.Contains(err.Error(), tc.wantMsg):
					t.Errorf("error %q, want one saying %q", err, tc.wantMsg)
				case err != nil && !strings.Contains(err.Error(), `template "lora"`):
					t.Errorf("error %q does not name the template", err)
				}
				var ce *policy.ConflictError
				if errors.Is(tc.wantErr, policy.ErrConflict) && (!errors.As(err, &ce) || !strings.Contains(err.Error(), "5 attempts")) {
					t.Errorf("error %q: want the *ConflictError of the last attempt, and how many were made", err)
				}
				if edits != tc.wantEdits || m.puts != tc.wantPuts {
					t.Errorf("%d edits and %d writes, want %d and %d", edits, m.puts, tc.wantEdits, tc.wantPuts)
				}
				got, after, gerr := st.GetTemplate(ctx, "lora")
				switch {
				case tc.want == nil && !errors.Is(gerr, policy.ErrNotFound):
					t.Errorf("after: %+v, %v; want it absent", got, gerr)
				case tc.want != nil && (gerr != nil || got != *tc.want):
					t.Errorf("after: %+v, %v; want %+v", got, gerr, *tc.want)
				case tc.stored && m.puts == 0 && after.ModifyIndex != before.ModifyIndex:
					t.Errorf("nothing was written, yet the version went from %d to %d", before.ModifyIndex, after.ModifyIndex)
				}
			})
		}
	}
}
