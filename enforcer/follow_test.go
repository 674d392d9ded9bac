package enforcer

import (
	"sync"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

func TestFollowersSetTheInterval(t *testing.T) {
	const policyIv = 100 * time.Millisecond
	cases := []struct {
		name   string
		asks   []time.Duration
		stop   int // how many of the followers stop again, first ones first
		wantIv time.Duration
	}{
		{"no follower", nil, 0, policyIv},
		{"a faster follower", []time.Duration{20 * time.Millisecond}, 0, 20 * time.Millisecond},
		{"a slower follower", []time.Duration{time.Second}, 0, policyIv},
		{"a follower that asks nothing", []time.Duration{0}, 0, policyIv},
		{"the fastest of two", []time.Duration{50 * time.Millisecond, 20 * time.Millisecond}, 0, 20 * time.Millisecond},
		{"the fastest stopped", []time.Duration{20 * time.Millisecond, 50 * time.Millisecond}, 1, 50 * time.Millisecond},
		{"all stopped", []time.Duration{20 * time.Millisecond}, 1, policyIv},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var e Enforcer
			var stops []func()
			for _, every := range tc.asks {
				stops = append(stops, e.Follow(every, func(Sample) {}))
			}
			for _, stop := range stops[:tc.stop] {
				stop()
			}
			if got := e.followers.every(policyIv); got != tc.wantIv {
				t.Fatalf("interval %s, want %s", got, tc.wantIv)
			}
		})
	}
}

// A follower sees the watchdog's samples, with the task's processes attributed, at the rate it
// asked for even where the policy's interval is far longer.
func TestFollowSeesSamplesAtItsRate(t *testing.T) {
	r := newRig(t, policy.ModeIsolated, nil)
	p := testPolicy(policy.ModeIsolated)
	p.WatchdogInterval = time.Second
	if err := r.led.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	res := r.reserve(4*size.GiB, "steady")
	var mu sync.Mutex
	holding := 0
	stop := r.enf.Follow(10*time.Millisecond, func(s Sample) {
		mu.Lock()
		defer mu.Unlock()
		if b, ok := s.Use(res.Token); ok && b == size.GiB {
			holding++
		}
	})
	defer stop()
	r.start()
	r.run(res, "steady", "--peak", "1GiB", "--hold", "10s")
	// At the policy's 1 s, twenty samples of the job holding its memory would take 20 s.
	testutil.Eventually(t, waitLong, "twenty samples of the job's memory", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return holding >= 20
	})
}
