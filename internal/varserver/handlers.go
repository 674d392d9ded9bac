package varserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// maxItemsBytes is Nomad's fixed limit: the sum of len(key)+len(value) over all items.
const maxItemsBytes = 64 * 1024

var pathRE = regexp.MustCompile(`^[a-zA-Z0-9_~/-]{1,128}$`)

// validPath applies Nomad's path regex and its rules for the reserved nomad/ root.
func validPath(p string) bool {
	if !pathRE.MatchString(p) {
		return false
	}
	if p == "nomad" {
		return false
	}
	rest, ok := strings.CutPrefix(p, "nomad/")
	if !ok {
		return true
	}
	switch {
	case rest == "jobs" || strings.HasPrefix(rest, "jobs/"):
		return true
	case strings.HasPrefix(rest, "sentinel/"):
		return true
	case strings.HasPrefix(rest, "job-templates/"):
		seg := strings.TrimPrefix(rest, "job-templates/")
		return seg != "" && !strings.Contains(seg, "/")
	}
	return false
}

type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (s *Server) handler(closing chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w}
		s.serve(rec, r, closing)
		s.mu.Lock()
		s.total++
		if len(s.log) >= 10000 {
			s.log = s.log[1:]
		}
		s.log = append(s.log, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Status: rec.status})
		s.mu.Unlock()
	})
}

// drop closes the connection without a response, as an unreachable server would look.
func drop(w http.ResponseWriter) {
	if rec, ok := w.(*recorder); ok {
		w = rec.ResponseWriter
	}
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, closing chan struct{}) {
	s.mu.Lock()
	down := s.down
	failStatus := 0
	if !down && s.failLeft > 0 {
		s.failLeft--
		failStatus = s.failStatus
	}
	s.mu.Unlock()
	if down {
		drop(w)
		return
	}
	if failStatus != 0 {
		http.Error(w, "injected failure", failStatus)
		return
	}
	if s.serveJobs(w, r, closing) {
		return
	}
	switch {
	case r.URL.Path == "/v1/vars":
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", "GET")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		s.list(w, r, closing)
	case r.URL.Path == "/v1/var" || strings.HasPrefix(r.URL.Path, "/v1/var/"):
		p := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/v1/var"), "/")
		switch r.Method {
		case http.MethodGet:
			s.read(w, r, p, closing)
		case http.MethodPut, http.MethodPost:
			s.write(w, r, p)
		case http.MethodDelete:
			s.remove(w, r, p)
		default:
			w.Header().Set("Allow", "GET, PUT, POST, DELETE")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	default:
		http.Error(w, "Invalid URL path: varserver serves only /v1/var/ and /v1/vars", http.StatusNotFound)
	}
}

// rules returns the caller's rules, or ok=false after answering 403. all=true means ACLs are off.
func (s *Server) rules(w http.ResponseWriter, r *http.Request) (rules []Rule, all, ok bool) {
	tok := r.Header.Get("X-Nomad-Token")
	if tok == "" {
		if b, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found {
			tok = strings.TrimSpace(b)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.acl {
		return nil, true, true
	}
	if tok == "" {
		return nil, false, true // anonymous: no rules
	}
	rs, found := s.tokens[tok]
	if !found {
		http.Error(w, "ACL token not found", http.StatusForbidden)
		return nil, false, false
	}
	return rs, false, true
}

func can(rules []Rule, all bool, ns, path string) capSet {
	if all {
		return capSet{true, true, true, true}
	}
	return resolve(rules, ns, path)
}

func denied(w http.ResponseWriter) { http.Error(w, "Permission denied", http.StatusForbidden) }

// blocking parses ?index= and ?wait=: wait bounds how long to hold a query whose index has not
// passed minIndex. Without an index the query answers at once.
func (s *Server) blocking(w http.ResponseWriter, r *http.Request) (minIndex uint64, wait time.Duration, ok bool) {
	q := r.URL.Query()
	if v := q.Get("index"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			http.Error(w, "Invalid index", http.StatusBadRequest)
			return 0, 0, false
		}
		minIndex = n
	}
	wait = s.opts.MaxWait
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			http.Error(w, "Invalid wait time", http.StatusBadRequest)
			return 0, 0, false
		}
		wait = min(d, s.opts.MaxWait)
	}
	return minIndex, wait, true
}

// hold runs query (under the lock) until its index passes minIndex or wait runs out, then
// lets it answer. query returns the response index and a function that writes the answer.
func (s *Server) hold(w http.ResponseWriter, r *http.Request, closing chan struct{},
	minIndex uint64, wait time.Duration, query func() (uint64, func())) {
	deadline := time.Now().Add(wait)
	for {
		s.mu.Lock()
		down, changed := s.down, s.changed
		idx, answer := query()
		left := time.Until(deadline)
		wait := !down && minIndex != 0 && idx <= minIndex && left > 0
		if wait {
			// Counted under the lock that read changed, so a write seen as counted wakes it.
			s.holds++
			s.heldAt = max(s.heldAt, minIndex)
			close(s.heldChanged)
			s.heldChanged = make(chan struct{})
		}
		s.mu.Unlock()
		if down {
			drop(w)
			return
		}
		if !wait {
			answer()
			return
		}
		t := time.NewTimer(left)
		select {
		case <-changed:
		case <-t.C:
		case <-closing:
			t.Stop()
			drop(w)
			return
		case <-r.Context().Done():
			t.Stop()
			return
		}
		t.Stop()
	}
}

func queryHeaders(w http.ResponseWriter, index uint64) {
	h := w.Header()
	h.Set("X-Nomad-Index", strconv.FormatUint(index, 10))
	h.Set("X-Nomad-KnownLeader", "true")
	h.Set("X-Nomad-LastContact", "0")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func namespaceParam(r *http.Request) string { return nsOrDefault(r.URL.Query().Get("namespace")) }

func (s *Server) read(w http.ResponseWriter, r *http.Request, path string, closing chan struct{}) {
	if path == "" {
		http.Error(w, "missing variable path", http.StatusBadRequest)
		return
	}
	rules, all, ok := s.rules(w, r)
	if !ok {
		return
	}
	ns := namespaceParam(r)
	if !can(rules, all, ns, path).read {
		denied(w)
		return
	}
	minIndex, wait, ok := s.blocking(w, r)
	if !ok {
		return
	}
	s.hold(w, r, closing, minIndex, wait, func() (uint64, func()) {
		v, found := s.vars[key{ns, path}]
		if !found {
			idx := s.tableIndex
			return idx, func() {
				queryHeaders(w, idx)
				http.Error(w, "variable not found", http.StatusNotFound)
			}
		}
		c := v.clone()
		return c.ModifyIndex, func() {
			queryHeaders(w, c.ModifyIndex)
			writeJSON(w, http.StatusOK, c)
		}
	})
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, closing chan struct{}) {
	q := r.URL.Query()
	if q.Get("filter") != "" {
		http.Error(w, "varserver does not implement filter expressions", http.StatusBadRequest)
		return
	}
	perPage := 0
	if v := q.Get("per_page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			http.Error(w, fmt.Sprintf("Invalid per_page %q", v), http.StatusBadRequest)
			return
		}
		perPage = n
	}
	rules, all, ok := s.rules(w, r)
	if !ok {
		return
	}
	ns, prefix, next := namespaceParam(r), q.Get("prefix"), q.Get("next_token")
	minIndex, wait, ok := s.blocking(w, r)
	if !ok {
		return
	}
	s.hold(w, r, closing, minIndex, wait, func() (uint64, func()) {
		out := []Variable{} // an empty list is [], never null
		for k, v := range s.vars {
			if (ns != "*" && k.ns != ns) || !strings.HasPrefix(k.path, prefix) {
				continue
			}
			if !can(rules, all, k.ns, k.path).list {
				continue // Nomad drops what the token may not list, silently
			}
			m := v.clone()
			m.Items = nil
			out = append(out, m)
		}
		sort.Slice(out, func(i, j int) bool { return less(&out[i], &out[j]) })
		if next != "" {
			i := sort.Search(len(out), func(i int) bool { return pageToken(&out[i]) >= next })
			out = out[i:]
		}
		nextToken := ""
		if perPage > 0 && len(out) > perPage {
			nextToken = pageToken(&out[perPage])
			out = out[:perPage]
		}
		idx := s.tableIndex
		return idx, func() {
			queryHeaders(w, idx)
			if nextToken != "" {
				w.Header().Set("X-Nomad-NextToken", nextToken)
			}
			writeJSON(w, http.StatusOK, out)
		}
	})
}

// pageToken sorts like less: '.' never appears in a path, so it separates the parts.
func pageToken(v *Variable) string { return v.Namespace + "." + v.Path }

type writeBody struct {
	Namespace string
	Path      string
	Items     map[string]string
	Lock      json.RawMessage
}

func (s *Server) write(w http.ResponseWriter, r *http.Request, path string) {
	q := r.URL.Query()
	for _, op := range []string{"lock-acquire", "lock-renew", "lock-release"} {
		if q.Has(op) {
			http.Error(w, "varserver does not implement variable locks", http.StatusBadRequest)
			return
		}
	}
	if path == "" {
		http.Error(w, "missing variable path", http.StatusBadRequest)
		return
	}
	var body writeBody
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, "failed to parse request: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(body.Lock) > 0 && string(body.Lock) != "null" {
		http.Error(w, "lock information is only allowed with lock operations", http.StatusBadRequest)
		return
	}
	if len(body.Items) == 0 {
		http.Error(w, "variable missing required Items object", http.StatusBadRequest)
		return
	}
	ns := body.Namespace // the body's namespace wins over the query parameter on writes
	if ns == "" {
		ns = namespaceParam(r)
	}
	caps, cas, hasCAS, ok := s.changeAllowed(w, r, ns, path, "writes", func(c capSet) bool { return c.write })
	if !ok {
		return
	}
	if !validPath(path) {
		http.Error(w, fmt.Sprintf("invalid path %q", path), http.StatusBadRequest)
		return
	}
	n := 0
	for k, v := range body.Items {
		n += len(k) + len(v)
	}
	if n > maxItemsBytes {
		http.Error(w, "variables are limited to 64KiB in total size", http.StatusBadRequest)
		return
	}
	if !s.lockUnlessConflict(w, ns, path, cas, hasCAS, caps.read) {
		return
	}
	v := s.putLocked(ns, path, body.Items).clone()
	s.mu.Unlock()
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(v.ModifyIndex, 10))
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request, path string) {
	if path == "" {
		http.Error(w, "missing variable path", http.StatusBadRequest)
		return
	}
	ns := namespaceParam(r) // a delete has no body, so only the query names the namespace
	caps, cas, hasCAS, ok := s.changeAllowed(w, r, ns, path, "deletes", func(c capSet) bool { return c.destroy })
	if !ok {
		return
	}
	if !s.lockUnlessConflict(w, ns, path, cas, hasCAS, caps.read) {
		return
	}
	s.deleteLocked(ns, path)
	idx := s.index
	s.mu.Unlock()
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(idx, 10))
	w.WriteHeader(http.StatusNoContent)
}

// changeCaps is what the request's token may do with the variable ns/path, for a change (what:
// "writes" or "deletes"), which must name one namespace; when it is false, the request has been
// answered (a bad token, a wildcard namespace).
// changeAllowed checks what every change of path needs, a well-formed cas parameter (hasCAS:
// there is one) and the capability allowed picks from the caller's; when one fails it has
// answered the request.
func (s *Server) changeAllowed(w http.ResponseWriter, r *http.Request, ns, path, what string, allowed func(capSet) bool) (caps capSet, cas uint64, hasCAS, ok bool) {
	if cas, hasCAS, ok = casParam(w, r); !ok {
		return capSet{}, 0, false, false
	}
	if caps, ok = s.changeCaps(w, r, ns, path, what); !ok {
		return capSet{}, 0, false, false
	}
	if !allowed(caps) {
		denied(w)
		return capSet{}, 0, false, false
	}
	return caps, cas, hasCAS, true
}

func (s *Server) changeCaps(w http.ResponseWriter, r *http.Request, ns, path, what string) (capSet, bool) {
	rules, all, ok := s.rules(w, r)
	if !ok {
		return capSet{}, false
	}
	if ns == "*" {
		http.Error(w, "wildcard namespace not allowed for "+what, http.StatusBadRequest)
		return capSet{}, false
	}
	return can(rules, all, ns, path), true
}

// writeConflict refuses a write whose check-and-set index is not the variable's, as Nomad does:
// 409 with the variable as it is (conflict, cut to what the caller may read) and its index.
func writeConflict(w http.ResponseWriter, conflict Variable) {
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(conflict.ModifyIndex, 10))
	writeJSON(w, http.StatusConflict, conflict)
}

func casParam(w http.ResponseWriter, r *http.Request) (uint64, bool, bool) {
	q := r.URL.Query()
	if !q.Has("cas") {
		return 0, false, true
	}
	n, err := strconv.ParseUint(q.Get("cas"), 10, 64)
	if err != nil {
		http.Error(w, fmt.Sprintf("failed to parse cas index %q: %v", q.Get("cas"), err), http.StatusBadRequest)
		return 0, false, false
	}
	return n, true, true
}

// lockUnlessConflict takes s.mu for a change of path; when the request's check-and-set index
// (hasCAS) conflicts, it answers with the conflict instead, releases the lock and says false.
func (s *Server) lockUnlessConflict(w http.ResponseWriter, ns, path string, cas uint64, hasCAS, canRead bool) bool {
	s.mu.Lock()
	if hasCAS {
		if conflict, bad := s.casConflictLocked(ns, path, cas, canRead); bad {
			s.mu.Unlock()
			writeConflict(w, conflict)
			return false
		}
	}
	return true
}

// casConflictLocked applies Nomad's check-and-set rule: cas=0 means "must not exist", cas=N
// means "must exist at ModifyIndex N". The conflict is the current variable, or a zero one
// naming only Namespace and Path when absent; Items are redacted without read access.
func (s *Server) casConflictLocked(ns, path string, cas uint64, canRead bool) (Variable, bool) {
	cur, exists := s.vars[key{ns, path}]
	switch {
	case !exists && cas == 0:
		return Variable{}, false
	case !exists:
		return Variable{Namespace: ns, Path: path}, true
	case cur.ModifyIndex == cas:
		return Variable{}, false
	}
	c := cur.clone()
	if !canRead {
		c.Items = nil
	}
	return c, true
}
