package varserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Job capabilities a Rule can grant in its namespace, as in Nomad's namespace rules.
const (
	CapReadJob   = "read-job"
	CapSubmitJob = "submit-job"
)

// The job side of the fake serves what gpufrac's controller uses, in the shapes of Nomad's HTTP
// API: GET /v1/job/<id>, GET /v1/job/<id>/allocations, PUT /v1/jobs (register, with the
// modify-index check), GET /v1/allocation/<id> (namespace-scoped: readAlloc), PUT
// /v1/allocation/<id>/stop (allocstop.go)
// and GET /v1/event/stream (topics Job and Allocation; an allocation event carries no job, as
// in Nomad). There is no scheduler: tests place allocations with PutAlloc, as a Nomad client
// would report them.

// jobsState is kept apart from the variables so the two do not share a table index.
type jobsState struct {
	jobs       map[key]*api.Job
	allocs     map[string]*api.Allocation
	events     []nsEvent
	evChanged  chan struct{}
	registers  int
	stops      int
	allocReads map[string]int
}

func (s *Server) jobsLocked() *jobsState {
	if s.js == nil {
		s.js = &jobsState{jobs: map[key]*api.Job{}, allocs: map[string]*api.Allocation{}, evChanged: make(chan struct{}),
			allocReads: map[string]int{}}
	}
	return s.js
}

// lookup is a copy of the entry k of the job state's map in (jobsOf, allocsOf), whether there is
// one, and the server's index, all read under one hold of the lock.
func lookup[K comparable, V any](s *Server, in func(*jobsState) map[K]*V, k K) (v *V, found bool, index uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, found = in(s.jobsLocked())[k]; found {
		v = clone(v)
	}
	return v, found, s.index
}

func jobsOf(js *jobsState) map[key]*api.Job             { return js.jobs }
func allocsOf(js *jobsState) map[string]*api.Allocation { return js.allocs }

// clone deep-copies an API value through JSON, the way it travels.
func clone[T any](v *T) *T {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // API types always marshal
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return &out
}

// PutJob registers job out of band (no ACL), as `nomad job run` would, and returns the stored
// copy with its indexes and version.
func (s *Server) PutJob(job *api.Job) *api.Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	return clone(s.registerLocked(clone(job)))
}

// Job reads a job out of band.
func (s *Server) Job(ns, id string) (*api.Job, bool) {
	j, ok, _ := lookup(s, jobsOf, key{nsOrDefault(ns), id})
	return j, ok
}

// DeleteJob purges a job out of band, as `nomad job stop -purge` would.
func (s *Server) DeleteJob(ns, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	js := s.jobsLocked()
	k := key{nsOrDefault(ns), id}
	j, ok := js.jobs[k]
	if !ok {
		return false
	}
	delete(js.jobs, k)
	s.index++
	s.eventLocked("Job", "JobDeregistered", id, k.ns, map[string]any{"Job": j})
	return true
}

// Registrations counts the job registrations received over HTTP.
func (s *Server) Registrations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.jobsLocked().registers
}

// PutAlloc stores an allocation as a client would report it and emits its event.
func (s *Server) PutAlloc(a *api.Allocation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index++
	a = clone(a)
	if a.Namespace == "" {
		a.Namespace = "default"
	}
	if a.CreateIndex == 0 {
		a.CreateIndex = s.index
	}
	a.ModifyIndex = s.index
	s.jobsLocked().allocs[a.ID] = a
	s.allocEventLocked(a)
}

// allocEventLocked emits a's AllocationUpdated event without its job, as Nomad's server does
// (nomad/state/events.go drops Allocation.Job to keep alloc events small): a subscriber learns
// the job version only by reading the allocation.
func (s *Server) allocEventLocked(a *api.Allocation) {
	ev := *a
	ev.Job = nil
	s.eventLocked("Allocation", "AllocationUpdated", a.ID, a.Namespace, map[string]any{"Allocation": &ev})
}

func (s *Server) registerLocked(job *api.Job) *api.Job {
	js := s.jobsLocked()
	if job.Namespace == nil || *job.Namespace == "" {
		job.Namespace = ptr("default")
	}
	k := key{*job.Namespace, *job.ID}
	s.index++
	version := uint64(0)
	create := s.index
	if prev, ok := js.jobs[k]; ok {
		version = *prev.Version + 1
		create = *prev.CreateIndex
	}
	job.Version, job.CreateIndex = ptr(version), ptr(create)
	job.ModifyIndex, job.JobModifyIndex = ptr(s.index), ptr(s.index)
	if job.Status == nil {
		job.Status = ptr("pending")
	}
	js.jobs[k] = job
	s.eventLocked("Job", "JobRegistered", *job.ID, k.ns, map[string]any{"Job": job})
	return job
}

func ptr[T any](v T) *T { return &v }

// nsEvent is an event as Nomad's server writes it: the API type plus the namespace, which the
// API client does not decode.
type nsEvent struct {
	api.Event
	Namespace string
}

func (s *Server) eventLocked(topic, typ, key, ns string, payload map[string]any) {
	js := s.jobsLocked()
	js.events = append(js.events, nsEvent{Event: api.Event{Topic: api.Topic(topic), Type: typ, Key: key,
		Index: s.index, Payload: clonePayload(payload)}, Namespace: ns})
	if len(js.events) > 10000 {
		js.events = js.events[1:]
	}
	close(js.evChanged)
	js.evChanged = make(chan struct{})
}

func clonePayload(p map[string]any) map[string]any {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// jobCaps is what the caller may do with jobs in ns.
func jobCaps(rules []Rule, all bool, ns string) (read, submit bool) {
	if all {
		return true, true
	}
	for _, c := range jobRuleCaps(rules, ns) {
		switch c {
		case CapDeny:
			return false, false
		case CapReadJob:
			read = true
		case CapSubmitJob:
			read, submit = true, true
		}
	}
	return read, submit
}

// jobRuleCaps is every job capability that rules grant in ns, in the rules' order.
func jobRuleCaps(rules []Rule, ns string) []string {
	var caps []string
	for _, r := range rules {
		if rns := nsOrDefault(r.Namespace); rns == ns || glob(rns, ns) {
			caps = append(caps, r.Jobs...)
		}
	}
	return caps
}

func (s *Server) serveJobs(w http.ResponseWriter, r *http.Request, closing chan struct{}) bool {
	p := r.URL.Path
	if id, ok := isAllocStop(r); ok {
		s.stopAlloc(w, r, id)
		return true
	}
	switch {
	case p == "/v1/jobs" && (r.Method == http.MethodPut || r.Method == http.MethodPost):
		s.register(w, r)
	case strings.HasPrefix(p, "/v1/job/") && r.Method == http.MethodGet:
		rest := strings.TrimPrefix(p, "/v1/job/")
		if id, ok := strings.CutSuffix(rest, "/allocations"); ok {
			s.jobAllocs(w, r, id)
		} else {
			s.readJob(w, r, rest)
		}
	case strings.HasPrefix(p, "/v1/allocation/") && r.Method == http.MethodGet:
		s.readAlloc(w, r, strings.TrimPrefix(p, "/v1/allocation/"))
	case p == "/v1/event/stream" && r.Method == http.MethodGet:
		s.stream(w, r, closing)
	default:
		return false
	}
	return true
}

// readableJobs is the namespace of a request that reads jobs, when its token may; else it has
// answered the request (no token, denied).
func (s *Server) readableJobs(w http.ResponseWriter, r *http.Request) (string, bool) {
	rules, all, ok := s.rules(w, r)
	if !ok {
		return "", false
	}
	ns := namespaceParam(r)
	if read, _ := jobCaps(rules, all, ns); !read {
		denied(w)
		return "", false
	}
	return ns, true
}

func (s *Server) readJob(w http.ResponseWriter, r *http.Request, id string) {
	ns, ok := s.readableJobs(w, r)
	if !ok {
		return
	}
	j, found, idx := lookup(s, jobsOf, key{ns, id})
	queryHeaders(w, idx)
	if !found {
		http.Error(w, "job not found", http.StatusNotFound)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

func (s *Server) jobAllocs(w http.ResponseWriter, r *http.Request, id string) {
	ns, ok := s.readableJobs(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	var out []*api.AllocationListStub
	for _, a := range s.jobsLocked().allocs {
		if a.Namespace == ns && a.JobID == id {
			version := uint64(0)
			if a.Job != nil && a.Job.Version != nil {
				version = *a.Job.Version
			}
			out = append(out, &api.AllocationListStub{ID: a.ID, Namespace: a.Namespace, JobID: a.JobID, TaskGroup: a.TaskGroup,
				JobVersion: version, ClientStatus: a.ClientStatus, DesiredStatus: a.DesiredStatus, NodeID: a.NodeID,
				CreateIndex: a.CreateIndex, ModifyIndex: a.ModifyIndex})
		}
	}
	idx := s.index
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].CreateIndex < out[j].CreateIndex })
	queryHeaders(w, idx)
	writeJSON(w, http.StatusOK, out)
}

// readAlloc answers a read of one allocation in the request's namespace ("default" when it
// names none; "*" for any): an allocation of another namespace is not found (404), and a
// namespace whose jobs the token may not read is denied (403). Nomad's GET
// /v1/allocation/<id> finds an allocation by its ID alone, but its namespace-scoped reads (the
// allocation list by ID prefix, a job's allocations) do not: keyed this way, the fake fails a
// client that reads an allocation without naming its namespace, which one Nomad endpoint lets
// pass and the others do not.
func (s *Server) readAlloc(w http.ResponseWriter, r *http.Request, id string) {
	rules, all, ok := s.rules(w, r)
	if !ok {
		return
	}
	ns := namespaceParam(r)
	a, found, idx := lookup(s, allocsOf, id)
	s.mu.Lock()
	s.jobsLocked().allocReads[id]++
	s.mu.Unlock()
	queryHeaders(w, idx)
	if read, _ := jobCaps(rules, all, ns); !read && ns != api.AllNamespacesNamespace {
		denied(w)
		return
	}
	if !found || (ns != api.AllNamespacesNamespace && a.Namespace != ns) {
		http.Error(w, "alloc not found", http.StatusNotFound)
		return
	}
	if read, _ := jobCaps(rules, all, a.Namespace); !read {
		denied(w)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	rules, all, ok := s.rules(w, r)
	if !ok {
		return
	}
	var req api.JobRegisterRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Job == nil || req.Job.ID == nil || *req.Job.ID == "" {
		http.Error(w, fmt.Sprintf("Failed to parse job register request: %v", err), http.StatusBadRequest)
		return
	}
	ns := namespaceParam(r)
	if req.Job.Namespace != nil && *req.Job.Namespace != "" {
		ns = *req.Job.Namespace
	}
	req.Job.Namespace = &ns
	if _, submit := jobCaps(rules, all, ns); !submit {
		denied(w)
		return
	}
	s.mu.Lock()
	js := s.jobsLocked()
	if req.EnforceIndex {
		cur := uint64(0)
		if prev, ok := js.jobs[key{ns, *req.Job.ID}]; ok {
			cur = *prev.JobModifyIndex
		}
		if cur != req.JobModifyIndex {
			s.mu.Unlock()
			http.Error(w, fmt.Sprintf("Enforcing job modify index %d: job exists with conflicting job modify index: %d", req.JobModifyIndex, cur),
				http.StatusInternalServerError)
			return
		}
	}
	js.registers++
	j := s.registerLocked(req.Job)
	idx := s.index
	s.mu.Unlock()
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(idx, 10))
	writeJSON(w, http.StatusOK, api.JobRegisterResponse{EvalID: fmt.Sprintf("eval-%d", idx), EvalCreateIndex: idx, JobModifyIndex: *j.JobModifyIndex})
}

// stream answers the event stream: newline-delimited JSON, one {Index, Events} object per
// index, and a {} heartbeat every second, from ?index= on.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, closing chan struct{}) {
	rules, all, ok := s.rules(w, r)
	if !ok {
		return
	}
	ns := namespaceParam(r)
	if read, _ := jobCaps(rules, all, ns); !read && ns != "*" {
		denied(w)
		return
	}
	topics := map[string][]string{}
	for _, t := range r.URL.Query()["topic"] {
		name, k, _ := strings.Cut(t, ":")
		if k == "" {
			k = "*"
		}
		topics[name] = append(topics[name], k)
	}
	from := uint64(0)
	if v := r.URL.Query().Get("index"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			http.Error(w, "Invalid index", http.StatusBadRequest)
			return
		}
		from = n
	}
	match := func(e nsEvent) bool {
		if ns != "*" && e.Namespace != ns {
			return false
		}
		if read, _ := jobCaps(rules, all, e.Namespace); !read {
			return false
		}
		for _, k := range append(topics[string(e.Topic)], topics["*"]...) {
			if k == "*" || k == e.Key {
				return true
			}
		}
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	raw := w
	if rec, ok := w.(*recorder); ok {
		raw = rec.ResponseWriter
	}
	flusher, _ := raw.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	flush()
	enc := json.NewEncoder(w)
	beat := time.NewTicker(time.Second)
	defer beat.Stop()
	for {
		s.mu.Lock()
		js := s.jobsLocked()
		down, changed := s.down, js.evChanged
		type batchT struct {
			Index  uint64
			Events []nsEvent
		}
		var batch []batchT
		for _, e := range js.events {
			if e.Index < from || !match(e) {
				continue
			}
			if n := len(batch); n > 0 && batch[n-1].Index == e.Index {
				batch[n-1].Events = append(batch[n-1].Events, e)
			} else {
				batch = append(batch, batchT{Index: e.Index, Events: []nsEvent{e}})
			}
		}
		if n := len(js.events); n > 0 {
			from = max(from, js.events[n-1].Index+1)
		}
		s.mu.Unlock()
		if down {
			drop(w)
			return
		}
		for _, b := range batch {
			if err := enc.Encode(b); err != nil {
				return
			}
		}
		flush()
		select {
		case <-changed:
		case <-beat.C:
			if _, err := w.Write([]byte("{}\n")); err != nil {
				return
			}
			flush()
		case <-closing:
			return
		case <-r.Context().Done():
			return
		}
	}
}
