package nomadvars_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
	"github.com/gpufrac/gpufrac/policy/storetest"
)

// A 404 from anything but Nomad's Variables API (a proxy, another server at the address, a
// Nomad without Variables) is an error that names the address and the request, never "not
// found": a provider would drop every object from state, a probe take the path for free, and a
// delete pretend it had deleted.
func TestA404ThatIsNotNomadsIsAnError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NotFound(w, r) // "404 page not found", as Go's and many proxies' muxes answer
	}))
	t.Cleanup(srv.Close)
	addr := srv.URL
	st, err := nomadvars.New(nomadvars.Config{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := storetest.SamplePolicy()
	calls := []struct {
		name, request string
		call          func() error
	}{
		{"GetPolicy", "GET /v1/var/" + policy.PolicyPath(p.Name), func() error { _, _, err := st.GetPolicy(ctx, p.Name); return err }},
		{"GetTemplate", "GET /v1/var/" + policy.TemplatePath("llama"), func() error { _, _, err := st.GetTemplate(ctx, "llama"); return err }},
		{"WaitPolicy", "GET /v1/var/" + policy.PolicyPath(p.Name), func() error { _, _, _, err := st.WaitPolicy(ctx, p.Name, 0); return err }},
		{"PutPolicy", "PUT /v1/var/" + policy.PolicyPath(p.Name), func() error { _, err := st.PutPolicy(ctx, p, 0); return err }},
		{"PutPolicy with cas", "PUT /v1/var/" + policy.PolicyPath(p.Name), func() error { _, err := st.PutPolicy(ctx, p, 7); return err }},
		{"DeletePolicy", "DELETE /v1/var/" + policy.PolicyPath(p.Name), func() error { return st.DeletePolicy(ctx, p.Name, 0) }},
		{"DeleteTemplate with cas", "DELETE /v1/var/" + policy.TemplatePath("llama"), func() error { return st.DeleteTemplate(ctx, "llama", 7) }},
		{"ListTemplates", "GET /v1/vars?prefix=" + policy.TemplatePathPrefix, func() error { _, err := st.ListTemplates(ctx); return err }},
	}
	for _, c := range calls {
		err := c.call()
		switch {
		case err == nil:
			t.Errorf("%s: no error from a server that answers 404 to everything", c.name)
		case errors.Is(err, policy.ErrNotFound):
			t.Errorf("%s: %v: a 404 that is not Nomad's is taken for a missing variable", c.name, err)
		case !errors.Is(err, nomadvars.ErrNoVariablesAPI):
			t.Errorf("%s: %v, want ErrNoVariablesAPI", c.name, err)
		default:
			for _, want := range []string{addr, c.request, `"404 page not found"`} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %q does not say %q", c.name, err, want)
				}
			}
		}
	}
}

// Nomad's own 404 for a missing variable (body "variable not found", the index headers set)
// is "not found", and a blocking read of the absent policy returns the index to block on next.
func TestNomadsVariableNotFoundIsNotFound(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Nomad-Index", "42")
		w.Header().Set("X-Nomad-KnownLeader", "true")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("variable not found")) // Nomad writes it with no newline
	}))
	t.Cleanup(srv.Close)
	st, err := nomadvars.New(nomadvars.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := st.GetPolicy(ctx, "main"); !errors.Is(err, policy.ErrNotFound) {
		t.Errorf("GetPolicy: %v, want ErrNotFound", err)
	}
	if _, _, err := st.GetTemplate(ctx, "llama"); !errors.Is(err, policy.ErrNotFound) {
		t.Errorf("GetTemplate: %v, want ErrNotFound", err)
	}
	if _, _, idx, err := st.WaitPolicy(ctx, "main", 0); !errors.Is(err, policy.ErrNotFound) || idx != 42 {
		t.Errorf("WaitPolicy: index %d, %v; want index 42 and ErrNotFound", idx, err)
	}
}

// The Nomad API client sends every request to the root of its address's host: an address with a
// path (Nomad behind a proxy at /nomad) is refused where it is given, naming it, instead of
// sending requests where something else may answer them.
func TestAnAddressWithAPathIsRefused(t *testing.T) {
	for _, addr := range []string{"http://proxy.example:8080/nomad", "https://proxy.example/nomad/"} {
		_, err := nomadvars.New(nomadvars.Config{Address: addr})
		if err == nil || !strings.Contains(err.Error(), strconv.Quote(addr)) || !strings.Contains(err.Error(), "has a path") {
			t.Errorf("address %s: %v, want an error naming it", addr, err)
		}
	}
	for _, addr := range []string{"http://127.0.0.1:4646", "http://127.0.0.1:4646/", "unix:///run/nomad.sock"} {
		if _, err := nomadvars.New(nomadvars.Config{Address: addr}); err != nil {
			t.Errorf("address %s: %v", addr, err)
		}
	}
}
