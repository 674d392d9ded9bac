package probe

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

func TestEarned(t *testing.T) {
	p := policy.Default()
	fp := Earned(p, 10*size.GiB)
	if fp.Peak != 10*size.GiB || fp.Cap != p.Cap(10*size.GiB) || fp.Units != p.Units(fp.Cap) {
		t.Fatalf("Earned = %+v, want the policy's cap %s and its %d units", fp, p.Cap(10*size.GiB), p.Units(p.Cap(10*size.GiB)))
	}
}

func TestStoreTemplate(t *testing.T) {
	ctx := t.Context()
	st := policy.NewFileStore(filepath.Join(t.TempDir(), "policy.json"), policy.FileOptions{})

	if err := StoreTemplate(ctx, st, "fresh", "pool", 3*size.GiB, nil); err != nil {
		t.Fatal(err)
	}
	got, _, err := st.GetTemplate(ctx, "fresh")
	if err != nil {
		t.Fatal(err)
	}
	if got.PeakBytes != 3*size.GiB || got.Policy != "pool" || got.Description != "measured by gpufrac probe" || got.SMActivePercent != nil {
		t.Errorf("a new template: %+v", got)
	}

	// What a person wrote stays; only the peak is the new measurement's.
	kept := policy.Template{Name: "kept", Policy: "other", Description: "by hand", PeakBytes: size.GiB, CapOverrideBytes: 9 * size.GiB}
	if _, err := st.PutTemplateUnchecked(ctx, kept); err != nil {
		t.Fatal(err)
	}
	if err := StoreTemplate(ctx, st, "kept", "pool", 5*size.GiB, nil); err != nil {
		t.Fatal(err)
	}
	got, _, err = st.GetTemplate(ctx, "kept")
	if err != nil {
		t.Fatal(err)
	}
	kept.PeakBytes = 5 * size.GiB
	if got != kept {
		t.Errorf("an existing template became %+v, want %+v", got, kept)
	}

	// A measured SM share is stored; a later probe that measured none keeps it.
	sm := 57.1
	for i, give := range []*float64{&sm, nil} {
		if err := StoreTemplate(ctx, st, "kept", "pool", 6*size.GiB, give); err != nil {
			t.Fatal(err)
		}
		got, _, err = st.GetTemplate(ctx, "kept")
		if err != nil || got.SMActivePercent == nil || *got.SMActivePercent != sm || got.PeakBytes != 6*size.GiB {
			t.Errorf("store %d: %+v, %v; want SM active %g%%", i, got, err, sm)
		}
	}

	// The same figures again are not written: the version stays.
	_, before, err := st.GetTemplate(ctx, "kept")
	if err != nil {
		t.Fatal(err)
	}
	if err := StoreTemplate(ctx, st, "kept", "pool", 6*size.GiB, &sm); err != nil {
		t.Fatal(err)
	}
	if _, after, err := st.GetTemplate(ctx, "kept"); err != nil || after.ModifyIndex != before.ModifyIndex {
		t.Errorf("storing the same figures again: version %d -> %d, %v; want it unchanged", before.ModifyIndex, after.ModifyIndex, err)
	}

	if err := StoreTemplate(ctx, st, "gpu.pool", "pool", size.GiB, nil); !errors.Is(err, policy.ErrInvalid) {
		t.Errorf("a name the store refuses: error %v, want one wrapping policy.ErrInvalid", err)
	}
}

// racingStore writes over the template once, between StoreTemplate's read and its write, as a
// terraform apply running at the same moment would.
type racingStore struct {
	policy.Store
	race func()
}

func (r *racingStore) PutTemplate(ctx context.Context, t policy.Template, cas uint64) (policy.Meta, error) {
	if r.race != nil {
		r.race()
		r.race = nil
	}
	return r.Store.PutTemplate(ctx, t, cas)
}

func (r *racingStore) PutTemplateUnchecked(ctx context.Context, t policy.Template) (policy.Meta, error) {
	if r.race != nil {
		r.race()
		r.race = nil
	}
	return r.Store.PutTemplateUnchecked(ctx, t)
}

// A change someone else makes between the probe's read and its write survives the write, and
// the probe's measurement lands on top of it.
func TestStoreTemplateKeepsAConcurrentWrite(t *testing.T) {
	ctx := t.Context()
	for _, exists := range []bool{true, false} {
		t.Run(map[bool]string{true: "existing", false: "absent"}[exists], func(t *testing.T) {
			st := policy.NewFileStore(filepath.Join(t.TempDir(), "policy.json"), policy.FileOptions{})
			before := policy.Template{Name: "llama", Policy: "main", Description: "v1", PeakBytes: size.GiB}
			if exists {
				if _, err := st.PutTemplateUnchecked(ctx, before); err != nil {
					t.Fatal(err)
				}
			}
			theirs := before
			theirs.Description, theirs.CapOverrideBytes = "v2 by terraform", 9*size.GiB
			rs := &racingStore{Store: st, race: func() {
				if _, err := st.PutTemplateUnchecked(ctx, theirs); err != nil {
					t.Fatal(err)
				}
			}}
			if err := StoreTemplate(ctx, rs, "llama", "pool", 4*size.GiB, nil); err != nil {
				t.Fatal(err)
			}
			got, _, err := st.GetTemplate(ctx, "llama")
			if err != nil {
				t.Fatal(err)
			}
			want := theirs
			want.PeakBytes = 4 * size.GiB
			if got != want {
				t.Errorf("template after a concurrent write = %+v, want %+v (the other writer's change with the probe's peak)", got, want)
			}
		})
	}
}
