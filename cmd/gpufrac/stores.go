package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
)

// PolicyFileName is the local policy file inside the state directory.
const PolicyFileName = "policy.json"

// storeFlags choose where policies and templates live: a local file (default) or Nomad Variables.
type storeFlags struct {
	policyFile     string
	policyName     string
	nomad          bool
	nomadAddr      string
	nomadTokenFile string
	nomadNamespace string
}

func (s *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.policyFile, "policy-file", "", "local policy file (default <state-dir>/"+PolicyFileName+")")
	fs.StringVar(&s.policyName, "policy", policy.DefaultName, "name of the policy to use")
	fs.BoolVar(&s.nomad, "nomad", false, "use Nomad Variables (gpufrac/...) instead of the local policy file")
	fs.StringVar(&s.nomadAddr, "nomad-addr", os.Getenv("NOMAD_ADDR"), "Nomad address with --nomad (default $NOMAD_ADDR)")
	fs.StringVar(&s.nomadTokenFile, "nomad-token-file", "", "file holding the Nomad ACL token with --nomad (default $NOMAD_TOKEN)")
	fs.StringVar(&s.nomadNamespace, "nomad-namespace", os.Getenv("NOMAD_NAMESPACE"), "Nomad namespace with --nomad (default $NOMAD_NAMESPACE or default)")
}

// explicit says whether the user asked for a policy from a store (a store, or a policy by a
// name other than the default), rather than relying on the default file's default.
func (s *storeFlags) explicit() bool {
	return s.nomad || s.policyFile != "" || s.policyName != policy.DefaultName
}

// open returns the store and a phrase that names it for people.
func (s *storeFlags) open(g *globals) (policy.Store, string, error) {
	if s.nomad {
		st, err := nomadvars.New(nomadvars.Config{Address: s.nomadAddr, Token: os.Getenv("NOMAD_TOKEN"),
			TokenFile: s.nomadTokenFile, Namespace: s.nomadNamespace, Logger: g.logger})
		if err != nil {
			return nil, "", fmt.Errorf("nomad store: %w", err)
		}
		addr := s.nomadAddr
		if addr == "" {
			addr = "the default Nomad address"
		}
		return st, "Nomad Variables at " + addr, nil
	}
	path := s.policyFile
	if path == "" {
		path = filepath.Join(expandHome(g.stateDir), PolicyFileName)
	}
	return policy.NewFileStore(expandHome(path), policy.FileOptions{}), "policy file " + path, nil
}

// loadPolicy reads the named policy. A missing "default" gives the built-in defaults; any other
// missing name is an error, wherever it was looked for: a misspelt --policy used to run with the
// defaults under the name asked for, and nothing said so.
func (s *storeFlags) loadPolicy(ctx context.Context, g *globals) (policy.Policy, bool, error) {
	st, where, err := s.open(g)
	if err != nil {
		return policy.Policy{}, false, err
	}
	p, _, err := st.GetPolicy(ctx, s.policyName)
	switch {
	case err == nil:
		return p, true, nil
	case errors.Is(err, policy.ErrNotFound) && s.policyName == policy.DefaultName:
		return policy.Default(), false, nil
	case errors.Is(err, policy.ErrNotFound):
		return policy.Policy{}, false, fmt.Errorf("--policy %q is not in the %s (only %q may be missing: it means the built-in defaults): %w",
			s.policyName, where, policy.DefaultName, err)
	case errors.Is(err, os.ErrNotExist) && !s.explicit():
		return policy.Default(), false, nil
	}
	return policy.Policy{}, false, fmt.Errorf("reading policy %q from the %s: %w", s.policyName, where, err)
}
