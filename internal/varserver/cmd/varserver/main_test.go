package main

import (
	"bufio"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpufrac/gpufrac/internal/testutil"
)

// TestMain lets the test binary double as the command, so the test needs no separate build.
func TestMain(m *testing.M) {
	if os.Getenv("VARSERVER_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestCommand(t *testing.T) {
	addrFile := t.TempDir() + "/addr"
	cmd := exec.Command(os.Args[0], "-management-token", "s3cr3t-mgmt", "-read-token", "s3cr3t-read", "-addr-file", addrFile)
	cmd.Env = append(os.Environ(), "VARSERVER_RUN_MAIN=1")
	out, stderr := testutil.StartPiped(t, cmd)
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("no address on stdout: %v (stderr %q)", err, stderr.String())
	}
	url := strings.TrimSpace(line)
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("address %q", url)
	}
	if b, err := os.ReadFile(addrFile); err != nil || strings.TrimSpace(string(b)) != url {
		t.Fatalf("addr file = %q, %v", b, err)
	}

	vars := func(tok string) *api.Variables {
		c, err := api.NewClient(&api.Config{Address: url, SecretID: tok})
		if err != nil {
			t.Fatal(err)
		}
		return c.Variables()
	}
	if _, _, err := vars("s3cr3t-mgmt").Create(&api.Variable{Path: "gpufrac/policy/default", Items: api.VariableItems{"a": "1"}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := vars("s3cr3t-read").Read("gpufrac/policy/default", nil); err != nil {
		t.Fatalf("read token: %v", err)
	}
	_, _, err = vars("s3cr3t-read").Create(&api.Variable{Path: "gpufrac/policy/x", Items: api.VariableItems{"a": "1"}}, nil)
	var ure api.UnexpectedResponseError
	if !errors.As(err, &ure) || ure.StatusCode() != http.StatusForbidden {
		t.Fatalf("read token write: %v", err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("did not exit on SIGTERM")
	}
	if strings.Contains(stderr.String(), "s3cr3t") {
		t.Fatalf("stderr may show a token: %q", stderr.String())
	}
}

func TestRefusesNonLoopback(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-addr", "0.0.0.0:0")
	cmd.Env = append(os.Environ(), "VARSERVER_RUN_MAIN=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "must be 127.0.0.1") {
		t.Fatalf("0.0.0.0 accepted: %v %s", err, out)
	}
}
