package policy

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	// Source is where the policy lives: a *NomadStore or a *FileStore.
	Source PolicySource
	// Name of the policy to follow.
	Name string
	// OnChange, if set, is called from the watcher's goroutine with every new valid policy
	// (the first one included). It must not block for long: the next query waits for it.
	OnChange func(Policy, Meta)
	// Logger receives warnings and errors; nil discards them.
	Logger hclog.Logger
	// MinBackoff and MaxBackoff bound the wait after a failed read (defaults 1s and 1m); the
	// wait doubles on each failure in a row.
	MinBackoff, MaxBackoff time.Duration
}

// Watcher follows one policy and hands on only fully valid versions. When the policy becomes
// invalid, is deleted, or cannot be read (network, 403), it keeps the last good one and logs
// why. Run it in its own goroutine.
type Watcher struct {
	cfg     WatcherConfig
	log     hclog.Logger
	updates chan Policy

	mu   sync.Mutex
	cur  Policy
	meta Meta
	have bool
}

// NewWatcher returns a watcher; nothing happens until Run.
func NewWatcher(cfg WatcherConfig) *Watcher {
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = time.Second
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(time.Minute, cfg.MinBackoff)
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Watcher{cfg: cfg, log: log.Named("policy-watcher").With("policy", cfg.Name), updates: make(chan Policy, 1)}
}

// Current returns the last good policy and its version; ok is false until one was read.
func (w *Watcher) Current() (p Policy, m Meta, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur, w.meta, w.have
}

// Updates delivers new valid policies. It holds at most one: a reader that falls behind gets
// the newest, never a stale backlog.
func (w *Watcher) Updates() <-chan Policy { return w.updates }

// Run follows the policy until ctx ends and then returns ctx.Err(). It returns at once with
// an error wrapping ErrInvalid when the name cannot be a policy name.
func (w *Watcher) Run(ctx context.Context) error {
	if err := CheckName("policy", w.cfg.Name); err != nil {
		return err // no retry can fix a name that makes no path
	}
	var after uint64
	backoff := w.cfg.MinBackoff
	var lastProblem string // log a repeated state once, not on every wake-up
	for {
		p, m, idx, err := w.cfg.Source.WaitPolicy(ctx, w.cfg.Name, after)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		answered := idx != 0
		switch {
		case err == nil:
			lastProblem = ""
			w.accept(p, m)
		case answered && errors.Is(err, ErrNotFound):
			if lastProblem != "absent" {
				w.warnAbsent(err)
				lastProblem = "absent"
			}
		case answered && errors.Is(err, ErrInvalid):
			// Every invalid write gets its own index, so this logs each bad version once.
			w.warnInvalid(err)
			lastProblem = "invalid"
		default:
			level := hclog.Warn
			if errors.Is(err, ErrPermissionDenied) {
				level = hclog.Error // no retry will fix a token without read access
			}
			_, _, have := w.Current()
			w.log.Log(level, "cannot read the policy; retrying", "error", err, "retry_in", backoff, "keeping_last_good", have)
			if !sleep(ctx, backoff) {
				return ctx.Err()
			}
			backoff = min(2*backoff, w.cfg.MaxBackoff)
			continue // same after: we learnt nothing new
		}
		backoff = w.cfg.MinBackoff
		switch {
		case idx < after:
			// The index went backwards (a restored or replaced server): start over.
			w.log.Warn("store index went backwards; re-reading", "was", after, "now", idx)
			after = 0
			if !sleep(ctx, w.cfg.MinBackoff) {
				return ctx.Err()
			}
		default:
			after = idx
		}
	}
}

// warnAbsent and warnInvalid say what the watcher falls back on; each of their messages is a
// constant so that an operator (and the tests) can search for it.
func (w *Watcher) warnAbsent(err error) {
	if _, m, have := w.Current(); have {
		w.log.Warn("policy is absent or was deleted; keeping the last good policy", "error", err, "last_good_index", m.ModifyIndex)
		return
	}
	w.log.Warn("policy is absent or was deleted; no good policy yet", "error", err)
}

func (w *Watcher) warnInvalid(err error) {
	if _, m, have := w.Current(); have {
		w.log.Warn("ignoring an invalid policy; keeping the last good policy", "error", err, "last_good_index", m.ModifyIndex)
		return
	}
	w.log.Warn("ignoring an invalid policy; no good policy yet", "error", err)
}

func (w *Watcher) accept(p Policy, m Meta) {
	w.mu.Lock()
	changed := !w.have || p != w.cur
	w.cur, w.meta, w.have = p, m, true
	w.mu.Unlock()
	if !changed {
		return
	}
	w.log.Info("policy loaded", "modify_index", m.ModifyIndex, "mode", p.Mode, "headroom", p.HeadroomBytes.String(),
		"unit", p.UnitBytes.String(), "max_tasks_per_gpu", p.MaxTasksPerGPU)
	if w.cfg.OnChange != nil {
		w.cfg.OnChange(p, m)
	}
	select { // keep only the newest undelivered policy
	case <-w.updates:
	default:
	}
	w.updates <- p
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
