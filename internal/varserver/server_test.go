package varserver

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func client(t *testing.T, s *Server, token string) *api.Variables {
	t.Helper()
	return s.Client(t, token).Variables()
}

// waitHolds waits until blocking queries have begun to wait n times in all (Server.WaitHolds).
func waitHolds(t *testing.T, s *Server, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := s.WaitHolds(ctx, n); err != nil {
		t.Fatal(err)
	}
}

func newServer(t *testing.T, opts Options) *Server {
	s := New(opts)
	t.Cleanup(s.Close)
	return s
}

func TestCreateReadUpdateDelete(t *testing.T) {
	s := newServer(t, Options{})
	vars := client(t, s, "")

	v, wm, err := vars.CheckedCreate(&api.Variable{Path: "gpufrac/policy/default", Items: api.VariableItems{"a": "1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.CreateIndex == 0 || v.ModifyIndex != v.CreateIndex || wm.LastIndex != v.ModifyIndex || v.Namespace != "default" {
		t.Fatalf("created %+v, write index %d", v, wm.LastIndex)
	}
	if v.CreateTime == 0 || v.Items["a"] != "1" {
		t.Fatalf("created %+v", v)
	}

	// CheckedCreate on an existing path conflicts and carries the current variable.
	_, _, err = vars.CheckedCreate(&api.Variable{Path: "gpufrac/policy/default", Items: api.VariableItems{"a": "2"}}, nil)
	var conflict api.ErrCASConflict
	if !errors.As(err, &conflict) || conflict.Conflict.ModifyIndex != v.ModifyIndex || conflict.Conflict.Items["a"] != "1" {
		t.Fatalf("second CheckedCreate err = %v (%+v)", err, conflict.Conflict)
	}

	got, qm, err := vars.Read("gpufrac/policy/default", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Items["a"] != "1" || qm.LastIndex != v.ModifyIndex || !qm.KnownLeader {
		t.Fatalf("read %+v meta %+v", got, qm)
	}

	// CheckedUpdate with a stale index conflicts; with the current index it succeeds.
	stale := got.Copy()
	stale.ModifyIndex = got.ModifyIndex + 100
	stale.Items = api.VariableItems{"a": "stale"}
	if _, _, err := vars.CheckedUpdate(stale, nil); !errors.As(err, &conflict) || conflict.Conflict.ModifyIndex != got.ModifyIndex {
		t.Fatalf("stale CheckedUpdate err = %v", err)
	}
	got.Items = api.VariableItems{"a": "3"}
	upd, _, err := vars.CheckedUpdate(got, nil)
	if err != nil {
		t.Fatal(err)
	}
	if upd.ModifyIndex <= v.ModifyIndex || upd.CreateIndex != v.CreateIndex || upd.Items["a"] != "3" {
		t.Fatalf("updated %+v", upd)
	}

	// CheckedUpdate of an absent path conflicts with a zero variable naming the path.
	_, _, err = vars.CheckedUpdate(&api.Variable{Path: "gpufrac/none", ModifyIndex: 5, Items: api.VariableItems{"a": "1"}}, nil)
	if !errors.As(err, &conflict) || conflict.Conflict.ModifyIndex != 0 || conflict.Conflict.Path != "gpufrac/none" || conflict.Conflict.Namespace != "default" {
		t.Fatalf("CheckedUpdate absent err = %v (%+v)", err, conflict.Conflict)
	}

	if _, err := vars.CheckedDelete("gpufrac/policy/default", v.ModifyIndex, nil); !errors.As(err, &conflict) {
		t.Fatalf("stale CheckedDelete err = %v", err)
	}
	if _, err := vars.CheckedDelete("gpufrac/policy/default", upd.ModifyIndex, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := vars.Read("gpufrac/policy/default", nil); !errors.Is(err, api.ErrVariablePathNotFound) {
		t.Fatalf("read after delete err = %v", err)
	}
	if _, err := vars.Delete("gpufrac/policy/default", nil); err != nil {
		t.Fatalf("deleting an absent path: %v", err)
	}
}

func TestPermissionDenied(t *testing.T) {
	s := newServer(t, Options{})
	s.Put("", "gpufrac/policy/default", map[string]string{"a": "1"})
	s.SetToken("reader", Rule{Path: "gpufrac/*", Capabilities: []string{CapRead}})
	s.SetToken("lister", Rule{Path: "gpufrac/*", Capabilities: []string{CapList}})

	if _, _, err := client(t, s, "reader").Read("gpufrac/policy/default", nil); err != nil {
		t.Fatalf("reader: %v", err)
	}
	for _, tok := range []string{"lister", "", "unknown"} {
		_, _, err := client(t, s, tok).Read("gpufrac/policy/default", nil)
		var ure api.UnexpectedResponseError
		if !errors.As(err, &ure) || ure.StatusCode() != http.StatusForbidden {
			t.Errorf("token %q: read err = %v, want a 403 error (never not-found)", tok, err)
		}
		if errors.Is(err, api.ErrVariablePathNotFound) {
			t.Errorf("token %q: 403 reported as not found", tok)
		}
		// Peek must not turn 403 into "absent" either.
		if v, _, err := client(t, s, tok).Peek("gpufrac/policy/default", nil); err == nil {
			t.Errorf("token %q: Peek returned %v, nil on 403", tok, v)
		}
	}
	_, _, err := client(t, s, "reader").Create(&api.Variable{Path: "gpufrac/x", Items: api.VariableItems{"a": "1"}}, nil)
	var ure api.UnexpectedResponseError
	if !errors.As(err, &ure) || ure.StatusCode() != http.StatusForbidden || !strings.Contains(ure.Body(), "Permission denied") {
		t.Fatalf("reader write err = %v", err)
	}
}

func TestConflictRedactedWithoutRead(t *testing.T) {
	s := newServer(t, Options{})
	s.Put("", "gpufrac/p", map[string]string{"secret": "x"})
	s.SetToken("writer", Rule{Path: "gpufrac/*", Capabilities: []string{CapWrite}})
	_, _, err := client(t, s, "writer").CheckedCreate(&api.Variable{Path: "gpufrac/p", Items: api.VariableItems{"a": "1"}}, nil)
	var conflict api.ErrCASConflict
	if !errors.As(err, &conflict) || conflict.Conflict.ModifyIndex == 0 || conflict.Conflict.Items != nil {
		t.Fatalf("err = %v conflict %+v: want redacted current variable", err, conflict.Conflict)
	}
}

func TestACLResolution(t *testing.T) {
	rules := []Rule{
		{Path: "*", Capabilities: []string{CapList}},
		{Path: "gpufrac/*", Capabilities: []string{CapRead}},
		{Path: "gpufrac/policy/*", Capabilities: []string{CapWrite}},
		{Path: "gpufrac/secret", Capabilities: []string{CapDeny, CapRead}},
		{Namespace: "team-*", Path: "*", Capabilities: []string{CapDestroy}},
	}
	tests := []struct {
		ns, path string
		want     capSet
	}{
		{"default", "other", capSet{list: true}},
		{"default", "gpufrac/templates/a", capSet{list: true, read: true}},
		{"default", "gpufrac/policy/a", capSet{write: true}}, // closest glob wins; write does not imply read
		{"default", "gpufrac/secret", capSet{}},
		{"team-a", "gpufrac/policy/a", capSet{destroy: true}},
		{"prod", "gpufrac/x", capSet{}},
	}
	for _, tc := range tests {
		if got := resolve(rules, tc.ns, tc.path); got != tc.want {
			t.Errorf("resolve(%s, %s) = %+v, want %+v", tc.ns, tc.path, got, tc.want)
		}
	}
}

func TestBlockingRead(t *testing.T) {
	s := newServer(t, Options{})
	vars := client(t, s, "")
	v := s.Put("", "gpufrac/policy/default", map[string]string{"a": "1"})

	// Times out with the same index when nothing changes.
	start := time.Now()
	_, qm, err := vars.Read("gpufrac/policy/default", &api.QueryOptions{WaitIndex: v.ModifyIndex, WaitTime: 200 * time.Millisecond})
	if err != nil || qm.LastIndex != v.ModifyIndex || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("idle blocking read: err %v index %d after %v", err, qm.LastIndex, time.Since(start))
	}

	// A write elsewhere does not wake a read of an existing variable: its index is its own.
	// A write to it returns early.
	done := make(chan *api.Variable, 1)
	go func() {
		got, _, err := vars.Read("gpufrac/policy/default", &api.QueryOptions{WaitIndex: v.ModifyIndex, WaitTime: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	waitHolds(t, s, 1)
	s.Put("", "gpufrac/templates/other", map[string]string{"b": "1"})
	// The write woke the query; it looked, saw its own index unchanged and waits again. Only
	// after that second wait began can "it did not answer" be told from "it has not looked yet".
	waitHolds(t, s, 2)
	select {
	case got := <-done:
		t.Fatalf("woke on an unrelated write: %+v", got)
	default:
	}
	s.Put("", "gpufrac/policy/default", map[string]string{"a": "2"})
	select {
	case got := <-done:
		if got == nil || got.Items["a"] != "2" {
			t.Fatalf("woke with %+v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("blocking read did not return on change")
	}
}

func TestBlockingReadAbsentUsesTableIndex(t *testing.T) {
	s := newServer(t, Options{})
	vars := client(t, s, "")
	s.Put("", "other", map[string]string{"x": "1"})
	_, qm, err := vars.Peek("gpufrac/policy/default", nil)
	if err != nil {
		t.Fatal(err)
	}
	if qm.LastIndex != s.Index() {
		t.Fatalf("absent read index = %d, want table index %d", qm.LastIndex, s.Index())
	}
	// The write comes only once the read waits past the table index, so the read's answer
	// proves it was woken by it.
	go func() {
		if s.WaitHeldAt(t.Context(), qm.LastIndex) == nil {
			s.Put("", "gpufrac/policy/default", map[string]string{"a": "1"})
		}
	}()
	v, qm2, err := vars.Peek("gpufrac/policy/default", &api.QueryOptions{WaitIndex: qm.LastIndex, WaitTime: 5 * time.Second})
	if err != nil || v == nil || qm2.LastIndex != v.ModifyIndex {
		t.Fatalf("blocking read of a created variable: %v %+v %+v", err, v, qm2)
	}
}

func TestList(t *testing.T) {
	s := newServer(t, Options{})
	s.Put("", "gpufrac/templates/b", map[string]string{"x": "1"})
	s.Put("", "gpufrac/templates/a", map[string]string{"x": "1"})
	s.Put("", "gpufrac/policy/default", map[string]string{"x": "1"})
	s.Put("prod", "gpufrac/templates/c", map[string]string{"x": "1"})
	s.Put("", "other", map[string]string{"x": "1"})
	vars := client(t, s, "")

	paths := func(ms []*api.VariableMetadata) string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Namespace+":"+m.Path)
		}
		return strings.Join(out, ",")
	}
	tests := []struct {
		prefix, ns, want string
	}{
		{"gpufrac/templates/", "", "default:gpufrac/templates/a,default:gpufrac/templates/b"},
		{"gpufrac/templates/", "*", "default:gpufrac/templates/a,default:gpufrac/templates/b,prod:gpufrac/templates/c"},
		{"gpufrac/", "prod", "prod:gpufrac/templates/c"},
		{"nothing", "", ""},
	}
	for _, tc := range tests {
		ms, qm, err := vars.PrefixList(tc.prefix, &api.QueryOptions{Namespace: tc.ns})
		if err != nil {
			t.Fatal(err)
		}
		if got := paths(ms); got != tc.want {
			t.Errorf("list %q in %q = %s, want %s", tc.prefix, tc.ns, got, tc.want)
		}
		if ms == nil || qm.LastIndex != s.Index() {
			t.Errorf("list %q: nil slice or index %d != %d", tc.prefix, qm.LastIndex, s.Index())
		}
	}

	// Pagination.
	ms, qm, err := vars.List(&api.QueryOptions{Namespace: "*", PerPage: 2})
	if err != nil || len(ms) != 2 || qm.NextToken == "" {
		t.Fatalf("page 1: %v %d %q", err, len(ms), qm.NextToken)
	}
	rest, _, err := vars.List(&api.QueryOptions{Namespace: "*", NextToken: qm.NextToken})
	if err != nil || len(rest) != 3 || paths(ms)+","+paths(rest) != "default:gpufrac/policy/default,default:gpufrac/templates/a,default:gpufrac/templates/b,default:other,prod:gpufrac/templates/c" {
		t.Fatalf("pages: %s | %s (%v)", paths(ms), paths(rest), err)
	}

	// Entries the token may not list are dropped silently.
	s.SetToken("t", Rule{Path: "gpufrac/templates/*", Capabilities: []string{CapList}})
	ms, _, err = client(t, s, "t").PrefixList("gpufrac/", nil)
	if err != nil || paths(ms) != "default:gpufrac/templates/a,default:gpufrac/templates/b" {
		t.Fatalf("filtered list: %s (%v)", paths(ms), err)
	}
}

func TestBlockingList(t *testing.T) {
	s := newServer(t, Options{})
	vars := client(t, s, "")
	_, qm, err := vars.PrefixList("gpufrac/templates/", nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if s.WaitHolds(t.Context(), 1) == nil {
			s.Put("", "gpufrac/templates/a", map[string]string{"x": "1"})
		}
	}()
	ms, qm2, err := vars.PrefixList("gpufrac/templates/", &api.QueryOptions{WaitIndex: qm.LastIndex, WaitTime: 5 * time.Second})
	if err != nil || len(ms) != 1 || qm2.LastIndex <= qm.LastIndex {
		t.Fatalf("blocking list: %v %d %d->%d", err, len(ms), qm.LastIndex, qm2.LastIndex)
	}
}

func raw(t *testing.T, s *Server, method, path, body string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestHTTPErrors(t *testing.T) {
	s := newServer(t, Options{})
	big := `{"Items":{"k":"` + strings.Repeat("x", 64*1024) + `"}}`
	tests := []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"empty items", "PUT", "/v1/var/gpufrac/a", `{"Items":{}}`, 400, "variable missing required Items object"},
		{"no items", "PUT", "/v1/var/gpufrac/a", `{}`, 400, "variable missing required Items object"},
		{"too big", "PUT", "/v1/var/gpufrac/a", big, 400, "variables are limited to 64KiB in total size"},
		{"just fits", "PUT", "/v1/var/gpufrac/a", `{"Items":{"k":"` + strings.Repeat("x", 64*1024-1) + `"}}`, 200, `"ModifyIndex"`},
		{"dot in path", "PUT", "/v1/var/gpufrac/a.b", `{"Items":{"k":"v"}}`, 400, "invalid path"},
		{"long path", "PUT", "/v1/var/" + strings.Repeat("a", 129), `{"Items":{"k":"v"}}`, 400, "invalid path"},
		{"nomad alone", "PUT", "/v1/var/nomad", `{"Items":{"k":"v"}}`, 400, "invalid path"},
		{"nomad other", "PUT", "/v1/var/nomad/gpufrac", `{"Items":{"k":"v"}}`, 400, "invalid path"},
		{"nomad jobs", "PUT", "/v1/var/nomad/jobs/x/y", `{"Items":{"k":"v"}}`, 200, ""},
		{"nomad job template", "PUT", "/v1/var/nomad/job-templates/x", `{"Items":{"k":"v"}}`, 200, ""},
		{"nomad job template deep", "PUT", "/v1/var/nomad/job-templates/x/y", `{"Items":{"k":"v"}}`, 400, "invalid path"},
		{"nomad job templates bare", "PUT", "/v1/var/nomad/job-templates", `{"Items":{"k":"v"}}`, 400, "invalid path"},
		{"nomad sentinel", "PUT", "/v1/var/nomad/sentinel/x", `{"Items":{"k":"v"}}`, 200, ""},
		{"missing path", "GET", "/v1/var/", "", 400, "missing variable path"},
		{"absent", "GET", "/v1/var/gpufrac/none", "", 404, "variable not found"},
		{"bad cas", "PUT", "/v1/var/gpufrac/a?cas=x", `{"Items":{"k":"v"}}`, 400, "cas"},
		{"bad index", "GET", "/v1/var/gpufrac/a?index=x", "", 400, "Invalid index"},
		{"bad wait", "GET", "/v1/vars?index=1&wait=soon", "", 400, "Invalid wait time"},
		{"wildcard write", "PUT", "/v1/var/gpufrac/a?namespace=*", `{"Items":{"k":"v"}}`, 400, "wildcard"},
		{"list wrong method", "PUT", "/v1/vars", "", 405, ""},
		{"lock", "PUT", "/v1/var/gpufrac/a?lock-acquire", `{"Items":{"k":"v"}}`, 400, "locks"},
		{"bad json", "PUT", "/v1/var/gpufrac/a", `{`, 400, "failed to parse"},
		{"delete", "DELETE", "/v1/var/gpufrac/zzz", "", 204, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body, _ := raw(t, s, tc.method, tc.path, tc.body)
			if status != tc.status || !strings.Contains(body, tc.want) {
				t.Fatalf("%s %s = %d %q, want %d containing %q", tc.method, tc.path, status, body, tc.status, tc.want)
			}
		})
	}
}

func TestBodyNamespaceWinsAndBearer(t *testing.T) {
	s := newServer(t, Options{})
	s.SetToken("w", Rule{Namespace: "prod", Path: "*", Capabilities: []string{CapWrite, CapRead}})
	status, body, hdr := raw(t, s, "PUT", "/v1/var/gpufrac/a?namespace=dev", `{"Namespace":"prod","Items":{"k":"v"}}`, "Authorization", "Bearer w")
	if status != 200 || hdr.Get("X-Nomad-Index") == "" {
		t.Fatalf("PUT = %d %s", status, body)
	}
	if _, ok := s.Get("prod", "gpufrac/a"); !ok {
		t.Fatal("body namespace did not win")
	}
	if status, _, _ := raw(t, s, "GET", "/v1/var/gpufrac/a?namespace=prod", "", "X-Nomad-Token", "w"); status != 200 {
		t.Fatalf("GET with X-Nomad-Token = %d", status)
	}
}

func TestFailAndCount(t *testing.T) {
	s := newServer(t, Options{})
	vars := client(t, s, "")
	s.Fail(http.StatusInternalServerError, 2)
	for i := range 2 {
		var ure api.UnexpectedResponseError
		if _, _, err := vars.Peek("gpufrac/a", nil); !errors.As(err, &ure) || ure.StatusCode() != 500 {
			t.Fatalf("request %d: err = %v, want injected 500", i, err)
		}
	}
	if _, _, err := vars.Peek("gpufrac/a", nil); err != nil {
		t.Fatalf("after the injected failures: %v", err)
	}
	if n := s.Requests(); n != 3 {
		t.Fatalf("Requests() = %d, want 3", n)
	}
	log := s.RequestLog()
	if len(log) != 3 || log[0].Status != 500 || log[2].Status != 404 || log[2].Path != "/v1/var/gpufrac/a" {
		t.Fatalf("log = %+v", log)
	}
}

func TestDownAndRestart(t *testing.T) {
	s := newServer(t, Options{})
	vars := client(t, s, "")
	v := s.Put("", "gpufrac/a", map[string]string{"k": "v"})

	errc := make(chan error, 1)
	go func() {
		_, _, err := vars.Read("gpufrac/a", &api.QueryOptions{WaitIndex: v.ModifyIndex, WaitTime: 10 * time.Second})
		errc <- err
	}()
	waitHolds(t, s, 1) // the restart must end a read that is waiting, not one still on its way
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("blocking read survived a restart without error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("restart did not end the blocking read")
	}
	got, _, err := vars.Read("gpufrac/a", nil)
	if err != nil || got.ModifyIndex != v.ModifyIndex {
		t.Fatalf("after restart: %v %+v", err, got)
	}

	s.SetDown(true)
	if _, _, err := vars.Read("gpufrac/a", nil); err == nil {
		t.Fatal("read succeeded while down")
	}
	s.SetDown(false)
	if _, _, err := vars.Read("gpufrac/a", nil); err != nil {
		t.Fatalf("read after coming back: %v", err)
	}
}

func TestGlob(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "a/b", true},
		{"gpufrac/*", "gpufrac/policy/x", true},
		{"gpufrac/*", "gpufrac", false},
		{"gpufrac/*/x", "gpufrac/policy/x", true},
		{"gpufrac/*/x", "gpufrac/policy/y", false},
		{"*/policy/*", "gpufrac/policy/default", true},
		{"a*b*c", "abc", true},
		{"a*b*c", "acb", false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
	}
	for _, tc := range tests {
		if got := glob(tc.pattern, tc.s); got != tc.want {
			t.Errorf("glob(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

func TestTokensAndHelpers(t *testing.T) {
	s := newServer(t, Options{ACL: true})
	vars := func(tok string) *api.Variables { return client(t, s, tok) }
	// ACL on without tokens: the anonymous caller may do nothing and lists nothing.
	if _, _, err := vars("").Peek("a", nil); err == nil {
		t.Fatal("anonymous read allowed with ACL on")
	}
	s.SetToken("root", Management()...)
	if _, _, err := vars("root").Create(&api.Variable{Namespace: "x", Path: "a", Items: api.VariableItems{"k": "v"}}, nil); err != nil {
		t.Fatal(err)
	}
	s.RemoveToken("root")
	_, _, err := vars("root").Peek("a", &api.QueryOptions{Namespace: "x"})
	var ure api.UnexpectedResponseError
	if !errors.As(err, &ure) || ure.StatusCode() != 403 || !strings.Contains(ure.Body(), "ACL token not found") {
		t.Fatalf("removed token: %v", err)
	}

	v := s.Put("x", "b", map[string]string{"k": "v"})
	if all := s.List(); len(all) != 2 || all[0].Path != "a" || all[1].Items["k"] != "v" {
		t.Fatalf("List() = %+v", all)
	}
	// Unrelated raft writes move the global index but neither a variable's nor the table's.
	before := s.Index()
	if got := s.Bump(); got != before+1 {
		t.Fatalf("Bump = %d after %d", got, before)
	}
	s.SetToken("root", Management()...)
	got, qm, err := vars("root").Read("b", &api.QueryOptions{Namespace: "x"})
	if err != nil || qm.LastIndex != v.ModifyIndex || got.ModifyIndex != v.ModifyIndex {
		t.Fatalf("read after Bump: %v index %d want %d", err, qm.LastIndex, v.ModifyIndex)
	}
	_, qm, err = vars("root").List(&api.QueryOptions{Namespace: "*"})
	if err != nil || qm.LastIndex != v.ModifyIndex {
		t.Fatalf("list after Bump: %v index %d want table index %d", err, qm.LastIndex, v.ModifyIndex)
	}
	if !s.Delete("x", "b") || s.Delete("x", "b") {
		t.Fatal("Delete should report true then false")
	}
	if _, ok := s.Get("x", "b"); ok {
		t.Fatal("Get after Delete")
	}
}
