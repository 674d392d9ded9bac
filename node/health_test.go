package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// A node Open built follows its GPUs' health once started, as `gpufrac run` needs: a critical
// XID on one GPU stops admissions there within a few looks (refused as unhealthy, naming the
// XID), while the application XID raised before it on the other GPU leaves that one admitting.
func TestStartedNodeFollowsTheBackendsHealth(t *testing.T) {
	sim, devs := testutil.NewSim(t, "H100=80GiB", "H100=80GiB")
	ctx := context.Background()
	n, err := node.Open(ctx, node.Options{Backend: sim, StateDir: t.TempDir(), Policy: policy.Default(), Enforce: true})
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
