package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpufrac/gpufrac/controller"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
)

// cmdController runs the fleet escalation loop until interrupted (docs/plugin.md).
func cmdController(ctx context.Context, g *globals, args []string, stdout, stderr io.Writer) error {
	g.defaultLevel = "info"
	fs := controllerFlags(g, stderr)
	addr := fs.String("nomad-addr", os.Getenv("NOMAD_ADDR"), "Nomad address (default $NOMAD_ADDR)")
	tokenFile := fs.String("nomad-token-file", "", "file holding the controller's Nomad ACL token (default $NOMAD_TOKEN)")
	ns := fs.String("nomad-namespace", os.Getenv("NOMAD_NAMESPACE"), "namespace of the violation and template variables (default $NOMAD_NAMESPACE or default)")
	dryRun := fs.Bool("dry-run", false, "only say what would be done: no job, template or violation is written")
	asJSON := fs.Bool("json", false, "print each event as one JSON object per line on stdout")
	retry := fs.Duration("retry", 5*time.Second, "pause after a Nomad API error")
	metricsAddr := fs.String("metrics-addr", "", `serve Prometheus metrics at http://ADDR/metrics ("host:port", or ":port" on every interface)`)
	if err := parseFlags(fs, g, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	if *retry < 100*time.Millisecond || *retry > time.Hour {
		return usagef("--retry %s: must be between 100ms and 1h", *retry)
	}
	var reg *prometheus.Registry
	var ln net.Listener
	if *metricsAddr != "" {
		// ":port" listens on every interface, as Prometheus exporters do: Prometheus scrapes
		// from another host.
		_, port, err := net.SplitHostPort(*metricsAddr)
		if err != nil || port == "" {
			return usagef("--metrics-addr %q: want host:port or :port", *metricsAddr)
		}
		// Listening now, so a taken port fails before anything else; served once the
		// controller's metrics are registered, so no scrape sees the runtime's alone.
		if ln, err = net.Listen("tcp", *metricsAddr); err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		defer ln.Close()
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	cfg := nomadvars.Config{Address: *addr, Token: os.Getenv("NOMAD_TOKEN"), TokenFile: *tokenFile, Namespace: *ns, Logger: g.logger}
	conn, err := nomadvars.NewAPIClient(cfg)
	if err != nil {
		return fmt.Errorf("nomad client: %w", err)
	}
	store, err := nomadvars.New(cfg)
	if err != nil {
		return fmt.Errorf("nomad template store: %w", err)
	}
	var mu sync.Mutex
	enc := json.NewEncoder(stdout)
	onEvent := func(ev controller.Event) {
		if !*asJSON {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(ev)
	}
	c, err := controller.New(controller.Config{Client: conn.Client, Namespace: conn.Namespace, Templates: store, DryRun: *dryRun,
		Logger: g.logger, OnEvent: onEvent, Retry: *retry, Registerer: registerer(reg)})
	if err != nil {
		return err
	}
	if ln != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		g.logger.Info("serving metrics", "address", "http://"+ln.Addr().String()+"/metrics")
	}
	g.logger.Info("controller following violations", "address", conn.Address, "namespace", conn.Namespace, "dry_run", *dryRun)
	if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// controllerFlags is the controller's flag set: only the flags it reads. The global flags of
// the other commands (state directory, GPU backend, simulated GPUs) mean nothing to a loop that
// talks to Nomad only, so they are not offered; the log level is, with its own default.
func controllerFlags(g *globals, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gpufrac controller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// The help shows the built-in default, not a level given before the command's name, which
	// stays in force.
	given := g.logLevel
	fs.StringVar(&g.logLevel, "log-level", g.defaultLevel, "log level: error, warn, info, debug or trace")
	g.logLevel = given
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: gpufrac controller [flags]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// registerer avoids handing the controller a typed nil inside the interface.
func registerer(reg *prometheus.Registry) prometheus.Registerer {
	if reg == nil {
		return nil
	}
	return reg
}
