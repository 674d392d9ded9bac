//go:build linux && cgo

package gpu_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
)

// faultKernel dereferences an address no allocation holds: the driver tears the context down
// with an illegal-address error and reports an XID (31, a GPU memory page fault) for it.
const faultKernel = `
import cupy
k = cupy.RawKernel(r'extern "C" __global__ void f() { *(volatile int *)0x10 = 1; }', 'f')
k((1,), (1,), ())
try:
    cupy.cuda.runtime.deviceSynchronize()
except Exception as e:
    print("faulted:", e)
`

// On the GPU machine, a program that faults its own context raises an application XID, which
// reaches the event watch of another process and leaves the GPU in service: a tenant cannot
// take a shared GPU out by crashing itself. It is the one XID a test can raise without harm.
func TestNVMLApplicationXIDLeavesTheGPUInService(t *testing.T) {
	if !gpu.GPUTests {
		t.Skip("GPUFRAC_GPU_TESTS=1 runs this on a GPU machine")
	}
	if exec.Command("python3", "-c", "import cupy").Run() != nil {
		t.Skip("no python3 with CuPy to raise the XID")
	}
	var logs testutil.Buffer
	b, err := gpu.NewNVMLWith(hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug}), gpu.HealthOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !gpu.WatchesEvents(b) {
		t.Skip("no GPU here reports XID events")
	}
	out, _ := exec.Command("python3", "-c", faultKernel).CombinedOutput()
	t.Logf("the faulting program: %s", strings.TrimSpace(string(out)))
	const seen = "XID of an application's own fault: the GPU stays in service"
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(logs.String(), seen) {
		if time.Now().After(deadline) {
			t.Fatalf("no application XID reached the event watch within 20 s; log:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("log:\n%s", logs.String())
	devs, err := b.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if !d.Healthy {
			t.Errorf("GPU %s unhealthy after an application's XID: %s", d.UUID, d.HealthReason)
		}
	}
}
