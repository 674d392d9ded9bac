package provider

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
)

// nomadStores adapts nomadvars.Store, which serves one namespace, to objectStore, where each
// object names its own namespace: one NomadStore per namespace, made on first use.
type nomadStores struct {
	cfg     nomadvars.Config
	timeout time.Duration

	mu     sync.Mutex
	stores map[string]*nomadvars.Store
}

func newNomadStore(c storeConfig) (objectStore, error) {
	s := &nomadStores{
		cfg: nomadvars.Config{Address: c.Address, Token: c.Token, TokenFile: c.TokenFile,
			Namespace: c.Namespace, Region: c.Region, CACert: c.CACert, ClientCert: c.ClientCert, ClientKey: c.ClientKey},
		timeout: c.Timeout,
		stores:  map[string]*nomadvars.Store{},
	}
	// Build the default namespace's store now, so a bad token_file or CA file is reported
	// while configuring the provider rather than on the first read.
	if _, err := s.store(c.Namespace); err != nil {
		return nil, err
	}
	return s, nil
}

// timedOut names the request_timeout when it is what ended a request (the HTTP client's error
// already says so when it reports the context's cause).
func timedOut(ctx context.Context, err error) error {
	cause := context.Cause(ctx)
	if err == nil || !errors.Is(cause, context.DeadlineExceeded) || strings.Contains(err.Error(), cause.Error()) {
		return err
	}
	return fmt.Errorf("%w (%w)", cause, err)
}

func (s *nomadStores) store(namespace string) (*nomadvars.Store, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.stores[namespace]; ok {
		return st, nil
	}
	cfg := s.cfg
	cfg.Namespace = namespace
	st, err := nomadvars.New(cfg)
	if err != nil {
		return nil, err
	}
	s.stores[namespace] = st
	return st, nil
}

// do runs one request on the namespace's store, bounded by request_timeout, and returns the
// modify index it reports.
func (s *nomadStores) do(ctx context.Context, ns string, req func(context.Context, *nomadvars.Store) (policy.Meta, error)) (uint64, error) {
	st, err := s.store(ns)
	if err != nil {
		return 0, err
	}
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.timeout, fmt.Errorf("%w: no answer from Nomad at %s within request_timeout %s",
			context.DeadlineExceeded, s.cfg.Address, s.timeout))
		defer cancel()
	}
	m, err := req(ctx, st)
	return m.ModifyIndex, timedOut(ctx, err)
}

func (s *nomadStores) GetPolicy(ctx context.Context, ns, name string) (p policy.Policy, idx uint64, err error) {
	idx, err = s.do(ctx, ns, func(ctx context.Context, st *nomadvars.Store) (m policy.Meta, err error) {
		p, m, err = st.GetPolicy(ctx, name)
		return m, err
	})
	return p, idx, err
}

func (s *nomadStores) PutPolicy(ctx context.Context, ns string, p policy.Policy, cas uint64) (uint64, error) {
	return s.do(ctx, ns, func(ctx context.Context, st *nomadvars.Store) (policy.Meta, error) { return st.PutPolicy(ctx, p, cas) })
}

func (s *nomadStores) DeletePolicy(ctx context.Context, ns, name string) error {
	_, err := s.do(ctx, ns, func(ctx context.Context, st *nomadvars.Store) (policy.Meta, error) {
		return policy.Meta{}, st.DeletePolicy(ctx, name, 0)
	})
	return err
}

func (s *nomadStores) GetTemplate(ctx context.Context, ns, name string) (t policy.Template, idx uint64, err error) {
	idx, err = s.do(ctx, ns, func(ctx context.Context, st *nomadvars.Store) (m policy.Meta, err error) {
		t, m, err = st.GetTemplate(ctx, name)
		return m, err
	})
	return t, idx, err
}

func (s *nomadStores) PutTemplate(ctx context.Context, ns string, t policy.Template, cas uint64) (uint64, error) {
	return s.do(ctx, ns, func(ctx context.Context, st *nomadvars.Store) (policy.Meta, error) {
		return st.PutTemplate(ctx, t, cas)
	})
}

func (s *nomadStores) DeleteTemplate(ctx context.Context, ns, name string) error {
	_, err := s.do(ctx, ns, func(ctx context.Context, st *nomadvars.Store) (policy.Meta, error) {
		return policy.Meta{}, st.DeleteTemplate(ctx, name, 0)
	})
	return err
}
