package emulator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	version "github.com/hashicorp/go-version"
	"google.golang.org/protobuf/types/known/durationpb"

	basepb "github.com/gpufrac/gpufrac/nomad-device/proto/base"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
)

// APIVersion is the only device plugin API a Nomad agent speaks.
const APIVersion = "v0.1.0"

// Options tune the emulated agent.
type Options struct {
	// Env is added to the plugin's environment (the agent's environment is inherited).
	Env []string
	// StatsInterval is the agent's telemetry collection_interval; 0 sends 0 (the plugin's 1s).
	StatsInterval time.Duration
}

// Client is an emulated Nomad client agent holding one long-running plugin process.
type Client struct {
	binary, hcl string
	opts        Options

	Info   *basepb.PluginInfoResponse
	Schema *basepb.ConfigSchemaResponse
	// Config is the msgpack SetConfig sends.
	Config     []byte
	apiVersion string

	mu       sync.Mutex
	proc     *Process
	all      []*Process
	cancel   context.CancelFunc
	latestFP *devicepb.FingerprintResponse
	fpGen    int
	history  []Received
	latestSt *devicepb.StatsResponse
	stGen    int
	changed  chan struct{}
	fatal    error
	used     map[string]bool
}

// Start launches the plugin as an agent does at start-up and returns once the long-running
// process has sent its first fingerprint. An error here is one that would stop the agent.
func Start(binary, hclConfig string) (*Client, error) {
	return StartWith(binary, hclConfig, Options{})
}

// StartWith is Start with options.
func StartWith(binary, hclConfig string, opts Options) (*Client, error) {
	c := &Client{binary: binary, hcl: hclConfig, opts: opts, used: map[string]bool{},
		changed: make(chan struct{}, 1)}
	if err := c.boot(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Client) launch() (*Process, error) {
	p, err := Launch(c.binary, c.opts.Env)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.all = append(c.all, p)
	c.mu.Unlock()
	return p, nil
}

// boot is the agent start sequence: fingerprint pass, config validation pass, long-running.
func (c *Client) boot() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	p, err := c.launch()
	if err != nil {
		return fmt.Errorf("fingerprint pass: %w", err)
	}
	info, schema, err := p.Info(ctx)
	p.Kill()
	if err != nil {
		return fmt.Errorf("fingerprint pass: %w", err)
	}
	if err := c.checkInfo(info); err != nil {
		return err
	}
	c.Info, c.Schema = info, schema
	if schema.GetSpec() == nil {
		return errors.New("plugin returned no config schema: a config block would be refused")
	}
	if c.Config, err = EncodeConfig(schema.GetSpec(), c.hcl); err != nil {
		return err
	}

	p, err = c.launch()
	if err != nil {
		return fmt.Errorf("config validation pass: %w", err)
	}
	for i := 0; i < 2; i++ {
		if _, err = p.Base.SetConfig(ctx, &basepb.SetConfigRequest{MsgpackConfig: c.Config, PluginApiVersion: c.apiVersion}); err != nil {
			break
		}
	}
	p.Kill()
	if err != nil {
		return fmt.Errorf("config validation pass: SetConfig: %w", err)
	}
	return c.startLongRunning(ctx)
}

// checkInfo applies the loader's checks on PluginInfo and negotiates the API version.
func (c *Client) checkInfo(info *basepb.PluginInfoResponse) error {
	if info.GetType() != basepb.PluginType_DEVICE {
		return fmt.Errorf("PluginInfo: type %v, want DEVICE", info.GetType())
	}
	if _, err := version.NewVersion(info.GetPluginVersion()); err != nil {
		return fmt.Errorf("PluginInfo: plugin_version %q does not parse: %w", info.GetPluginVersion(), err)
	}
	if len(info.GetPluginApiVersions()) == 0 {
		return errors.New("PluginInfo: no plugin_api_versions")
	}
	want := version.Must(version.NewVersion(APIVersion))
	for _, v := range info.GetPluginApiVersions() {
		pv, err := version.NewVersion(v)
		if err != nil {
			return fmt.Errorf("PluginInfo: api version %q does not parse: %w", v, err)
		}
		if pv.Equal(want) {
			c.apiVersion = v
			return nil
		}
	}
	return fmt.Errorf("PluginInfo: api versions %v do not include %s: the agent would skip the plugin", info.GetPluginApiVersions(), APIVersion)
}

func (c *Client) startLongRunning(ctx context.Context) error {
	p, err := c.launch()
	if err != nil {
		return fmt.Errorf("long-running launch: %w", err)
	}
	_, err = p.Base.SetConfig(ctx, &basepb.SetConfigRequest{
		MsgpackConfig:    c.Config,
		PluginApiVersion: c.apiVersion,
		NomadConfig:      &basepb.NomadConfig{Driver: &basepb.NomadDriverConfig{ClientMinPort: 14000, ClientMaxPort: 14512}},
	})
	if err != nil {
		p.Kill()
		return fmt.Errorf("long-running launch: SetConfig: %w", err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	stream, err := p.Device.Fingerprint(sctx, &devicepb.FingerprintRequest{})
	if err != nil {
		cancel()
		p.Kill()
		return fmt.Errorf("opening the fingerprint stream: %w", err)
	}
	c.mu.Lock()
	c.proc, c.cancel, c.latestFP, c.latestSt = p, cancel, nil, nil
	c.mu.Unlock()
	first := make(chan struct{})
	go c.readFingerprints(sctx, p, stream, first)
	select {
	case <-first:
	case <-p.Exited():
		return fmt.Errorf("plugin exited before its first fingerprint; stderr:\n%s", p.Stderr())
	case <-time.After(50 * time.Second): // the agent's batchFirstFingerprintsTimeout
		return fmt.Errorf("no first fingerprint within 50s")
	}
	return c.Err()
}

func (c *Client) readFingerprints(ctx context.Context, p *Process, stream devicepb.DevicePlugin_FingerprintClient, first chan struct{}) {
	n := 0
	for {
		msg, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil {
				c.fail(fmt.Errorf("fingerprint stream ended (%w): Nomad would disable the plugin", err))
			}
			if n == 0 {
				close(first)
			}
			return
		}
		if err := ValidateFingerprint(msg); err != nil {
			c.fail(fmt.Errorf("invalid fingerprint: %w: Nomad would disable the plugin", err))
		}
		c.mu.Lock()
		c.latestFP = msg
		c.fpGen++
		c.history = append(c.history, Received{At: time.Now(), Msg: msg})
		c.mu.Unlock()
		c.signal()
		n++
		if n == 1 {
			go c.readStats(ctx, p)
			close(first)
		}
	}
}

func (c *Client) readStats(ctx context.Context, p *Process) {
	stream, err := p.Device.Stats(ctx, &devicepb.StatsRequest{CollectionInterval: durationpb.New(c.opts.StatsInterval)})
	if err != nil {
		return // the agent retries with backoff; tests look at Stats() instead
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return
		}
		if err := ValidateStats(msg); err != nil {
			c.fail(err)
		}
		if len(msg.GetGroups()) == 0 {
			continue // the agent ignores empty stats
		}
		c.mu.Lock()
		c.latestSt = msg
		c.stGen++
		c.mu.Unlock()
		c.signal()
	}
}

func (c *Client) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.fatal == nil {
		c.fatal = err
	}
	c.mu.Unlock()
	c.signal()
}

// Err is the first protocol violation seen on the long-running process, or nil.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fatal
}

// Latest is the newest fingerprint: what the agent advertises now.
func (c *Client) Latest() *devicepb.FingerprintResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latestFP
}

// Received is one fingerprint message and when the agent received it.
type Received struct {
	At  time.Time
	Msg *devicepb.FingerprintResponse
}

// Fingerprints are every fingerprint message received so far, oldest first: when the plugin
// pushed a change, not only what it advertises now.
func (c *Client) Fingerprints() []Received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.history)
}

// Stats is the newest non-empty stats message, or nil.
func (c *Client) Stats() *devicepb.StatsResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.latestSt
}

// WaitFingerprint waits until the latest fingerprint satisfies ok.
func (c *Client) WaitFingerprint(timeout time.Duration, ok func(*devicepb.FingerprintResponse) bool) (*devicepb.FingerprintResponse, error) {
	return wait(c, timeout, func() (*devicepb.FingerprintResponse, bool) {
		m := c.Latest()
		return m, m != nil && ok(m)
	})
}

// WaitStats waits until the latest stats message satisfies ok.
func (c *Client) WaitStats(timeout time.Duration, ok func(*devicepb.StatsResponse) bool) (*devicepb.StatsResponse, error) {
	return wait(c, timeout, func() (*devicepb.StatsResponse, bool) {
		m := c.Stats()
		return m, m != nil && ok(m)
	})
}

func wait[T any](c *Client, timeout time.Duration, get func() (T, bool)) (T, error) {
	deadline := time.After(timeout)
	for {
		v, ok := get()
		if ok {
			return v, nil
		}
		if err := c.Err(); err != nil {
			return v, err
		}
		select {
		case <-c.changed:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			return v, fmt.Errorf("condition not met within %s", timeout)
		}
	}
}

// Schedule picks n healthy instances that no earlier Schedule holds, all from one group, as the
// scheduler does; the group is the first that has room, in fingerprint order.
func (c *Client) Schedule(n int) (group string, ids []string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.latestFP == nil {
		return "", nil, errors.New("no fingerprint yet")
	}
	for _, g := range c.latestFP.GetDeviceGroup() {
		var free []string
		for _, d := range g.GetDevices() {
			if d.GetHealthy() && !c.used[d.GetID()] {
				free = append(free, d.GetID())
			}
		}
		if len(free) >= n {
			for _, id := range free[:n] {
				c.used[id] = true
			}
			return g.GetVendor() + "/" + g.GetDeviceType() + "/" + g.GetDeviceName(), free[:n], nil
		}
	}
	return "", nil, fmt.Errorf("no device group has %d free healthy instances", n)
}

// Unschedule returns instances to the scheduler's pool, as when their allocation stops.
func (c *Client) Unschedule(ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		delete(c.used, id)
	}
}

// Reserve is the device hook: it refuses, without calling the plugin, IDs that no single group
// of the latest fingerprint holds, and otherwise calls Reserve. A nil container_res is an error
// because the real hook would dereference it.
func (c *Client) Reserve(ids []string) (*devicepb.ContainerReservation, error) {
	c.mu.Lock()
	fp := c.latestFP
	c.mu.Unlock()
	found := false
	for _, g := range fp.GetDeviceGroup() {
		have := map[string]bool{}
		for _, d := range g.GetDevices() {
			have[d.GetID()] = true
		}
		all := true
		for _, id := range ids {
			all = all && have[id]
		}
		found = found || all
	}
	if !found {
		return nil, fmt.Errorf("unknown device %v: no group of the latest fingerprint holds all of them", ids)
	}
	return c.ReserveRaw(ids)
}

// ReserveRaw calls the plugin's Reserve with ids as given, skipping the hook's check.
func (c *Client) ReserveRaw(ids []string) (*devicepb.ContainerReservation, error) {
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := p.Device.Reserve(ctx, &devicepb.ReserveRequest{DeviceIds: slices.Clone(ids)})
	if err != nil {
		return nil, err
	}
	if resp.GetContainerRes() == nil {
		return nil, errors.New("the plugin's Reserve returned no container_res: the device hook would crash")
	}
	return resp.GetContainerRes(), nil
}

// Restart is an agent restart: the running plugin is killed, then the whole start sequence runs
// again. Scheduled instances stay scheduled, as allocations survive an agent restart.
func (c *Client) Restart() error {
	c.stop()
	return c.boot()
}

// Relaunch is what the agent's instance manager does when the plugin process dies: it kills
// nothing else, launches the binary once more, calls SetConfig and reopens the streams.
func (c *Client) Relaunch() error {
	c.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.startLongRunning(ctx)
}

// Process is the long-running plugin process.
func (c *Client) Process() *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc
}

// Launches are every process started so far, the short-lived ones included.
func (c *Client) Launches() []*Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.all)
}

func (c *Client) stop() {
	c.mu.Lock()
	p, cancel := c.proc, c.cancel
	c.proc, c.cancel = nil, nil
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if p != nil {
		p.Kill()
	}
}

// Close kills the plugin.
func (c *Client) Close() { c.stop() }
