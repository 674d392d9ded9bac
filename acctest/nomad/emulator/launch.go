package emulator

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	basepb "github.com/gpufrac/gpufrac/nomad-device/proto/base"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
)

// Nomad's go-plugin handshake values.
const (
	CookieKey   = "NOMAD_PLUGIN_MAGIC_COOKIE"
	CookieValue = "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255"
)

// Process is one launch of the plugin binary, connected over gRPC as a Nomad agent connects.
type Process struct {
	Base   basepb.BasePluginClient
	Device devicepb.DevicePluginClient
	// Handshake is the line the plugin printed on stdout.
	Handshake string

	cmd    *exec.Cmd
	conn   *grpc.ClientConn
	exited chan struct{}

	mu     sync.Mutex
	stdout bytes.Buffer // everything on stdout after the handshake line
	stderr bytes.Buffer
}

// Launch starts binary with the environment go-plugin's client sets, waits for the handshake
// line and dials the announced unix socket. env adds to the inherited environment.
func Launch(binary string, env []string, args ...string) (*Process, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(append(os.Environ(), env...),
		CookieKey+"="+CookieValue,
		"PLUGIN_PROTOCOL_VERSIONS=1",
		"PLUGIN_MIN_PORT=10000",
		"PLUGIN_MAX_PORT=25000",
	)
	p := &Process{cmd: cmd, exited: make(chan struct{})}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = &lockedWriter{mu: &p.mu, w: &p.stderr}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	lines := make(chan string, 1)
	rd := bufio.NewReader(out)
	go func() {
		line, err := rd.ReadString('\n')
		if err != nil {
			close(lines)
			return
		}
		lines <- strings.TrimRight(line, "\n")
		// Anything after the handshake would corrupt a line-based reader; keep it for checks.
		_, _ = io.Copy(&lockedWriter{mu: &p.mu, w: &p.stdout}, rd)
	}()
	select {
	case line, ok := <-lines:
		if !ok {
			p.Kill()
			return nil, fmt.Errorf("plugin exited before the handshake; stderr:\n%s", p.Stderr())
		}
		p.Handshake = line
	case <-time.After(20 * time.Second):
		p.Kill()
		return nil, fmt.Errorf("no handshake within 20s; stderr:\n%s", p.Stderr())
	}
	addr, err := parseHandshake(p.Handshake)
	if err != nil {
		p.Kill()
		return nil, err
	}
	conn, err := grpc.NewClient("unix:"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.Kill()
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	p.conn = conn
	p.Base = basepb.NewBasePluginClient(conn)
	p.Device = devicepb.NewDevicePluginClient(conn)
	return p, nil
}

// parseHandshake checks core-protocol|app-protocol|network|address|protocol[|cert] as
// go-plugin's client does, for a Nomad plugin: core 1, app 1, grpc, and no AutoMTLS
// certificate. go-plugin v1.7 servers always print the sixth field, empty without AutoMTLS.
func parseHandshake(line string) (string, error) {
	parts := strings.Split(line, "|")
	if len(parts) < 5 || len(parts) > 6 {
		return "", fmt.Errorf("handshake %q: want core|app|network|address|protocol[|cert]", line)
	}
	if len(parts) == 6 && parts[5] != "" {
		return "", fmt.Errorf("handshake %q: carries an AutoMTLS certificate, which a Nomad agent never asks for", line)
	}
	switch {
	case parts[0] != "1":
		return "", fmt.Errorf("handshake %q: core protocol %q, want 1", line, parts[0])
	case parts[1] != "1":
		return "", fmt.Errorf("handshake %q: app protocol %q, want 1", line, parts[1])
	case parts[2] != "unix":
		return "", fmt.Errorf("handshake %q: network %q, want unix", line, parts[2])
	case parts[4] != "grpc":
		return "", fmt.Errorf("handshake %q: protocol %q, want grpc (Nomad has no net/rpc plugins)", line, parts[4])
	}
	return parts[3], nil
}

// Stdout is what the plugin wrote to stdout after its handshake line: it must stay empty.
func (p *Process) Stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String()
}

// Stderr is the plugin's log output so far.
func (p *Process) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// Pid is the plugin's process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Kill ends the process as Nomad's loader does after its short launches, and waits for it.
func (p *Process) Kill() {
	if p.conn != nil {
		p.conn.Close()
	}
	_ = p.cmd.Process.Kill() // Launch hands out only started processes
	<-p.exited
}

// Info runs the fingerprint pass: PluginInfo then ConfigSchema.
func (p *Process) Info(ctx context.Context) (*basepb.PluginInfoResponse, *basepb.ConfigSchemaResponse, error) {
	info, err := p.Base.PluginInfo(ctx, &basepb.PluginInfoRequest{})
	if err != nil {
		return nil, nil, fmt.Errorf("PluginInfo: %w", err)
	}
	schema, err := p.Base.ConfigSchema(ctx, &basepb.ConfigSchemaRequest{})
	if err != nil {
		return nil, nil, fmt.Errorf("ConfigSchema: %w", err)
	}
	return info, schema, nil
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
