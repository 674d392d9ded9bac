package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/node"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// unnamedGPU lists, after the backend's GPUs, one whose UUID could not be read: what the NVML
// backend lists for a GPU that fell off the bus (its handle or UUID query fails with
// GPU_IS_LOST): unhealthy, with UUID "".
type unnamedGPU struct{ gpu.Backend }

func (u unnamedGPU) Devices(ctx context.Context) ([]gpu.Device, error) {
	devs, err := u.Backend.Devices(ctx)
	if err != nil {
		return nil, err
	}
	return append(devs, gpu.Device{Index: len(devs), Minor: -1,
		HealthReason: "cannot open the GPU: ERROR_GPU_IS_LOST"}), nil
}

// One GPU that cannot be named does not take the others down with it: the node opens, records
// and admits on the GPUs it can name, and keeps following their health.
func TestOpenWithAGPUThatCannotBeNamed(t *testing.T) {
	sim, devs := testutil.NewSim(t, "H100=80GiB")
	ctx := context.Background()
	n, err := node.Open(ctx, node.Options{Backend: unnamedGPU{sim}, StateDir: t.TempDir(), Policy: policy.Default(), Enforce: true})
	if err != nil {
		t.Fatalf("Open with one GPU that cannot be named: %v", err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Close(cctx); err != nil {
			t.Error(err)
		}
	})
	if _, err := n.Admit(ctx, node.Request{GPU: devs[0].UUID, Cap: size.GiB}); err != nil {
		t.Fatalf("Admit on the GPU that can be named: %v", err)
	}
	if err := sim.RaiseXID(devs[0].UUID, 79); err != nil {
		t.Fatal(err)
	}
	n.LookHealth(ctx)
	if st, err := n.Ledger().State(devs[0].UUID); err != nil || st.Healthy {
		t.Fatalf("GPU0 after XID 79 and a look: healthy %v, %v; want it recorded unhealthy", st.Healthy, err)
	}
}
