package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/gpufrac/gpufrac/size"
)

type storeCase struct {
	name string
	new  func(t *testing.T) Store
}

func storeCases() []storeCase {
	return []storeCase{
		{"nomad", func(t *testing.T) Store { s, _ := newNomad(t); return s }},
		{"file", func(t *testing.T) Store {
			return NewFileStore(filepath.Join(t.TempDir(), "policy.json"), FileOptions{})
		}},
	}
}

func newNomad(t *testing.T) (*NomadStore, *varserver.Server) {
	t.Helper()
	srv := varserver.New(varserver.Options{})
	t.Cleanup(srv.Close)
	st, err := NewNomadStore(Config{Address: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return st, srv
}

// TestStoreContract runs the CAS contract the Terraform provider relies on against both stores.
func TestStoreContract(t *testing.T) {
	ctx := context.Background()
	for _, sc := range storeCases() {
		t.Run(sc.name, func(t *testing.T) {
			s := sc.new(t)
			p := samplePolicy()

			if _, _, err := s.GetPolicy(ctx, p.Name); !errors.Is(err, ErrNotFound) {
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
			var ce *ConflictError
			if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) || ce.Current.ModifyIndex != m1.ModifyIndex || !ce.Exists() {
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
			if err := s.DeletePolicy(ctx, p.Name, m1.ModifyIndex); !errors.Is(err, ErrConflict) {
				t.Fatalf("stale delete: %v", err)
			}
			if err := s.DeletePolicy(ctx, p.Name, m2.ModifyIndex); err != nil {
				t.Fatal(err)
			}
			if err := s.DeletePolicy(ctx, p.Name, 0); err != nil {
				t.Fatalf("idempotent delete: %v", err)
			}
			if _, _, err := s.GetPolicy(ctx, p.Name); !errors.Is(err, ErrNotFound) {
				t.Fatalf("get after delete: %v", err)
			}
			if err := s.DeletePolicy(ctx, "other", 0); err != nil {
				t.Fatal(err)
			}

			// Invalid policies never reach the store; bad names never make a path.
			bad := samplePolicy()
			bad.UnitBytes = 1
			if _, err := s.PutPolicy(ctx, bad, 0); !errors.Is(err, ErrInvalid) {
				t.Fatalf("put invalid: %v", err)
			}
			if _, _, err := s.GetPolicy(ctx, "../x"); !errors.Is(err, ErrInvalid) {
				t.Fatalf("bad name: %v", err)
			}

			// Templates.
			tpls := []Template{{Name: "b", Policy: "default", PeakBytes: 5 * size.GiB}, {Name: "a", CapOverrideBytes: size.GiB, Description: "x"}}
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
			if _, err := s.PutTemplate(ctx, gt, tm.ModifyIndex); !errors.Is(err, ErrConflict) {
				t.Fatalf("stale template update: %v", err)
			}
			if _, err := s.PutTemplateUnchecked(ctx, gt); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteTemplate(ctx, "a", 0); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.GetTemplate(ctx, "a"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("template after delete: %v", err)
			}
		})
	}
}

func TestNomadStoreOutOfBand(t *testing.T) {
	ctx := context.Background()
	s, srv := newNomad(t)
	good, _ := EncodeTemplate(Template{Name: "ok", PeakBytes: 1})
	srv.Put("", TemplatePath("ok"), good)
	srv.Put("", TemplatePath("broken"), map[string]string{"schema_version": "1", "name": "broken", "policy": "", "peak_bytes": "lots"})
	srv.Put("", TemplatePath("nested/x"), good) // not a template: two segments
	srv.Put("", TemplatePath("copied"), good)   // name item says "ok"
	list, err := s.ListTemplates(ctx)
	if len(list) != 1 || list[0].Name != "ok" {
		t.Fatalf("list = %+v", list)
	}
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `peak_bytes = "lots"`) || !strings.Contains(err.Error(), "gpufrac/templates/copied") {
		t.Fatalf("list error = %v", err)
	}
	if _, _, err := s.GetTemplate(ctx, "copied"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("copied: %v", err)
	}
}

func TestNomadStorePermissionDenied(t *testing.T) {
	ctx := context.Background()
	srv := varserver.New(varserver.Options{})
	t.Cleanup(srv.Close)
	items, _ := EncodePolicy(samplePolicy())
	srv.Put("", PolicyPath(samplePolicy().Name), items)
	srv.SetToken("reader", varserver.Rule{Path: "gpufrac/*", Capabilities: []string{"read", "list"}})
	srv.SetToken("nobody")

	dir := t.TempDir()
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte("reader\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reader, err := NewNomadStore(Config{Address: srv.URL(), TokenFile: tokFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := reader.GetPolicy(ctx, samplePolicy().Name); err != nil {
		t.Fatalf("reader via token file: %v", err)
	}
	if _, err := reader.PutPolicyUnchecked(ctx, samplePolicy()); !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("reader write: %v", err)
	}
	nobody, _ := NewNomadStore(Config{Address: srv.URL(), Token: "nobody"})
	_, _, err = nobody.GetPolicy(ctx, samplePolicy().Name)
	if !errors.Is(err, ErrPermissionDenied) || errors.Is(err, ErrNotFound) {
		t.Fatalf("403 read: %v", err)
	}
	if strings.Contains(err.Error(), "nobody") {
		t.Fatalf("error leaks the token: %v", err)
	}
	if _, err := nobody.ListTemplates(ctx); err != nil {
		t.Fatalf("list without list capability drops entries silently, got %v", err)
	}
	if _, err := NewNomadStore(Config{Address: srv.URL(), TokenFile: filepath.Join(dir, "missing")}); err == nil {
		t.Fatal("missing token file accepted")
	}
}

func TestNomadStoreEnvAndNamespace(t *testing.T) {
	ctx := context.Background()
	srv := varserver.New(varserver.Options{})
	t.Cleanup(srv.Close)
	srv.SetToken("envtok", varserver.Rule{Namespace: "prod", Path: "gpufrac/*", Capabilities: []string{"read", "write"}})
	t.Setenv("NOMAD_ADDR", srv.URL())
	t.Setenv("NOMAD_TOKEN", "envtok")
	t.Setenv("NOMAD_NAMESPACE", "prod")
	s, err := NewNomadStore(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s.String(), "envtok") || !strings.Contains(s.String(), "prod") {
		t.Fatalf("String() = %q", s.String())
	}
	if _, err := s.PutPolicy(ctx, samplePolicy(), 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := srv.Get("prod", PolicyPath(samplePolicy().Name)); !ok {
		t.Fatal("policy not written to namespace prod")
	}
	if _, err := NewNomadStore(Config{Namespace: "*"}); err == nil {
		t.Fatal("wildcard namespace accepted")
	}
}

func TestNomadStoreUnreachable(t *testing.T) {
	srv := varserver.New(varserver.Options{})
	url := srv.URL()
	srv.Close()
	s, err := NewNomadStore(Config{Address: url})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.GetPolicy(context.Background(), "default")
	if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), url) {
		t.Fatalf("unreachable: %v", err)
	}
}
