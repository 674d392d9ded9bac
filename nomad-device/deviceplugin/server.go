package deviceplugin

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	"github.com/hashicorp/go-hclog"

	basepb "github.com/gpufrac/gpufrac/nomad-device/proto/base"
)

// Identity reported to Nomad. Nomad keys a plugin by (name, type) and accepts API v0.1.0 only.
const (
	PluginName = "gpufrac"
	APIVersion = "v0.1.0"
	// Vendor and DeviceType make the device name jobs ask for: device "nvidia/gpumem".
	Vendor     = "nvidia"
	DeviceType = "gpumem"
)

// Options configure a Server.
type Options struct {
	Logger hclog.Logger
	// Version is reported as plugin_version; Nomad parses it with go-version.
	Version string
	// devRoot replaces /dev when listing device nodes (tests only).
	devRoot string
}

// Server is the plugin. SetConfig only stores the configuration; GPUs, the ledger, the policy
// source and the enforcer start on the first Fingerprint (or Reserve/Stats) call, because Nomad
// launches the binary three times at agent start and a slow or failing SetConfig stops the agent.
type Server struct {
	log  hclog.Logger
	opts Options

	mu  sync.Mutex
	cfg *Config
	rt  *runtime
	// ctx lives as long as the process; the runtime's goroutines use it.
	ctx    context.Context
	cancel context.CancelFunc
}

// NewServer returns a plugin waiting for SetConfig.
func NewServer(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Version == "" {
		opts.Version = "0.1.0"
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{log: opts.Logger.Named("gpufrac"), opts: opts, ctx: ctx, cancel: cancel}
}

// PluginInfo identifies the plugin.
func (s *Server) PluginInfo() *basepb.PluginInfoResponse {
	return &basepb.PluginInfoResponse{
		Type:              basepb.PluginType_DEVICE,
		PluginApiVersions: []string{APIVersion},
		PluginVersion:     s.opts.Version,
		Name:              PluginName,
	}
}

// SetConfig decodes and validates the configuration and stores it. It is idempotent. After the
// runtime has started, a different configuration is refused: Nomad never sends one to a running
// plugin (it relaunches the binary), so this only catches misuse.
func (s *Server) SetConfig(msgpackConfig []byte, apiVersion string) error {
	if apiVersion != "" && apiVersion != APIVersion && apiVersion != APIVersion[1:] {
		return fmt.Errorf("gpufrac: Nomad negotiated device plugin API %q; this plugin speaks %s only", apiVersion, APIVersion)
	}
	cfg, err := ParseConfig(msgpackConfig)
	if err == nil && cfg.Enabled {
		err = checkPaths(cfg)
	}
	if err != nil {
		s.log.Error("configuration refused", "error", err)
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rt != nil && !reflect.DeepEqual(*s.cfg, cfg) {
		return fmt.Errorf("gpufrac: the configuration cannot change while the plugin runs; restart the Nomad agent to apply it")
	}
	s.cfg = &cfg
	s.log.Debug("configuration set", "enabled", cfg.Enabled, "gpu_backend", cfg.GPUBackend, "state_dir", cfg.StateDir,
		"policy_source", policySourceName(cfg))
	return nil
}

// config is the stored configuration, or the defaults when Nomad sent none.
func (s *Server) config() Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg == nil {
		cfg, err := ParseConfig(nil)
		if err != nil {
			panic(err) // the defaults are constants; TestDefaults guards them
		}
		s.cfg = &cfg
	}
	return *s.cfg
}

// runtime starts the GPUs, ledger, policy source and enforcer once and returns them. Failures do
// not fail the call: they are recorded in the runtime, shown as unhealthy units and retried.
func (s *Server) runtime() *runtime {
	cfg := s.config()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rt == nil {
		s.rt = startRuntime(s.ctx, cfg, s.log, s.opts.devRoot)
	}
	return s.rt
}

// Shutdown stops the runtime and releases the ledger lock. Nomad kills the process instead; this
// exists for tests and benchmarks that run many servers in one process.
func (s *Server) Shutdown() {
	s.cancel()
	s.mu.Lock()
	rt := s.rt
	s.mu.Unlock()
	if rt != nil {
		rt.close()
	}
}
