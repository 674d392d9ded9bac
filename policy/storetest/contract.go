package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// SamplePolicy is a valid policy with every field away from its default.
func SamplePolicy() policy.Policy {
	p := policy.Default()
	p.Name = "gpu-pool_a"
	p.HeadroomBytes = 3*size.GiB + 7
	p.CapMarginPercent = 12.5
	p.Mode = policy.ModeMPS
	p.WatchdogInterval = 250 * time.Millisecond
	p.Unmanaged = policy.UnmanagedStop
	return p
}

// Contract runs the check-and-set contract the Terraform provider relies on against one store:
// every policy.Store must pass it.
func Contract(t *testing.T, newStore func(t *testing.T) policy.Store) {
	t.Helper()
	ctx := context.Background()
	s := newStore(t)
	p := SamplePolicy()

	if _, _, err := s.GetPolicy(ctx, p.Name); !errors.Is(err, policy.ErrNotFound) {
		t.Fatalf("get absent: %v", err)
	}
	m1, err := s.PutPolicy(ctx, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	if m1.ModifyIndex == 0 || m1.CreateIndex != m1.ModifyIndex || m1.ModifyTime.IsZero() {
		t.Fatalf("create meta %+v", m1)
	}
	// Create-only refuses an existing policy and reports its version.
	_, err = s.PutPolicy(ctx, p, 0)
	var ce *policy.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, policy.ErrConflict) || ce.Current.ModifyIndex != m1.ModifyIndex || !ce.Exists() {
		t.Fatalf("second create: %v", err)
	}
	got, gm, err := s.GetPolicy(ctx, p.Name)
	if err != nil || got != p || gm.ModifyIndex != m1.ModifyIndex {
		t.Fatalf("get: %v %+v %+v", err, got, gm)
	}
	// Update with the index from state.
	p.MaxTasksPerGPU = 3
	m2, err := s.PutPolicy(ctx, p, m1.ModifyIndex)
	if err != nil || m2.ModifyIndex <= m1.ModifyIndex || m2.CreateIndex != m1.CreateIndex {
		t.Fatalf("update: %v %+v", err, m2)
	}
	// A stale index is drift: conflict with the current version.
	if _, err := s.PutPolicy(ctx, p, m1.ModifyIndex); !errors.As(err, &ce) || ce.Current.ModifyIndex != m2.ModifyIndex || ce.CAS != m1.ModifyIndex {
		t.Fatalf("stale update: %v", err)
	}
	// Update of something absent conflicts with Exists() false.
	other := p
	other.Name = "other"
	if _, err := s.PutPolicy(ctx, other, 5); !errors.As(err, &ce) || ce.Exists() {
		t.Fatalf("update absent: %v", err)
	}
	m3, err := s.PutPolicyUnchecked(ctx, other)
	if err != nil || m3.ModifyIndex <= m2.ModifyIndex {
		t.Fatalf("unchecked: %v %+v", err, m3)
	}
	if err := s.DeletePolicy(ctx, p.Name, m1.ModifyIndex); !errors.Is(err, policy.ErrConflict) {
		t.Fatalf("stale delete: %v", err)
	}
	if err := s.DeletePolicy(ctx, p.Name, m2.ModifyIndex); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePolicy(ctx, p.Name, 0); err != nil {
		t.Fatalf("idempotent delete: %v", err)
	}
	if _, _, err := s.GetPolicy(ctx, p.Name); !errors.Is(err, policy.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if err := s.DeletePolicy(ctx, "other", 0); err != nil {
		t.Fatal(err)
	}

	// Invalid policies never reach the store; bad names never make a path.
	bad := SamplePolicy()
	bad.UnitBytes = 1
	if _, err := s.PutPolicy(ctx, bad, 0); !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("put invalid: %v", err)
	}
	if _, _, err := s.GetPolicy(ctx, "../x"); !errors.Is(err, policy.ErrInvalid) {
		t.Fatalf("bad name: %v", err)
	}

	// Templates.
	tpls := []policy.Template{{Name: "b", Policy: "default", PeakBytes: 5 * size.GiB}, {Name: "a", CapOverrideBytes: size.GiB, Description: "x"}}
	for _, tp := range tpls {
		if _, err := s.PutTemplate(ctx, tp, 0); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.ListTemplates(ctx)
	if err != nil || len(list) != 2 || list[0] != tpls[1] || list[1] != tpls[0] {
		t.Fatalf("list: %v %+v", err, list)
	}
	gt, tm, err := s.GetTemplate(ctx, "b")
	if err != nil || gt != tpls[0] {
		t.Fatalf("get template: %v %+v", err, gt)
	}
	gt.PeakBytes = 6 * size.GiB
	if _, err := s.PutTemplate(ctx, gt, tm.ModifyIndex); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutTemplate(ctx, gt, tm.ModifyIndex); !errors.Is(err, policy.ErrConflict) {
		t.Fatalf("stale template update: %v", err)
	}
	// A measured SM-active share survives the store, and a template without one reads as unknown.
	sm := 52.2
	gt.SMActivePercent = &sm
	if _, err := s.PutTemplateUnchecked(ctx, gt); err != nil {
		t.Fatal(err)
	}
	if back, _, err := s.GetTemplate(ctx, "b"); err != nil || back.SMActivePercent == nil || *back.SMActivePercent != sm {
		t.Fatalf("template with SM active %g%%: read back %v, %+v", sm, err, back)
	}
	if back, _, err := s.GetTemplate(ctx, "a"); err != nil || back.SMActivePercent != nil {
		t.Fatalf("template never measured: read back %v, SM active %v, want unknown", err, back.SMActivePercent)
	}
	if err := s.DeleteTemplate(ctx, "a", 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetTemplate(ctx, "a"); !errors.Is(err, policy.ErrNotFound) {
		t.Fatalf("template after delete: %v", err)
	}
}
