package testutil

import (
	"net"
	"testing"
)

// FreePort is a loopback TCP port nobody listened on a moment ago, for a server under test to
// listen on (a metrics endpoint, a Nomad API stand-in).
func FreePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return port
}
