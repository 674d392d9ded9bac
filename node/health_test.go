package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// A node Open built follows its GPUs' health once started, as `gpufrac run` needs: a critical
// XID on one GPU stops admissions there within a few looks (refused as unhealthy, naming the
// XID), while the application XID raised before it on the other GPU leaves that one admitting.
// A node without an enforcer (the benchmark's uncapped and exclusive arms) follows it too:
// before, it looked only when a job failed.
func TestStartedNodeFollowsTheBackendsHealth(t *testing.T) {
	for _, enforce := range []bool{true, false} {
		t.Run(fmt.Sprintf("enforce=%v", enforce), func(t *testing.T) { startedNodeFollowsHealth(t, enforce) })
	}
}

func startedNodeFollowsHealth(t *testing.T, enforce bool) {
	sim, devs := testutil.NewSim(t, "H100=80GiB", "H100=80GiB")
	ctx := context.Background()
	n, err := node.Open(ctx, node.Options{Backend: sim, StateDir: t.TempDir(), Policy: policy.Default(), Enforce: enforce})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Close(cctx); err != nil {
			t.Error(err)
		}
	})
	n.Start()
	bad, good := devs[0].UUID, devs[1].UUID
	if err := sim.RaiseXID(good, 13); err != nil {
		t.Fatal(err)
	}
	if err := sim.RaiseXID(bad, 79); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*node.HealthPeriod, "the ledger to record GPU0 unhealthy", func() bool {
		st, err := n.Ledger().State(bad)
		return err == nil && !st.Healthy
	})
	if st, _ := n.Ledger().State(bad); !strings.HasPrefix(st.HealthReason, "XID 79 at ") {
		t.Errorf("GPU0's reason %q, want the XID's mark", st.HealthReason)
	}
	if st, _ := n.Ledger().State(good); !st.Healthy {
		t.Errorf("GPU1 unhealthy (%s) after an application's XID", st.HealthReason)
	}
	_, err = n.Admit(ctx, node.Request{GPU: bad, Cap: size.GiB})
	var denied *ledger.DeniedError
	if !errors.As(err, &denied) || denied.Reason != ledger.ReasonUnhealthy || !strings.Contains(err.Error(), "XID 79") {
		t.Errorf("Admit on the GPU that raised XID 79: %v; want it refused as unhealthy, naming the XID", err)
	}
	if _, err := n.Admit(ctx, node.Request{GPU: good, Cap: size.GiB}); err != nil {
		t.Errorf("Admit on the GPU whose tenant faulted its own context: %v", err)
	}
}

// A look on demand sees a fault at once, without waiting for the watch's next look, and hands
// each change to OnHealth with the event's time; a look that finds nothing new hands nothing.
func TestLookHealthReportsAChangeOnce(t *testing.T) {
	sim, devs := testutil.NewSim(t, "H100=80GiB", "H100=80GiB")
	ctx := context.Background()
	var heard []gpu.Device
	n, err := node.Open(ctx, node.Options{Backend: sim, Policy: policy.Default(), Enforce: true,
		OnHealth: func(d gpu.Device) { heard = append(heard, d) },
		// The watch would look too, from its own goroutine: only the look on demand may see it.
		HealthPeriod: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	n.Start()
	bad := devs[1].UUID
	before := time.Now()
	if err := sim.RaiseXID(bad, 48); err != nil {
		t.Fatal(err)
	}
	raised := time.Now()
	n.LookHealth(ctx)
	if len(heard) != 1 || heard[0].UUID != bad || heard[0].Healthy || !strings.HasPrefix(heard[0].HealthReason, "XID 48 at ") {
		t.Fatalf("OnHealth heard %+v; want GPU1 unhealthy by XID 48", heard)
	}
	if at := heard[0].EventAt; at.Before(before) || at.After(raised) {
		t.Errorf("the change's event time %s, want the XID's, between %s and %s", at, before, raised)
	}
	if st, _ := n.Ledger().State(bad); st.Healthy {
		t.Error("the ledger still has GPU1 healthy after the look")
	}
	n.LookHealth(ctx)
	if len(heard) != 1 {
		t.Errorf("a second look with nothing new handed %+v", heard[1:])
	}
}

// stuckBackend lists GPUs as its simulated backend does, but once armed its listings wait for
// release, ignoring their context: an NVML call that hangs.
type stuckBackend struct {
	*gpu.Simulated
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (b *stuckBackend) Devices(ctx context.Context) ([]gpu.Device, error) {
	if b.armed.Load() {
		b.entered <- struct{}{}
		<-b.release
	}
	return b.Simulated.Devices(ctx)
}

// A look on demand waits for one that hangs in the backend no longer than its own context: the
// run asks at every failed job, from its one loop.
func TestLookHealthWaitsForAStuckLookNoLongerThanItsContext(t *testing.T) {
	sim, _ := testutil.NewSim(t, "H100=80GiB")
	b := &stuckBackend{Simulated: sim, entered: make(chan struct{}), release: make(chan struct{})}
	n, err := node.Open(context.Background(), node.Options{Backend: b, Policy: policy.Default(), HealthPeriod: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	b.armed.Store(true)
	stuck := make(chan struct{})
	go func() {
		defer close(stuck)
		n.LookHealth(context.Background())
	}()
	<-b.entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		n.LookHealth(ctx)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Error("a look on demand still waits for the stuck one 10 s after its context ended")
	}
	b.armed.Store(false) // a look that waited for the lock lists at once
	close(b.release)
	<-stuck
	<-returned
}
