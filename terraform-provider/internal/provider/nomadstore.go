package provider

import (
	"context"
	"sync"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
)

// nomadStores adapts nomadvars.Store, which serves one namespace, to objectStore, where each
// object names its own namespace: one NomadStore per namespace, made on first use.
type nomadStores struct {
	cfg nomadvars.Config

	mu     sync.Mutex
	stores map[string]*nomadvars.Store
}

func newNomadStore(c storeConfig) (objectStore, error) {
	s := &nomadStores{
		cfg: nomadvars.Config{Address: c.Address, Token: c.Token, TokenFile: c.TokenFile,
			Namespace: c.Namespace, Region: c.Region, CACert: c.CACert},
		stores: map[string]*nomadvars.Store{},
	}
	// Build the default namespace's store now, so a bad token_file or CA file is reported
	// while configuring the provider rather than on the first read.
	if _, err := s.in(c.Namespace); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *nomadStores) in(namespace string) (*nomadvars.Store, error) {
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

func (s *nomadStores) GetPolicy(ctx context.Context, ns, name string) (policy.Policy, uint64, error) {
	st, err := s.in(ns)
	if err != nil {
		return policy.Policy{}, 0, err
	}
	p, m, err := st.GetPolicy(ctx, name)
	return p, m.ModifyIndex, err
}

func (s *nomadStores) PutPolicy(ctx context.Context, ns string, p policy.Policy, cas uint64) (uint64, error) {
	st, err := s.in(ns)
	if err != nil {
		return 0, err
	}
	m, err := st.PutPolicy(ctx, p, cas)
	return m.ModifyIndex, err
}

func (s *nomadStores) DeletePolicy(ctx context.Context, ns, name string) error {
	st, err := s.in(ns)
	if err != nil {
		return err
	}
	return st.DeletePolicy(ctx, name, 0)
}

func (s *nomadStores) GetTemplate(ctx context.Context, ns, name string) (policy.Template, uint64, error) {
	st, err := s.in(ns)
	if err != nil {
		return policy.Template{}, 0, err
	}
	t, m, err := st.GetTemplate(ctx, name)
	return t, m.ModifyIndex, err
}

func (s *nomadStores) PutTemplate(ctx context.Context, ns string, t policy.Template, cas uint64) (uint64, error) {
	st, err := s.in(ns)
	if err != nil {
		return 0, err
	}
	m, err := st.PutTemplate(ctx, t, cas)
	return m.ModifyIndex, err
}

func (s *nomadStores) DeleteTemplate(ctx context.Context, ns, name string) error {
	st, err := s.in(ns)
	if err != nil {
		return err
	}
	return st.DeleteTemplate(ctx, name, 0)
}
