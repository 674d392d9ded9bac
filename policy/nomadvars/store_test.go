package nomadvars_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/varserver"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
	"github.com/gpufrac/gpufrac/policy/storetest"
)

// TestContract runs the check-and-set contract every policy.Store keeps against Nomad Variables.
func TestContract(t *testing.T) {
	storetest.Contract(t, func(t *testing.T) policy.Store { s, _ := newNomad(t); return s })
}

func newNomad(t *testing.T) (*nomadvars.Store, *varserver.Server) {
	t.Helper()
	srv := varserver.New(varserver.Options{})
	t.Cleanup(srv.Close)
	st, err := nomadvars.New(nomadvars.Config{Address: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return st, srv
}

func TestOutOfBand(t *testing.T) {
	ctx := context.Background()
	s, srv := newNomad(t)
	good, _ := policy.EncodeTemplate(policy.Template{Name: "ok", PeakBytes: 1})
	srv.Put("", policy.TemplatePath("ok"), good)
	srv.Put("", policy.TemplatePath("broken"), map[string]string{"schema_version": "1", "name": "broken", "policy": "", "peak_bytes": "lots"})
	srv.Put("", policy.TemplatePath("nested/x"), good) // not a template: two segments
	srv.Put("", policy.TemplatePath("copied"), good)   // name item says "ok"
	list, err := s.ListTemplates(ctx)
	if len(list) != 1 || list[0].Name != "ok" {
		t.Fatalf("list = %+v", list)
	}
	if !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), `peak_bytes = "lots"`) || !strings.Contains(err.Error(), "gpufrac/templates/copied") {
		t.Fatalf("list error = %v", err)
	}
	if _, _, err := s.GetTemplate(ctx, "copied"); !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("copied: %v", err)
	}
}

func TestPermissionDenied(t *testing.T) {
	ctx := context.Background()
	srv := varserver.New(varserver.Options{})
	t.Cleanup(srv.Close)
	items, _ := policy.EncodePolicy(storetest.SamplePolicy())
	srv.Put("", policy.PolicyPath(storetest.SamplePolicy().Name), items)
	srv.SetToken("reader", varserver.Rule{Path: "gpufrac/*", Capabilities: []string{"read", "list"}})
	srv.SetToken("nobody")

	dir := t.TempDir()
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte("reader\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reader, err := nomadvars.New(nomadvars.Config{Address: srv.URL(), TokenFile: tokFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := reader.GetPolicy(ctx, storetest.SamplePolicy().Name); err != nil {
		t.Fatalf("reader via token file: %v", err)
	}
	if _, err := reader.PutPolicyUnchecked(ctx, storetest.SamplePolicy()); !errors.Is(err, policy.ErrPermissionDenied) {
		t.Fatalf("reader write: %v", err)
	}
	nobody, _ := nomadvars.New(nomadvars.Config{Address: srv.URL(), Token: "nobody"})
	_, _, err = nobody.GetPolicy(ctx, storetest.SamplePolicy().Name)
	if !errors.Is(err, policy.ErrPermissionDenied) || errors.Is(err, policy.ErrNotFound) {
		t.Fatalf("403 read: %v", err)
	}
	if strings.Contains(err.Error(), "nobody") {
		t.Fatalf("error leaks the token: %v", err)
	}
	if _, err := nobody.ListTemplates(ctx); err != nil {
		t.Fatalf("list without list capability drops entries silently, got %v", err)
	}
	if _, err := nomadvars.New(nomadvars.Config{Address: srv.URL(), TokenFile: filepath.Join(dir, "missing")}); err == nil {
		t.Fatal("missing token file accepted")
	}
}

func TestEnvAndNamespace(t *testing.T) {
	ctx := context.Background()
	srv := varserver.New(varserver.Options{})
	t.Cleanup(srv.Close)
	srv.SetToken("envtok", varserver.Rule{Namespace: "prod", Path: "gpufrac/*", Capabilities: []string{"read", "write"}})
	t.Setenv("NOMAD_ADDR", srv.URL())
	t.Setenv("NOMAD_TOKEN", "envtok")
	t.Setenv("NOMAD_NAMESPACE", "prod")
	s, err := nomadvars.New(nomadvars.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s.String(), "envtok") || !strings.Contains(s.String(), "prod") {
		t.Fatalf("String() = %q", s.String())
	}
	if _, err := s.PutPolicy(ctx, storetest.SamplePolicy(), 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := srv.Get("prod", policy.PolicyPath(storetest.SamplePolicy().Name)); !ok {
		t.Fatal("policy not written to namespace prod")
	}
	if _, err := nomadvars.New(nomadvars.Config{Namespace: "*"}); err == nil {
		t.Fatal("wildcard namespace accepted")
	}
}

func TestUnreachable(t *testing.T) {
	srv := varserver.New(varserver.Options{})
	url := srv.URL()
	srv.Close()
	s, err := nomadvars.New(nomadvars.Config{Address: url})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.GetPolicy(context.Background(), "default")
	if err == nil || errors.Is(err, policy.ErrNotFound) || !strings.Contains(err.Error(), url) {
		t.Fatalf("unreachable: %v", err)
	}
}

// A client certificate is loaded when the client is built, so a wrong path fails there, naming
// the file, rather than on the first request.
func TestClientCertificate(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "client.pem")
	_, err := nomadvars.New(nomadvars.Config{Address: "https://127.0.0.1:1", ClientCert: missing, ClientKey: missing})
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("missing client certificate: %v, want an error naming %s", err, missing)
	}
}
