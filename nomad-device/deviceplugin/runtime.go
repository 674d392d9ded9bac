package deviceplugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/hub"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// taskEnforcer is what the plugin needs from the enforcer besides admission (the node's): get a
// GPU's daemon ready, a reservation's current memory use and the processes that carry it.
type taskEnforcer interface {
	PrepareGPU(ctx context.Context, uuid string) error
	TaskUsage(token string) (size.Bytes, bool)
	Holders(token string) ([]int, error)
}

// runtime is everything that starts after SetConfig: GPUs, ledger, policy, enforcer. A part that
// fails to start is retried every fingerprint_period; until then the fingerprint says why.
type runtime struct {
	cfg     Config
	log     hclog.Logger
	devRoot string
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu         sync.Mutex
	backend    gpu.Backend
	backendErr error
	led        *ledger.Ledger
	ledgerErr  error
	// ledgerDir is where the ledger is (cfg.LedgerDir, or the earlier version's directory
	// while its ledger cannot be moved: adoptLedger).
	ledgerDir string
	enf       taskEnforcer
	enforcer  *enforcer.Enforcer // the same as enf; kept for Shutdown
	// nd admits tasks: the ledger and the enforcer joined, set once both run.
	nd       *node.Node
	fenceErr error                 // why the configured allocation fence cannot run
	devices  map[string]gpu.Device // by UUID, from the last listing
	// vanished holds the GPUs an earlier listing had and the last one lacks (fallen off the
	// bus, say), by UUID, until a listing has them again: the ledger forgets such a GPU when
	// it holds no reservation, and the plugin must still say why its units went and refuse
	// a Reserve that Nomad placed there from an older fingerprint.
	vanished map[string]gpu.Device
	// ignoredNow holds the GPUs of the last listing that ignored_gpu_ids names, by UUID: the
	// ledger keeps one that tasks still held units on when it was ignored (and calls it no
	// longer detected), and Reserve must say why it refuses its IDs.
	ignoredNow map[string]gpu.Device
	// enforcerErr is why the enforcer could not start (no task is admitted without it).
	enforcerErr error
	// cfgErr is set when the first GPU listing shows that ignored_gpu_ids or gpu_modes name a
	// GPU the node does not have: Fingerprint fails with it, as Nomad expects of a plugin
	// whose configuration cannot work, and Reserve refuses. idsChecked is set after that look.
	cfgErr     error
	idsChecked bool

	// policyReady is false while a policy source is configured but has not yet delivered a valid
	// policy in this process; policyErr is the source's latest complaint.
	policyReady bool
	policyErr   error
	policyDone  chan struct{} // closed once policyReady
	// mpsDown holds, per GPU in mps mode, why its control daemon cannot be readied; mpsReady
	// the GPUs whose daemon was readied once (the enforcer's health check takes over from there).
	mpsDown  map[string]string
	mpsReady map[string]bool
	// preparing is set while prepareMPS's pass runs; prepAgain asks for one more pass, and
	// prepRetry for one that also retries the GPUs that failed.
	preparing, prepAgain, prepRetry atomic.Bool
	// readFaults holds, per GPU and stat, why the backend cannot give that reading (logged once).
	readFaults map[string]string
	// viol counts violations for the metrics, from the ledger's list (violations.go).
	viol *violationMetrics

	// changed wakes the fingerprint streams (coalesced).
	changed *hub.Hub[struct{}]
}

func startRuntime(parent context.Context, cfg Config, log hclog.Logger, devRoot string) *runtime {
	ctx, cancel := context.WithCancel(parent)
	rt := &runtime{cfg: cfg, log: log, devRoot: devRoot, ctx: ctx, cancel: cancel,
		changed: hub.New[struct{}](1), devices: map[string]gpu.Device{}, vanished: map[string]gpu.Device{}, mpsDown: map[string]string{}, mpsReady: map[string]bool{},
		viol: newViolationMetrics()}
	rt.policyDone = make(chan struct{})
	if policySourceName(cfg) == "" {
		rt.policyReady = true
		close(rt.policyDone)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		log.Error("cannot create state_dir; GPUs stay unavailable until it can be created", "state_dir", cfg.StateDir, "error", err)
	}
	rt.open()
	rt.startMetrics()
	rt.wg.Add(1)
	go rt.loop()
	return rt
}

// open starts what is not running yet: backend, ledger, policy source, enforcer.
func (rt *runtime) open() {
	rt.mu.Lock()
	if rt.backend == nil {
		b, err := gpu.Open(rt.cfg.GPUBackend, gpu.OpenOptions{SimGPUs: rt.cfg.SimulatedGPUs, SimDir: rt.cfg.SimulatedDir, Logger: rt.log,
			Health: gpu.HealthOptions{IgnoredXIDs: rt.cfg.IgnoredXIDs}})
		rt.backendErr = err
		if err == nil {
			// Only on success: on error Open may hand back a typed nil inside the interface.
			rt.backend = b
		}
		if err != nil {
			rt.log.Error("GPU backend unavailable: no GPU is advertised until it works; retrying every fingerprint_period",
				"gpu_backend", rt.cfg.GPUBackend, "error", err, "retry", rt.cfg.FingerprintPeriod)
		} else {
			rt.log.Info("GPU backend ready", "kind", b.Kind(), "driver", b.DriverVersion())
		}
	}
	openedLedger := false
	if rt.led == nil {
		rt.ledgerDir = adoptLedger(rt.cfg, rt.log)
		l, _, err := node.OpenLedger(rt.ledgerDir, ledger.Options{Logger: rt.log, Grace: rt.cfg.ReservationGrace, BorrowHold: rt.cfg.borrowHold()})
		rt.led, rt.ledgerErr = l, err
		if err != nil {
			rt.log.Error("ledger unavailable: GPU units are advertised unhealthy until it opens; retrying every fingerprint_period",
				"dir", rt.ledgerDir, "error", err, "retry", rt.cfg.FingerprintPeriod)
		} else {
			openedLedger = true
		}
	}
	ready := rt.led != nil && rt.backend != nil && rt.enf == nil
	rt.mu.Unlock()

	if openedLedger {
		rt.viol.baseline(rt.led.Violations())
		// Subscribed here, not in the goroutine: a change made before a slow goroutine
		// subscribed would never reach the fingerprint stream.
		ch, cancel := rt.led.Subscribe()
		rt.wg.Add(1)
		go rt.forwardLedger(ch, cancel)
		if policySourceName(rt.cfg) == "" {
			p := policy.Default()
			p.UnitBytes = rt.cfg.Unit
			if err := rt.led.SetPolicy(p); err != nil {
				rt.log.Error("default policy refused", "error", err)
			}
		} else {
			rt.startPolicy()
		}
	}
	if ready {
		rt.startEnforcer()
	}
	rt.relist()
}

// healthPeriod is how often the GPU backend is asked whether a GPU's health changed (a fault
// it reports, MIG turned on, a GPU it no longer lists), between the full re-listings of
// fingerprint_period: a GPU going bad must not stay placeable for a minute.
const healthPeriod = time.Second

// loop re-lists GPUs and retries failed parts every fingerprint_period, and re-lists at once
// when a look every healthPeriod finds a GPU's health or presence changed.
func (rt *runtime) loop() {
	defer rt.wg.Done()
	t := time.NewTicker(rt.cfg.FingerprintPeriod)
	defer t.Stop()
	h := time.NewTicker(min(healthPeriod, rt.cfg.FingerprintPeriod))
	defer h.Stop()
	for {
		select {
		case <-rt.ctx.Done():
			return
		case <-h.C:
			if rt.healthChanged() {
				rt.relist()
			}
		case <-t.C:
			rt.mu.Lock()
			missing := rt.backend == nil || rt.led == nil || rt.enf == nil
			rt.mu.Unlock()
			if missing {
				rt.open()
			} else {
				rt.relist()
			}
		}
	}
}

// healthChanged lists the GPUs and says whether one the plugin advertises changed its health
// or its reason, appeared or went since the last listing. A failed listing is no change: the
// re-listing every fingerprint_period logs it.
func (rt *runtime) healthChanged() bool {
	b := rt.backendOrNil()
	if b == nil || rt.configErr() != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(rt.ctx, readingTimeout)
	defer cancel()
	devs, err := b.Devices(ctx)
	if err != nil {
		return false
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	n := 0
	for _, d := range devs {
		if rt.ignored(d) {
			continue
		}
		n++
		was, ok := rt.devices[d.UUID]
		if !ok || !was.SameHealth(d) {
			return true
		}
	}
	return n != len(rt.devices)
}

// knownGPUs are the GPUs the fingerprint shows while the ledger is not open: those of the
// ledger's last committed file, else those the backend lists, in index order.
func (rt *runtime) knownGPUs() []gpu.Device {
	rt.mu.Lock()
	dir := rt.ledgerDir
	devs := slices.Collect(maps.Values(rt.devices))
	rt.mu.Unlock()
	if snap, err := ledger.ReadSnapshot(dir); err == nil && len(snap.GPUs) > 0 {
		devs = devs[:0]
		for _, g := range snap.GPUs {
			devs = append(devs, gpu.Device{UUID: g.UUID, Model: g.Model, Index: g.Index, MemoryBytes: g.TotalBytes})
		}
	}
	slices.SortFunc(devs, func(a, b gpu.Device) int { return cmp.Or(a.Index-b.Index, strings.Compare(a.UUID, b.UUID)) })
	return devs
}

func (rt *runtime) backendOrNil() gpu.Backend {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.backend
}

func (rt *runtime) forwardLedger(ch <-chan struct{}, cancel func()) {
	defer rt.wg.Done()
	defer cancel()
	forward(rt.ctx, ch, func(struct{}) {
		rt.notify()
		// A GPU may have entered mps mode (policy, gpu_modes): say now whether it can serve.
		rt.prepareMPS(false)
	})
}

// forward calls fn with each value from ch until ctx ends or ch closes.
func forward[T any](ctx context.Context, ch <-chan T, fn func(T)) {
	for {
		select {
		case <-ctx.Done():
			return
		case v, ok := <-ch:
			if !ok {
				return
			}
			fn(v)
		}
	}
}

// relist syncs the ledger with the GPUs the backend sees now, minus ignored_gpu_ids.
func (rt *runtime) relist() {
	rt.mu.Lock()
	b, l := rt.backend, rt.led
	rt.mu.Unlock()
	if b == nil {
		rt.notify()
		return
	}
	ctx, cancel := context.WithTimeout(rt.ctx, 30*time.Second)
	defer cancel()
	devs, err := b.Devices(ctx)
	if err != nil {
		// Keep the last inventory: dropping GPUs on one failed listing would flap every unit.
		rt.log.Error("listing GPUs failed; keeping the last inventory", "error", err)
		rt.notify()
		return
	}
	if rt.configErr() != nil {
		return // refused: nothing is advertised, so nothing is synced into the ledger either
	}
	if !rt.idsChecked {
		// Once, at the first listing: a GPU that falls off the bus later must not turn a
		// running plugin's config into an error.
		rt.idsChecked = true
		if err := checkGPUIDs(rt.cfg, devs); err != nil {
			rt.log.Error("configuration refused: it names GPUs this node does not have; nothing is advertised", "error", err)
			rt.mu.Lock()
			rt.cfgErr = err
			rt.mu.Unlock()
			rt.notify()
			return
		}
	}
	byUUID := make(map[string]gpu.Device, len(devs))
	ignored := map[string]gpu.Device{}
	for _, d := range devs {
		if !rt.ignored(d) {
			byUUID[d.UUID] = d
		} else {
			ignored[d.UUID] = d
		}
	}
	if len(byUUID) == 0 {
		rt.log.Warn("no GPU to advertise", "found", len(devs), "ignored_gpu_ids", rt.cfg.IgnoredGPUIDs)
	}
	rt.mu.Lock()
	for u, d := range rt.devices {
		if _, ok := byUUID[u]; !ok {
			rt.vanished[u] = d
			rt.log.Warn("GPU no longer detected by the GPU backend: its units are unhealthy and nothing is admitted on it until it is back",
				"gpu", u, "index", d.Index, "model", d.Model)
		}
	}
	for u := range byUUID {
		if _, ok := rt.vanished[u]; ok {
			delete(rt.vanished, u)
			rt.log.Info("GPU detected again", "gpu", u)
		}
	}
	rt.devices, rt.ignoredNow = byUUID, ignored
	rt.mu.Unlock()
	if l == nil {
		// The GPUs still show (without units) so operators see why in the group's status.
		rt.notify()
		return
	}
	if err := node.SyncGPUs(l, devs, rt.ignored); err != nil {
		rt.log.Error("recording the GPU inventory in the ledger failed", "error", err)
	}
	// Every advertised GPU gets its mode from this config: a GPU without a gpu_modes entry
	// follows the policy (""), whatever mode an earlier config or `gpufrac run` left in the
	// ledger, which keeps a GPU's mode across restarts.
	modes := make(map[string]policy.Mode, len(byUUID))
	for uuid := range byUUID {
		modes[uuid] = ""
	}
	for key, m := range rt.cfg.GPUModes {
		uuid := key
		if i, err := strconv.Atoi(key); err == nil {
			uuid = ""
			for _, d := range devs {
				if d.Index == i {
					uuid = d.UUID
				}
			}
		}
		if _, ok := byUUID[uuid]; !ok {
			rt.log.Warn("gpu_modes names no advertised GPU", "key", key, "mode", m)
			continue
		}
		modes[uuid] = m
	}
	for uuid, m := range modes {
		if err := l.SetMode(uuid, m); err != nil {
			rt.log.Error("setting the GPU's mode failed", "gpu", uuid, "mode", m, "error", err)
		}
	}
	rt.prepareMPS(true)
	rt.notify()
}

// prepareMPS readies the control daemon of every mps-mode GPU that has not had one yet, in the
// background (a control command may take its whole timeout), so that a GPU whose daemon cannot
// start shows its units unhealthy before Nomad places a task there. retry also takes the GPUs
// whose daemon failed before (every fingerprint_period); without it only GPUs never tried are
// taken, which is what a ledger change asks for: a GPU that just entered mps mode, by a new
// policy or gpu_modes, must show at once whether it can serve, not a fingerprint_period later.
// A call while a pass runs is not lost: the pass runs again, so a GPU whose mode changed
// during it is not left out.
func (rt *runtime) prepareMPS(retry bool) {
	if retry {
		rt.prepRetry.Store(true)
	}
	rt.prepAgain.Store(true)
	if !rt.preparing.CompareAndSwap(false, true) {
		return
	}
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		for {
			rt.prepAgain.Store(false)
			rt.prepareOnce(rt.prepRetry.Swap(false))
			rt.preparing.Store(false)
			// A call that came during the pass and found it running left prepAgain set.
			if !rt.prepAgain.Load() || rt.ctx.Err() != nil || !rt.preparing.CompareAndSwap(false, true) {
				return
			}
		}
	}()
}

func (rt *runtime) prepareOnce(retry bool) {
	_, l, enf := rt.parts()
	if l == nil || enf == nil {
		return
	}
	var todo []string
	states := l.States()
	rt.mu.Lock()
	for _, st := range states {
		if st.Mode != policy.ModeMPS {
			// What its daemon did belongs to the mode the GPU left: kept, it would mark an
			// isolated GPU down in the metrics, and keep the GPU's next entry into mps mode
			// from readying the daemon at once.
			delete(rt.mpsDown, st.UUID)
			delete(rt.mpsReady, st.UUID)
			continue
		}
		_, failed := rt.mpsDown[st.UUID]
		if st.Mode == policy.ModeMPS && !rt.mpsReady[st.UUID] && (retry || !failed) {
			todo = append(todo, st.UUID)
		}
	}
	rt.mu.Unlock()
	for _, uuid := range todo {
		rt.setMPS(uuid, enf.PrepareGPU(rt.ctx, uuid))
	}
}

// setMPS records whether a GPU's MPS daemon could be readied, and re-fingerprints on a change.
func (rt *runtime) setMPS(uuid string, err error) {
	if errors.Is(err, enforcer.ErrMPSDied) {
		// Not a daemon that cannot start: the enforcer's health mark in the ledger says why the
		// GPU takes nothing, and clears it when the restarted daemon answers; the next
		// preparation finds it ready.
		return
	}
	rt.mu.Lock()
	before := rt.mpsDown[uuid]
	if err != nil {
		rt.mpsDown[uuid] = "MPS control daemon cannot start, so no task can be capped here: " + err.Error()
	} else {
		delete(rt.mpsDown, uuid)
		rt.mpsReady[uuid] = true
	}
	changed := before != rt.mpsDown[uuid]
	rt.mu.Unlock()
	if changed {
		if err != nil {
			rt.log.Error("MPS control daemon cannot start: the GPU's free units are unhealthy; retrying every fingerprint_period",
				"gpu", uuid, "error", err, "retry", rt.cfg.FingerprintPeriod)
		} else {
			rt.log.Info("MPS control daemon ready: the GPU's units are placeable again", "gpu", uuid)
		}
		rt.notify()
	}
}

// vanishedGPUs is a copy of rt.vanished.
func (rt *runtime) vanishedGPUs() []gpu.Device {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Collect(maps.Values(rt.vanished))
}

// descVanished is what the fingerprint and Reserve say about a GPU in rt.vanished.
const descVanished = "GPU no longer detected by the GPU backend: nothing is admitted on it until it is back"

// vanishedIn says why ids name a GPU that the backend no longer lists, or "".
func (rt *runtime) vanishedIn(ids []string) string {
	return rt.namedIn(ids, &rt.vanished, ": "+descVanished)
}

// namedIn says why ids name a GPU of *set, one of rt's maps that relist replaces under rt.mu
// (read here under it too): the first such GPU, with why after it; or "".
func (rt *runtime) namedIn(ids []string, set *map[string]gpu.Device, why string) string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, id := range ids {
		u, _, err := ledger.ParseInstanceID(id)
		if err != nil {
			continue // admission names the malformed ID
		}
		if d, ok := (*set)[u]; ok {
			return fmt.Sprintf("GPU %s (index %d, %s)%s", u, d.Index, d.Model, why)
		}
	}
	return ""
}

// descIgnored is what the fingerprint says about every unit of a GPU in ignored_gpu_ids that
// the ledger still lists, because tasks held units on it when it was ignored.
const descIgnored = "listed in ignored_gpu_ids: gpufrac admits nothing here; units held by running tasks stay listed until they end"

// ignoredIn says why ids name a GPU of the last listing that ignored_gpu_ids names, or "".
func (rt *runtime) ignoredIn(ids []string) string {
	return rt.namedIn(ids, &rt.ignoredNow, " is listed in ignored_gpu_ids: gpufrac admits nothing on it")
}

// ignoredUUIDs is the set of GPUs of the last listing that ignored_gpu_ids names.
func (rt *runtime) ignoredUUIDs() map[string]bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := make(map[string]bool, len(rt.ignoredNow))
	for u := range rt.ignoredNow {
		out[u] = true
	}
	return out
}

// gpuDown is a copy of the per-GPU reasons units of a GPU cannot be placed now.
func (rt *runtime) gpuDown() map[string]string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := make(map[string]string, len(rt.mpsDown))
	for k, v := range rt.mpsDown {
		out[k] = v
	}
	return out
}

func (rt *runtime) ignored(d gpu.Device) bool {
	return slices.Contains(rt.cfg.IgnoredGPUIDs, d.UUID) || slices.Contains(rt.cfg.IgnoredGPUIDs, strconv.Itoa(d.Index))
}

// subscribe returns a channel that receives (coalesced) whenever what the plugin advertises may
// have changed.
func (rt *runtime) subscribe() (<-chan struct{}, func()) { return rt.changed.Subscribe() }

func (rt *runtime) notify() { rt.changed.Publish(struct{}{}) }

// configErr is the configuration's refusal found at the first GPU listing, or nil.
func (rt *runtime) configErr() error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.cfgErr
}

// parts returns the current backend, ledger and enforcer (any may be nil) under the lock.
func (rt *runtime) parts() (gpu.Backend, *ledger.Ledger, taskEnforcer) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.backend, rt.led, rt.enf
}

// node is the node that admits tasks; nil until the enforcer runs (unavailable says so first).
func (rt *runtime) node() *node.Node {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.nd
}

// unavailable explains why units cannot be placed right now, or "" when they can.
func (rt *runtime) unavailable() string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	switch {
	case rt.cfgErr != nil:
		return rt.cfgErr.Error()
	case rt.backend == nil:
		// The ledger may still list GPUs from before a restart; none can be used unseen.
		return fmt.Sprintf("GPU backend %q unavailable: %v", rt.cfg.GPUBackend, rt.backendErr)
	case rt.led == nil:
		return fmt.Sprintf("gpufrac ledger in %s unavailable: %v", rt.ledgerDir, rt.ledgerErr)
	case !rt.policyReady:
		msg := "waiting for the first valid policy from " + policySourceName(rt.cfg)
		if rt.policyErr != nil {
			msg += ": " + rt.policyErr.Error()
		}
		return msg
	case rt.fenceErr != nil:
		return "the allocation fence is configured (fence = true) but cannot run: " + rt.fenceErr.Error()
	case rt.enf == nil:
		msg := "the enforcer is not running, so no cap would be watched"
		if rt.enforcerErr != nil {
			msg += ": " + rt.enforcerErr.Error()
		}
		return msg
	}
	return ""
}

func (rt *runtime) close() {
	rt.cancel()
	rt.wg.Wait()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var errs []error
	if rt.enforcer != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs = append(errs, rt.enforcer.Shutdown(ctx))
		cancel()
	}
	if rt.led != nil {
		errs = append(errs, rt.led.Close())
	}
	if rt.backend != nil {
		errs = append(errs, rt.backend.Close())
	}
	if err := errors.Join(errs...); err != nil {
		rt.log.Warn("shutdown", "error", err)
	}
}
