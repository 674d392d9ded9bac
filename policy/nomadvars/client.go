package nomadvars

import (
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// Conn is a Nomad API client with the namespace and address it was built for.
type Conn struct {
	*api.Client
	Namespace, Address string
}

// NewAPIClient is the Nomad API client every gpufrac part builds from the same settings (empty
// fields fall back to NOMAD_ADDR, NOMAD_TOKEN... and the defaults); it sends no request.
func NewAPIClient(cfg Config) (Conn, error) {
	ac := api.DefaultConfig()
	if cfg.Address != "" {
		ac.Address = cfg.Address
	}
	switch {
	case cfg.Token != "":
		ac.SecretID = cfg.Token
	case cfg.TokenFile != "":
		b, err := os.ReadFile(cfg.TokenFile)
		if err != nil {
			return Conn{}, fmt.Errorf("nomad token_file: %w", err) // the error names the file, not its content
		}
		ac.SecretID = strings.TrimSpace(string(b))
		if ac.SecretID == "" {
			return Conn{}, fmt.Errorf("nomad token_file %s is empty", cfg.TokenFile)
		}
	}
	if cfg.Namespace != "" {
		ac.Namespace = cfg.Namespace
	}
	if ac.Namespace == "" {
		ac.Namespace = api.DefaultNamespace
	}
	if ac.Namespace == api.AllNamespacesNamespace {
		return Conn{}, fmt.Errorf("nomad namespace %q: gpufrac needs one namespace, not all", ac.Namespace)
	}
	if cfg.Region != "" {
		ac.Region = cfg.Region
	}
	if cfg.CACert != "" || cfg.ClientCert != "" || cfg.ClientKey != "" {
		if ac.TLSConfig == nil {
			ac.TLSConfig = &api.TLSConfig{}
		}
		if cfg.CACert != "" {
			ac.TLSConfig.CACert = cfg.CACert
		}
		if cfg.ClientCert != "" || cfg.ClientKey != "" {
			ac.TLSConfig.ClientCert, ac.TLSConfig.ClientKey = cfg.ClientCert, cfg.ClientKey
		}
	}
	if u, err := url.Parse(ac.Address); err == nil && u.Scheme != "unix" && strings.Trim(u.Path, "/") != "" {
		// The API client keeps the scheme and host alone: every request would go to the host's
		// root, and whatever answers there (a proxy's other routes) would be taken for Nomad.
		return Conn{}, fmt.Errorf("nomad address %q has a path, %q, which the Nomad API client does not use: "+
			"it would send /v1/... to the root of %s; give an address that serves Nomad's API at its root", ac.Address, u.Path, u.Host)
	}
	c, err := api.NewClient(ac)
	if err != nil {
		return Conn{}, fmt.Errorf("nomad client for %s: %w", ac.Address, err)
	}
	return Conn{Client: c, Namespace: ac.Namespace, Address: ac.Address}, nil
}
