package varserver

import (
	"net/http"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// CapAllocLifecycle lets a token stop (and restart, signal) allocations in a namespace, as in
// Nomad's namespace rules; submit-job does not include it.
const CapAllocLifecycle = "alloc-lifecycle"

// allocLifecycle says whether the caller may stop allocations in ns.
func allocLifecycle(rules []Rule, all bool, ns string) bool {
	if all {
		return true
	}
	ok := false
	for _, c := range jobRuleCaps(rules, ns) {
		switch c {
		case CapDeny:
			return false
		case CapAllocLifecycle:
			ok = true
		}
	}
	return ok
}

// stopAlloc serves PUT /v1/allocation/<id>/stop: the allocation's desired status becomes stop
// (there is no scheduler here to place its replacement; a test does, with PutAlloc).
func (s *Server) stopAlloc(w http.ResponseWriter, r *http.Request, id string) {
	rules, all, ok := s.rules(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a, found := s.jobsLocked().allocs[id]
	if !found {
		http.Error(w, "alloc not found", http.StatusNotFound)
		return
	}
	if !allocLifecycle(rules, all, a.Namespace) {
		denied(w)
		return
	}
	s.index++
	a.DesiredStatus, a.ModifyIndex = api.AllocDesiredStatusStop, s.index
	s.jobsLocked().stops++
	s.allocEventLocked(a)
	queryHeaders(w, s.index)
	writeJSON(w, http.StatusOK, api.AllocStopResponse{EvalID: "eval-stop-" + a.ID})
}

// Alloc is the stored allocation id.
func (s *Server) Alloc(id string) (*api.Allocation, bool) {
	a, ok, _ := lookup(s, allocsOf, id)
	return a, ok
}

// AllocReads counts the reads of allocation id through the API: a test waits on it for a
// client's pass that read it.
func (s *Server) AllocReads(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobsLocked().allocReads[id]
}

// Stops counts the allocations stopped through the API.
func (s *Server) Stops() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobsLocked().stops
}

func isAllocStop(r *http.Request) (string, bool) {
	if r.Method != http.MethodPut && r.Method != http.MethodPost {
		return "", false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/allocation/")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "/stop")
}
