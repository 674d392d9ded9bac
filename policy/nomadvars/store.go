package nomadvars

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// Config says how to reach Nomad. Empty fields fall back to api.DefaultConfig(), that is to
// NOMAD_ADDR, NOMAD_TOKEN, NOMAD_NAMESPACE, NOMAD_REGION, NOMAD_CACERT and friends.
type Config struct {
	// Address of a Nomad agent, e.g. "http://127.0.0.1:4646".
	Address string
	// Token is the ACL secret ID. It is never logged or printed.
	Token string
	// TokenFile holds the ACL secret ID (surrounding whitespace ignored); used when Token is empty.
	TokenFile string
	// Namespace of the variables; default "default".
	Namespace string
	// Region to forward to.
	Region string
	// CACert is a PEM file that verifies the agent's TLS certificate.
	CACert string
	// ClientCert and ClientKey are PEM files of a client certificate for mutual TLS; both or
	// neither.
	ClientCert, ClientKey string
	// WaitTime bounds one blocking query (Nomad caps it at 5m, the default).
	WaitTime time.Duration
	// Logger receives debug logs; nil discards them.
	Logger hclog.Logger
}

// Store keeps policies at PolicyPath(name) and templates at TemplatePath(name) as Nomad
// Variables. A plugin needs "read" and "list" on gpufrac/*; a provider also "write" and
// "destroy".
type Store struct {
	vars      *api.Variables
	raw       *api.Raw
	namespace string
	address   string
	wait      time.Duration
	log       hclog.Logger
}

// New builds a client; it sends no request.
func New(cfg Config) (*Store, error) {
	c, err := NewAPIClient(cfg)
	if err != nil {
		return nil, err
	}
	wait := cfg.WaitTime
	if wait <= 0 || wait > 5*time.Minute {
		wait = 5 * time.Minute
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Store{vars: c.Variables(), raw: c.Raw(), namespace: c.Namespace, address: c.Address, wait: wait,
		log: log.Named("nomad-store")}, nil
}

// Namespace is the Nomad namespace the store reads and writes.
func (s *Store) Namespace() string { return s.namespace }

// String names the store without its token.
func (s *Store) String() string {
	return fmt.Sprintf("nomad variables at %s (namespace %s)", s.address, s.namespace)
}

func (s *Store) q(ctx context.Context) *api.QueryOptions {
	return (&api.QueryOptions{Namespace: s.namespace}).WithContext(ctx)
}

func (s *Store) w(ctx context.Context) *api.WriteOptions {
	return (&api.WriteOptions{Namespace: s.namespace}).WithContext(ctx)
}

// ErrNoVariablesAPI is wrapped by a 404 that is not Nomad's answer for a missing variable:
// what answered is not Nomad's Variables API (see variableNotFound). Such an error never wraps
// policy.ErrNotFound.
var ErrNoVariablesAPI = errors.New("no Nomad Variables API answers there")

// variableNotFound is the whole body of Nomad's 404 for a GET of a variable that does not exist
// (command/agent/variable_endpoint.go: CodedError(http.StatusNotFound, "variable not found")).
// Any other 404 comes from something else: a proxy or another server at the address, or a Nomad
// older than 1.4, which has no /v1/var/ route (today's agent answers a route it lacks with an
// empty 404). And a write or a delete never gets a 404 from Nomad: a delete of a missing
// variable succeeds (204). Taking those for "absent" would make Terraform drop every object from
// state and plan to create them again, and a probe take the path for free.
const variableNotFound = "variable not found"

// mapErr turns api errors into the Store's: a read's 404 "variable not found" is ErrNotFound,
// any other 404 ErrNoVariablesAPI, 403 ErrPermissionDenied, a CAS miss a *ConflictError.
func (s *Store) mapErr(op, path string, cas uint64, err error) error {
	if err == nil {
		return nil
	}
	var c api.ErrCASConflict
	if errors.As(err, &c) {
		ce := &policy.ConflictError{Path: path, CAS: cas}
		if c.Conflict != nil {
			ce.Current = metaOf(c.Conflict.CreateIndex, c.Conflict.ModifyIndex, c.Conflict.ModifyTime)
		}
		return ce
	}
	var ure api.UnexpectedResponseError
	if errors.As(err, &ure) {
		switch ure.StatusCode() {
		case http.StatusForbidden:
			return fmt.Errorf("%s %s in namespace %s at %s: %w (%s): the token lacks the variables capability for this path",
				op, path, s.namespace, s.address, policy.ErrPermissionDenied, strings.TrimSpace(ure.Body()))
		case http.StatusNotFound:
			if op == "read" && strings.TrimSpace(ure.Body()) == variableNotFound {
				return fmt.Errorf("%s %s in namespace %s: %w", op, path, s.namespace, policy.ErrNotFound)
			}
			return s.noVariablesAPI(op, path, ure.Body())
		}
	}
	return fmt.Errorf("%s %s in namespace %s at %s: %w", op, path, s.namespace, s.address, err)
}

// noVariablesAPI is the error of a 404 that is not Nomad's "variable not found": it names the
// request that got it and what to check.
func (s *Store) noVariablesAPI(op, path, body string) error {
	method, endpoint := http.MethodGet, "/v1/var/"+path
	switch op {
	case "write":
		method = http.MethodPut
	case "delete":
		method = http.MethodDelete
	case "list":
		endpoint = "/v1/vars?prefix=" + path
	}
	body = strings.TrimSpace(body)
	if len(body) > 200 {
		body = body[:200] + "..."
	}
	// An address with a path never gets here (NewAPIClient refuses it).
	hint := "check that the address is a Nomad agent's HTTP API, of Nomad 1.4 or later (the first with Variables)"
	return fmt.Errorf("%s %s in namespace %s at %s: %s %s answered 404 with %q, not Nomad's %q for a missing variable: %w; %s",
		op, path, s.namespace, s.address, method, endpoint, body, variableNotFound, ErrNoVariablesAPI, hint)
}

func metaOf(create, modify uint64, modifyNanos int64) policy.Meta {
	m := policy.Meta{CreateIndex: create, ModifyIndex: modify}
	if modifyNanos != 0 {
		m.ModifyTime = time.Unix(0, modifyNanos)
	}
	return m
}

func (s *Store) read(ctx context.Context, path string) (map[string]string, policy.Meta, error) {
	// Not s.vars.Read: it takes every 404 for a missing variable and drops the body that tells
	// the two apart (see variableNotFound).
	var v api.Variable
	if _, err := s.raw.Query("/v1/var/"+path, &v, s.q(ctx)); err != nil {
		return nil, policy.Meta{}, s.mapErr("read", path, 0, err)
	}
	return v.Items, metaOf(v.CreateIndex, v.ModifyIndex, v.ModifyTime), nil
}

func (s *Store) put(ctx context.Context, path string, items map[string]string, cas uint64, checked bool) (policy.Meta, error) {
	v := &api.Variable{Namespace: s.namespace, Path: path, Items: items, ModifyIndex: cas}
	var out *api.Variable
	var err error
	switch {
	case !checked:
		out, _, err = s.vars.Create(v, s.w(ctx))
	case cas == 0:
		out, _, err = s.vars.CheckedCreate(v, s.w(ctx))
	default:
		out, _, err = s.vars.CheckedUpdate(v, s.w(ctx))
	}
	if err != nil {
		return policy.Meta{}, s.mapErr("write", path, cas, err)
	}
	s.log.Debug("wrote variable", "path", path, "namespace", s.namespace, "modify_index", out.ModifyIndex)
	return metaOf(out.CreateIndex, out.ModifyIndex, out.ModifyTime), nil
}

func (s *Store) del(ctx context.Context, path string, cas uint64) error {
	var err error
	if cas == 0 {
		_, err = s.vars.Delete(path, s.w(ctx))
	} else {
		_, err = s.vars.CheckedDelete(path, cas, s.w(ctx))
	}
	return s.mapErr("delete", path, cas, err)
}

// GetPolicy reads and decodes the named policy.
func (s *Store) GetPolicy(ctx context.Context, name string) (policy.Policy, policy.Meta, error) {
	return get(ctx, s, policy.PolicyKind, name)
}

// PutPolicy writes p with check-and-set (see Store).
func (s *Store) PutPolicy(ctx context.Context, p policy.Policy, cas uint64) (policy.Meta, error) {
	return put(ctx, s, policy.PolicyKind, p, cas, true)
}

// PutPolicyUnchecked writes p without check-and-set.
func (s *Store) PutPolicyUnchecked(ctx context.Context, p policy.Policy) (policy.Meta, error) {
	return put(ctx, s, policy.PolicyKind, p, 0, false)
}

// DeletePolicy deletes the named policy (cas 0: unconditionally).
func (s *Store) DeletePolicy(ctx context.Context, name string, cas uint64) error {
	return del(ctx, s, policy.PolicyKind, name, cas)
}

// GetTemplate reads and decodes the named template.
func (s *Store) GetTemplate(ctx context.Context, name string) (policy.Template, policy.Meta, error) {
	return get(ctx, s, policy.TemplateKind, name)
}

// PutTemplate writes t with check-and-set (see Store).
func (s *Store) PutTemplate(ctx context.Context, t policy.Template, cas uint64) (policy.Meta, error) {
	return put(ctx, s, policy.TemplateKind, t, cas, true)
}

// PutTemplateUnchecked writes t without check-and-set.
func (s *Store) PutTemplateUnchecked(ctx context.Context, t policy.Template) (policy.Meta, error) {
	return put(ctx, s, policy.TemplateKind, t, 0, false)
}

// DeleteTemplate deletes the named template (cas 0: unconditionally).
func (s *Store) DeleteTemplate(ctx context.Context, name string, cas uint64) error {
	return del(ctx, s, policy.TemplateKind, name, cas)
}

// get reads and decodes the object of kind k called name.
func get[T any](ctx context.Context, s *Store, k policy.Kind[T], name string) (T, policy.Meta, error) {
	var zero T
	if err := policy.CheckName(k.Name, name); err != nil {
		return zero, policy.Meta{}, err
	}
	items, m, err := s.read(ctx, k.Path(name))
	if err != nil {
		return zero, policy.Meta{}, err
	}
	v, err := k.DecodeAt(k.Path(name), name, items)
	return v, m, err
}

func put[T any](ctx context.Context, s *Store, k policy.Kind[T], v T, cas uint64, checked bool) (policy.Meta, error) {
	items, err := k.Encode(v)
	if err != nil {
		return policy.Meta{}, err
	}
	return s.put(ctx, k.Path(k.NameOf(v)), items, cas, checked)
}

func del[T any](ctx context.Context, s *Store, k policy.Kind[T], name string, cas uint64) error {
	if err := policy.CheckName(k.Name, name); err != nil {
		return err
	}
	return s.del(ctx, k.Path(name), cas)
}

// ListTemplates lists gpufrac/templates/ and reads each one (the list carries no items).
// Paths below it with more than one segment are not templates and are skipped.
func (s *Store) ListTemplates(ctx context.Context) ([]policy.Template, error) {
	metas, _, err := s.vars.PrefixList(policy.TemplatePathPrefix, s.q(ctx))
	if err != nil {
		return nil, s.mapErr("list", policy.TemplatePathPrefix, 0, err)
	}
	var out []policy.Template
	var bad []error
	for _, m := range metas {
		name := strings.TrimPrefix(m.Path, policy.TemplatePathPrefix)
		if strings.Contains(name, "/") {
			continue
		}
		t, _, err := s.GetTemplate(ctx, name)
		switch {
		case errors.Is(err, policy.ErrNotFound):
			continue // deleted between list and read
		case errors.Is(err, policy.ErrInvalid):
			bad = append(bad, err)
			continue
		case err != nil:
			return nil, err
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, errors.Join(bad...)
}

// WaitPolicy is a blocking query on the policy's variable (see PolicySource). The index is
// Nomad's X-Nomad-Index: the variable's ModifyIndex, or the variables table index while it is
// absent.
func (s *Store) WaitPolicy(ctx context.Context, name string, after uint64) (policy.Policy, policy.Meta, uint64, error) {
	if err := policy.CheckName("policy", name); err != nil {
		return policy.Policy{}, policy.Meta{}, 0, err
	}
	path := policy.PolicyPath(name)
	q := s.q(ctx)
	q.WaitIndex, q.WaitTime = after, s.wait
	v, qm, err := s.vars.Peek(path, q)
	if err != nil {
		return policy.Policy{}, policy.Meta{}, 0, s.mapErr("read", path, 0, err)
	}
	var items map[string]string
	var m policy.Meta
	idx := qm.LastIndex
	if v == nil {
		// Peek takes every 404 for a missing variable, and only its answer carries the index to
		// block on next; a read without blocking tells which 404 it was.
		items, m, err = s.read(ctx, path)
		switch {
		case errors.Is(err, policy.ErrNotFound):
			return policy.Policy{}, policy.Meta{}, qm.LastIndex, err
		case err != nil:
			return policy.Policy{}, policy.Meta{}, 0, err
		}
		idx = m.ModifyIndex // written since Peek's answer
	} else {
		items, m = v.Items, metaOf(v.CreateIndex, v.ModifyIndex, v.ModifyTime)
	}
	if idx == 0 {
		idx = m.ModifyIndex // a server that sends no X-Nomad-Index
	}
	p, err := policy.PolicyKind.DecodeAt(path, name, items)
	return p, m, idx, err
}
