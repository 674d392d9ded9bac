package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/policy/nomadvars"
)

// policySourceName describes the configured policy source, or "" when none is configured (the
// token is never part of it).
func policySourceName(c Config) string {
	switch {
	case c.PolicyFile != "":
		return "policy_file " + c.PolicyFile + " (policy " + c.PolicyName + ")"
	case c.Nomad != nil:
		return "Nomad Variable " + policy.PolicyPath(c.Nomad.Name)
	}
	return ""
}

// startPolicy follows the configured policy source; each valid version becomes the ledger's
// policy, and the ledger's notification re-fingerprints. Invalid versions are ignored by the
// watcher, which keeps the last good one.
func (rt *runtime) startPolicy() {
	var src policy.PolicySource
	name := rt.cfg.PolicyName
	if rt.cfg.PolicyFile != "" {
		src = policy.NewFileStore(rt.cfg.PolicyFile, policy.FileOptions{})
	} else {
		np := rt.cfg.Nomad
		name = np.Name
		nc := np.connection()
		nc.Logger = rt.log
		store, err := nomadvars.New(nc)
		if err != nil {
			rt.setPolicyErr(err)
			rt.log.Error("policy source unusable: GPU units stay unavailable", "source", policySourceName(rt.cfg), "error", err)
			return
		}
		src = store
	}
	w := policy.NewWatcher(policy.WatcherConfig{
		Source:   &recordingSource{src: src, rt: rt},
		Name:     name,
		Logger:   rt.log,
		OnChange: func(p policy.Policy, _ policy.Meta) { rt.applyPolicy(p) },
	})
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		_ = w.Run(rt.ctx)
	}()
}

func (rt *runtime) applyPolicy(p policy.Policy) {
	if err := rt.led.SetPolicy(p); err != nil {
		rt.setPolicyErr(err)
		rt.log.Error("the ledger refused the policy", "error", err)
		return
	}
	rt.mu.Lock()
	first := !rt.policyReady
	rt.policyReady, rt.policyErr = true, nil
	rt.mu.Unlock()
	if first {
		close(rt.policyDone)
	}
	rt.notify()
}

func (rt *runtime) setPolicyErr(err error) {
	rt.mu.Lock()
	rt.policyErr = err
	rt.mu.Unlock()
	rt.notify()
}

// recordingSource keeps the source's latest complaint so the fingerprint can say why units are
// unavailable before the first valid policy.
type recordingSource struct {
	src policy.PolicySource
	rt  *runtime
}

func (r *recordingSource) WaitPolicy(ctx context.Context, name string, after uint64) (policy.Policy, policy.Meta, uint64, error) {
	p, m, idx, err := r.src.WaitPolicy(ctx, name, after)
	if err != nil && ctx.Err() == nil {
		if f := r.rt.cfg.PolicyFile; f != "" && errors.Is(err, policy.ErrNotFound) {
			// The file store reads a missing file as an empty one, which names the policy as
			// missing; the operator's problem is the file.
			if _, serr := os.Stat(f); errors.Is(serr, fs.ErrNotExist) {
				err = fmt.Errorf("policy_file %s: file not found", f)
			}
		}
		r.rt.setPolicyErr(err)
	}
	return p, m, idx, err
}

// waitPolicy gives a configured policy source up to d to deliver before the first fingerprint.
func (rt *runtime) waitPolicy(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-rt.policyDone:
	case <-ctx.Done():
	case <-t.C:
	}
}

// startEnforcer runs the watchdog (caps, unmanaged use, token scan, reservation expiry, what
// borrowers hold) and the MPS daemons for the plugin's life, and joins it with the ledger into
// the node that admits tasks. It needs the backend and the ledger.
func (rt *runtime) startEnforcer() {
	b, l, _ := rt.parts()
	fc, err := rt.fenceConfig(b)
	if err != nil {
		// Reserve refuses while this holds: a task it admitted would have no allocation fence.
		// The enforcer starts without the fence, to watch what runs already, and keeps it so:
		// a library installed later takes effect when the plugin starts again.
		rt.log.Error("allocation fence unavailable: Reserve refuses until the plugin starts again with it fixed, or with fence = false", "error", err)
		rt.mu.Lock()
		rt.fenceErr = err
		rt.mu.Unlock()
		rt.notify() // a fingerprint already sent must not keep promising units
	}
	// Each GPU's mode is its own (gpu_modes): the node lends on isolated ones only.
	plan := node.PlanBorrowing(rt.cfg.Borrow, fc.Dir != "", "", rt.cfg.BorrowWait, "")
	enf, err := node.NewEnforcer(b, l, node.EnforcerConfig{Logger: rt.log, Fence: fc, Borrow: plan,
		MPS: enforcer.MPSOptions{ControlBinary: rt.cfg.MPSControl, Root: rt.cfg.MPSRoot}})
	if err != nil {
		rt.mu.Lock()
		rt.enforcerErr = err
		rt.mu.Unlock()
		rt.log.Error("enforcer unavailable: caps are not watched, so no task is admitted; retrying every fingerprint_period", "error", err)
		rt.notify() // every free unit is unhealthy now; a fingerprint already sent promised them
		return
	}
	nd := node.New(l, enf, node.Config{Logger: rt.log, Borrow: plan.Rule, DockerRuntime: rt.cfg.DockerRuntime,
		OnPrepared: rt.setMPS})
	rt.mu.Lock()
	rt.enf, rt.enforcer, rt.nd = enf, enf, nd
	rt.mu.Unlock()
	rt.startPublisher(enf, l)
	rt.countViolations(enf, l)
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		_ = enf.Run(rt.ctx)
	}()
}

// fenceConfig is the allocation fence the plugin's config asks for. Tasks run as other users
// (Nomad's exec driver: nobody), so the directory is shared.
func (rt *runtime) fenceConfig(b gpu.Backend) (enforcer.FenceConfig, error) {
	if !rt.cfg.Fence {
		return enforcer.FenceConfig{}, nil
	}
	_, simulated := b.(*gpu.Simulated)
	fc, _, err := enforcer.ResolveFence(enforcer.FenceOn, rt.cfg.FenceLibrary, rt.cfg.FenceDir, simulated)
	fc.Shared = true
	return fc, err
}

// countViolations brings the violation metrics up to date after each violation the enforcer
// contains, so that a burst longer than the ledger keeps between two scrapes is still counted.
func (rt *runtime) countViolations(enf *enforcer.Enforcer, l *ledger.Ledger) {
	rt.followViolations(enf, func(ledger.Violation) { rt.viol.sync(l.Violations()) })
}

// followViolations calls fn, on a goroutine of its own, with each violation the enforcer
// contains, until the plugin stops.
func (rt *runtime) followViolations(enf *enforcer.Enforcer, fn func(ledger.Violation)) {
	events, unsubscribe := enf.Subscribe()
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		defer unsubscribe()
		forward(rt.ctx, events, func(ev enforcer.Event) {
			if ev.Kind == enforcer.EventViolation && ev.Violation != nil {
				fn(*ev.Violation)
			}
		})
	}()
}
