package varserver

import (
	"testing"

	"github.com/hashicorp/nomad/api"
)

// Client is a Nomad API client of the server that presents token ("" presents none); a client
// that cannot be made fails tb.
func (s *Server) Client(tb testing.TB, token string) *api.Client {
	tb.Helper()
	cfg := api.DefaultConfig()
	cfg.Address, cfg.SecretID = s.URL(), token
	c, err := api.NewClient(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
