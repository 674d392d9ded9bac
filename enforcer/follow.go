package enforcer

import (
	"sync"
	"time"

	"github.com/gpufrac/gpufrac/size"
)

// followers are the callers that see every sample the watchdog takes: gpufrac run supervises its
// jobs with the watchdog's own samples (one sampler per GPU, one attribution rule), and records
// each job's peak from them, so the watchdog samples as often as its most demanding follower asks.
type followers struct {
	mu   sync.Mutex
	next int
	m    map[int]follower
}

type follower struct {
	every time.Duration
	fn    func(Sample)
}

// Follow calls fn with every sample of every GPU the watchdog takes, from the watchdog's
// goroutine (fn must be quick and must not call back into Run or Tick), and makes Run sample at
// least that often (every; 0 leaves the policy's interval) until stop is called.
func (e *Enforcer) Follow(every time.Duration, fn func(Sample)) (stop func()) {
	f := &e.followers
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[int]follower{}
	}
	id := f.next
	f.next++
	f.m[id] = follower{every: every, fn: fn}
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.m, id)
	}
}

// every is the interval Run sleeps: iv, or less where a follower asks for less.
func (f *followers) every(iv time.Duration) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.m {
		if x.every > 0 && x.every < iv {
			iv = x.every
		}
	}
	return iv
}

func (f *followers) see(s Sample) {
	f.mu.Lock()
	fns := make([]func(Sample), 0, len(f.m))
	for _, x := range f.m {
		fns = append(fns, x.fn)
	}
	f.mu.Unlock()
	for _, fn := range fns {
		fn(s)
	}
}

// Use is the memory the processes of reservation token held in the sample; false when none was
// on the GPU.
func (s Sample) Use(token string) (size.Bytes, bool) {
	var b size.Bytes
	found := false
	for _, p := range s.Processes {
		if token != "" && p.Token == token {
			b += p.Bytes
			found = true
		}
	}
	return b, found
}
