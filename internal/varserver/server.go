package varserver

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"
)

// Variable is the JSON shape of a Nomad variable (GET one, PUT request and response, 409
// body). Times are Unix nanoseconds. Items is omitted only in list entries and redacted
// conflicts.
type Variable struct {
	Namespace   string
	Path        string
	CreateIndex uint64
	ModifyIndex uint64
	CreateTime  int64
	ModifyTime  int64
	Items       map[string]string `json:",omitempty"`
}

// Options configures a Server.
type Options struct {
	// ACL turns on token checks even before any SetToken call; a request without a token is
	// then denied everything. SetToken turns them on too.
	ACL bool
	// MaxWait caps a blocking query's wait (Nomad: 5m, also the default wait).
	MaxWait time.Duration
	// Addr is the 127.0.0.1 address to listen on; empty picks a free port.
	Addr string
}

// Request is one request as the server saw it, for tests that count or inspect traffic.
type Request struct {
	Method string
	Path   string
	Query  string
	Status int
}

// Server is a running fake. All methods are safe for concurrent use.
type Server struct {
	opts Options

	mu         sync.Mutex
	vars       map[key]*Variable
	index      uint64 // every write bumps it, like a raft index
	tableIndex uint64 // index of the last change to the variables table
	changed    chan struct{}
	tokens     map[string][]Rule
	acl        bool
	failStatus int
	failLeft   int
	down       bool
	log        []Request
	total      int
	js         *jobsState
	// holds counts the times a blocking query began to wait for a change (it counts again each
	// time a change it does not see sends it back to waiting) and heldAt is the highest index a
	// query began to wait past; heldChanged is closed and replaced when they change, for
	// WaitHolds and WaitHeldAt.
	holds       int
	heldAt      uint64
	heldChanged chan struct{}

	addr    string
	srv     *http.Server
	closing chan struct{}
}

type key struct{ ns, path string }

// New starts a server on 127.0.0.1 and panics if it cannot listen (tests only).
func New(opts Options) *Server {
	s, err := Start(opts)
	if err != nil {
		panic(err)
	}
	return s
}

// Start is New returning the listen error instead of panicking (for the command).
func Start(opts Options) (*Server, error) {
	if opts.MaxWait <= 0 {
		opts.MaxWait = 5 * time.Minute
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(opts.Addr)
	if err != nil || host != "127.0.0.1" {
		return nil, fmt.Errorf("varserver: address %q: must be 127.0.0.1:<port>", opts.Addr)
	}
	s := &Server{
		opts:        opts,
		vars:        map[key]*Variable{},
		index:       1,
		tableIndex:  1,
		changed:     make(chan struct{}),
		heldChanged: make(chan struct{}),
		tokens:      map[string][]Rule{},
		acl:         opts.ACL,
	}
	if err := s.listen(opts.Addr); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("varserver: listen %s: %w", addr, err)
	}
	closing := make(chan struct{})
	srv := &http.Server{Handler: s.handler(closing), ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	s.addr, s.srv, s.closing = ln.Addr().String(), srv, closing
	s.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// URL is the server's base address, e.g. "http://127.0.0.1:40123".
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "http://" + s.addr
}

// Close stops the server at once, ending blocking queries in flight.
func (s *Server) Close() {
	s.mu.Lock()
	srv, closing := s.srv, s.closing
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	close(closing)
	_ = srv.Close()
}

// Restart closes the server, dropping every connection and blocking query, and listens again
// on the same address with the same state, like a Nomad server restart that kept its data.
func (s *Server) Restart() error {
	s.mu.Lock()
	addr := s.addr
	s.mu.Unlock()
	s.Close()
	var err error
	for range 50 { // the port can take a moment to free up
		if err = s.listen(addr); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// SetToken adds or replaces an ACL token and turns ACL checks on. A token with no rules is
// valid but may do nothing.
func (s *Server) SetToken(secret string, rules ...Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acl = true
	s.tokens[secret] = append([]Rule(nil), rules...)
}

// RemoveToken makes secret unknown (403 "ACL token not found").
func (s *Server) RemoveToken(secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tokens, secret)
}

// Fail answers the next n requests with status and a short text body, before any other
// processing. n <= 0 stops failing.
func (s *Server) Fail(status, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failStatus, s.failLeft = status, n
}

// SetDown makes the server drop every connection without answering (and ends blocking queries
// in flight), as an unreachable agent would, until SetDown(false).
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
	if down {
		s.wakeLocked()
	}
}

// Requests returns how many requests the server has received.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// RequestLog returns a copy of the last (up to 10000) requests, oldest first.
func (s *Server) RequestLog() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

// WaitHolds returns once blocking queries have begun to wait for a change n times (see holds),
// or ctx's error. A query counted here had already taken the change signal it waits on, so a
// write made after WaitHolds returns wakes it: tests wait on this instead of sleeping and
// hoping the query got there first.
func (s *Server) WaitHolds(ctx context.Context, n int) error {
	return s.waitHeld(ctx, func() bool { return s.holds >= n },
		func() string { return fmt.Sprintf("%d blocking queries began to wait, want %d", s.holds, n) })
}

// WaitHeldAt returns once a blocking query waits for a change past index, or ctx's error. A
// client that waits there has taken in everything up to index: a test that wrote at index and
// sees this knows the client has handled that write, whatever it did with it.
func (s *Server) WaitHeldAt(ctx context.Context, index uint64) error {
	return s.waitHeld(ctx, func() bool { return s.heldAt >= index },
		func() string {
			return fmt.Sprintf("no blocking query waits past index %d (the highest is %d)", index, s.heldAt)
		})
}

func (s *Server) waitHeld(ctx context.Context, done func() bool, why func() string) error {
	for {
		s.mu.Lock()
		ok, ch := done(), s.heldChanged
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			s.mu.Lock()
			msg := why()
			s.mu.Unlock()
			return fmt.Errorf("varserver: %s: %w", msg, ctx.Err())
		}
	}
}

// Index is the current global index.
func (s *Server) Index() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index
}

// Put writes a variable out of band (no ACL, no CAS, no validation), as another writer would,
// and wakes blocking queries. An empty ns means "default".
func (s *Server) Put(ns, path string, items map[string]string) Variable {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.putLocked(nsOrDefault(ns), path, items).clone()
}

// Get reads a variable out of band.
func (s *Server) Get(ns, path string) (Variable, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vars[key{nsOrDefault(ns), path}]
	if !ok {
		return Variable{}, false
	}
	return v.clone(), true
}

// Delete removes a variable out of band and reports whether it existed.
func (s *Server) Delete(ns, path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deleteLocked(nsOrDefault(ns), path)
}

// List returns every variable (with Items), sorted by namespace then path.
func (s *Server) List() []Variable {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Variable, 0, len(s.vars))
	for _, v := range s.vars {
		out = append(out, v.clone())
	}
	sort.Slice(out, func(i, j int) bool { return less(&out[i], &out[j]) })
	return out
}

// Bump advances the global index without touching variables, as unrelated raft writes do.
func (s *Server) Bump() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index++
	return s.index
}

func (s *Server) putLocked(ns, path string, items map[string]string) *Variable {
	s.index++
	now := time.Now().UnixNano()
	k := key{ns, path}
	v, ok := s.vars[k]
	if !ok {
		v = &Variable{Namespace: ns, Path: path, CreateIndex: s.index, CreateTime: now}
		s.vars[k] = v
	}
	v.ModifyIndex, v.ModifyTime = s.index, now
	v.Items = make(map[string]string, len(items))
	for k, val := range items {
		v.Items[k] = val
	}
	s.tableIndex = s.index
	s.wakeLocked()
	return v
}

// deleteLocked bumps the table index only when something was deleted; the raft index moves
// either way because the delete is still a log entry.
func (s *Server) deleteLocked(ns, path string) bool {
	s.index++
	k := key{ns, path}
	if _, ok := s.vars[k]; !ok {
		return false
	}
	delete(s.vars, k)
	s.tableIndex = s.index
	s.wakeLocked()
	return true
}

func (s *Server) wakeLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (v *Variable) clone() Variable {
	c := *v
	if v.Items != nil {
		c.Items = make(map[string]string, len(v.Items))
		for k, val := range v.Items {
			c.Items[k] = val
		}
	}
	return c
}

func less(a, b *Variable) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Path < b.Path
}

func nsOrDefault(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}
