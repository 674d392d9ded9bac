// Command varserver serves the gpufrac Nomad Variables test server on 127.0.0.1 for shell-level
// acceptance tests (OpenTofu, the device plugin). It prints its base URL on stdout, one line,
// and serves until SIGINT or SIGTERM. Not for production: state lives in memory only.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/gpufrac/gpufrac/internal/varserver"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address; must be 127.0.0.1:<port> (0 picks a free port)")
	mgmt := flag.String("management-token", "", "if set, turn ACLs on and accept this token for everything")
	readTok := flag.String("read-token", "", "if set, turn ACLs on and accept this token for read and list under -read-path")
	readPath := flag.String("read-path", "gpufrac/*", "path glob the -read-token may read and list")
	writeTok := flag.String("write-token", "", "if set, turn ACLs on and accept this token for read, list, write and destroy under -read-path")
	addrFile := flag.String("addr-file", "", "also write the URL to this file (written atomically once listening)")
	flag.Parse()

	s, err := varserver.Start(varserver.Options{Addr: *addr})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *mgmt != "" {
		s.SetToken(*mgmt, varserver.Management()...)
	}
	if *readTok != "" {
		s.SetToken(*readTok, varserver.Rule{Namespace: "*", Path: *readPath, Capabilities: []string{varserver.CapRead, varserver.CapList}})
	}
	if *writeTok != "" {
		s.SetToken(*writeTok, varserver.Rule{Namespace: "*", Path: *readPath,
			Capabilities: []string{varserver.CapRead, varserver.CapList, varserver.CapWrite, varserver.CapDestroy}})
	}
	// The handler is in place before the address is announced: a caller that stops the server
	// as soon as it has used it must not kill it with its default SIGTERM action.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	if *addrFile != "" {
		tmp := *addrFile + ".tmp"
		err := os.WriteFile(tmp, []byte(s.URL()+"\n"), 0o644)
		if err == nil {
			err = os.Rename(tmp, *addrFile)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "varserver: addr-file:", err)
			os.Exit(1)
		}
	}
	fmt.Println(s.URL())
	fmt.Fprintf(os.Stderr, "varserver: serving Nomad Variables on %s (ACL tokens: %s)\n", s.URL(), tokenSummary(*mgmt, *readTok, *writeTok))

	<-sig
	s.Close()
}

// tokenSummary says which kinds of token are on without printing any secret.
func tokenSummary(mgmt, read, write string) string {
	var kinds []string
	for _, k := range [][2]string{{"management", mgmt}, {"read", read}, {"write", write}} {
		if k[1] != "" {
			kinds = append(kinds, k[0])
		}
	}
	if len(kinds) == 0 {
		return "none, ACLs off"
	}
	return strings.Join(kinds, ", ")
}
