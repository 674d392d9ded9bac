package deviceplugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gpufrac/gpufrac/gpu"
	"github.com/gpufrac/gpufrac/internal/testutil"
	"github.com/gpufrac/gpufrac/ledger"
	devicepb "github.com/gpufrac/gpufrac/nomad-device/proto/device"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

var (
	healthOnce sync.Once
	healthPats []*regexp.Regexp
	healthErr  error
)

// placeholder is what docs/plugin.md writes for a part of a description that varies: "…", a
// <name>, or a lone capital (N tasks, headroom (X)).
var placeholder = regexp.MustCompile(`: …$|…|<[^>]+>|\b[A-Z]\b`)

// healthPatterns reads the descriptions in the first column of docs/plugin.md's "Health
// descriptions" table, each as a pattern where a placeholder stands for any text. A
// description may follow another reason and "; " (an unhealthy GPU's reason, then why a unit).
func healthPatterns(t testing.TB) []*regexp.Regexp {
	t.Helper()
	healthOnce.Do(func() {
		data, err := os.ReadFile(filepath.Join("..", "..", "docs", "plugin.md"))
		if err != nil {
			healthErr = err
			return
		}
		_, table, ok := strings.Cut(string(data), "\n### Health descriptions\n")
		if !ok {
			healthErr = errors.New(`docs/plugin.md has no "### Health descriptions" section`)
			return
		}
		table, _, _ = strings.Cut(table, "\n#")
		code := regexp.MustCompile("`([^`]+)`")
		for _, line := range strings.Split(table, "\n") {
			cells := strings.Split(line, " | ")
			if !strings.HasPrefix(line, "| `") || len(cells) < 2 {
				continue
			}
			for _, m := range code.FindAllStringSubmatch(cells[0], -1) {
				doc := m[1]
				var b strings.Builder
				b.WriteString(`^(.*; )?`)
				last := 0
				for _, p := range placeholder.FindAllStringIndex(doc, -1) {
					b.WriteString(regexp.QuoteMeta(doc[last:p[0]]))
					if strings.HasPrefix(doc[p[0]:], ": ") {
						b.WriteString(`(: .*)?`) // a trailing cause, which may be absent
					} else {
						b.WriteString(`.*`)
					}
					last = p[1]
				}
				b.WriteString(regexp.QuoteMeta(doc[last:]) + `$`)
				healthPats = append(healthPats, regexp.MustCompile(b.String()))
			}
		}
		if len(healthPats) < 10 {
			healthErr = errors.New("docs/plugin.md's health table has fewer than 10 descriptions: was it reshaped?")
		}
	})
	if healthErr != nil {
		t.Fatal(healthErr)
	}
	return healthPats
}

// wantDocumentedHealth checks that each description is one docs/plugin.md's table explains.
func wantDocumentedHealth(t testing.TB, descs ...string) {
	t.Helper()
	pats := healthPatterns(t)
	for _, d := range descs {
		found := false
		for _, p := range pats {
			if p.MatchString(d) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("health description %q is not in docs/plugin.md's table of health descriptions", d)
		}
	}
}

// unhealthyDescs lists the health descriptions of g's unhealthy units, each once.
func unhealthyDescs(g *devicepb.DeviceGroup) []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range g.GetDevices() {
		if !d.GetHealthy() && !seen[d.GetHealthDescription()] {
			seen[d.GetHealthDescription()] = true
			out = append(out, d.GetHealthDescription())
		}
	}
	return out
}

// Every health description the plugin, its ledger and its backend's fixed reasons can give is
// explained in docs/plugin.md: the runtime's reasons for refusing every unit, each reason a GPU
// has no unit, and the ledger's descriptions of units at max_tasks_per_gpu, without budget and
// beyond a shrunken budget, and of units borrowers hold or that wait for them. (The fault tests
// check the descriptions they see too.)
func TestEveryHealthDescriptionIsDocumented(t *testing.T) {
	cause := errors.New("the cause")
	unavailable := map[string]*runtime{
		"backend":                  {cfg: Config{GPUBackend: "nvml"}, backendErr: cause},
		"ledger":                   {cfg: Config{StateDir: "/var/lib/gpufrac"}, backend: &gpu.Simulated{}, ledgerErr: cause},
		"policy":                   {cfg: Config{PolicyFile: "/etc/gpufrac/policy.json", PolicyName: "default"}, backend: &gpu.Simulated{}, led: &ledger.Ledger{}, policyErr: cause},
		"fence":                    {backend: &gpu.Simulated{}, led: &ledger.Ledger{}, policyReady: true, fenceErr: cause},
		"enforcer":                 {backend: &gpu.Simulated{}, led: &ledger.Ledger{}, policyReady: true, enforcerErr: cause},
		"enforcer without a cause": {backend: &gpu.Simulated{}, led: &ledger.Ledger{}, policyReady: true},
	}
	for name, rt := range unavailable {
		why := rt.unavailable()
		if why == "" {
			t.Fatalf("%s: the runtime says nothing is missing", name)
		}
		wantDocumentedHealth(t, why)
	}

	gib := size.GiB
	gpuOf := func(total size.Bytes, reason string) ledger.GPUInfo {
		return ledger.GPUInfo{TotalBytes: total, Healthy: reason == "", HealthReason: reason}
	}
	const unreadable = "GPU processes cannot be read: caps cannot be enforced, nothing is admitted until they can"
	for name, st := range map[string]ledger.GPUState{
		"no policy yet":          {GPUInfo: gpuOf(80*gib, "")},
		"headroom":               {GPUInfo: gpuOf(2*gib, ""), HeadroomBytes: 2 * gib, UnitBytes: gib},
		"headroom and unmanaged": {GPUInfo: gpuOf(8*gib, ""), HeadroomBytes: 2 * gib, UnmanagedBytes: 6 * gib, UnitBytes: gib},
		"below one unit":         {GPUInfo: gpuOf(3*gib, ""), HeadroomBytes: 2 * gib, BudgetBytes: gib, UnitBytes: 2 * gib},
		"after a GPU reason":     {GPUInfo: gpuOf(2*gib, unreadable), HeadroomBytes: 2 * gib, UnitBytes: gib},
	} {
		t.Run(name, func(t *testing.T) { wantDocumentedHealth(t, noUnitsReason(&st)) })
	}
	wantDocumentedHealth(t, descVanished, gpu.MIGReason)

	// The backend's reasons from a GPU's events and its memory, as the simulated backend gives
	// them by the rules the NVML backend shares.
	sim, devs := testutil.NewSim(t, "6xH100=80GiB")
	for i, fault := range []func(uuid string) error{
		func(u string) error { return sim.RaiseXID(u, 79) },
		func(u string) error { return sim.RaiseXID(u, 150) }, // a code gpufrac has no name for
		sim.RaiseDoubleBitECC,
		func(u string) error { return sim.SetMemoryErrors(u, &gpu.MemoryErrors{RemapFailed: true}) },
		func(u string) error { return sim.SetMemoryErrors(u, &gpu.MemoryErrors{RemapPending: true}) },
		func(u string) error { return sim.SetMemoryErrors(u, &gpu.MemoryErrors{Uncorrectable: 1}) },
	} {
		if err := fault(devs[i].UUID); err != nil {
			t.Fatal(err)
		}
	}
	devs, err := sim.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d.Healthy {
			t.Errorf("GPU %d is healthy after its fault: the test no longer reaches its reason", d.Index)
		}
		wantDocumentedHealth(t, d.HealthReason)
	}

	// The ledger's own descriptions of units, from a ledger brought into each state.
	led, err := ledger.Open("", ledger.Options{NoPersist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	p := policy.Default()
	p.MaxTasksPerGPU = 3
	if err := led.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	const full, shrunk, lent, waits = "GPU-full", "GPU-shrunk", "GPU-lent", "GPU-waits"
	if err := led.SyncGPUs([]ledger.GPUInfo{{UUID: full, TotalBytes: 12 * gib, Healthy: true}, {UUID: shrunk, Index: 1, TotalBytes: 12 * gib, Healthy: true},
		{UUID: lent, Index: 2, TotalBytes: 12 * gib, Healthy: true}, {UUID: waits, Index: 3, TotalBytes: 12 * gib, Healthy: true}}); err != nil {
		t.Fatal(err)
	}
	// Borrowers hold 2.5 units on one GPU; an allocation waits on another.
	if err := led.SetBorrowed(lent, 2*gib+gib/2, false); err != nil {
		t.Fatal(err)
	}
	if err := led.SetBorrowed(waits, gib, true); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := led.ReserveBytes(full, gib, ledger.Task{JobName: "j"}); err != nil {
			t.Fatal(err)
		}
	}
	// Units 0-5 held by three tasks, the middle one ends, and unmanaged memory shrinks the budget
	// to 5 units: one free unit, one without budget, held units beyond the budget.
	var held []ledger.Reservation
	for range 3 {
		r, err := led.ReserveBytes(shrunk, 2*gib, ledger.Task{JobName: "j"})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	if err := led.Release(held[1].Token, "ended"); err != nil {
		t.Fatal(err)
	}
	if err := led.SetUnmanaged(shrunk, 5*gib); err != nil {
		t.Fatal(err)
	}
	var descs []string
	for _, st := range led.States() {
		for _, in := range st.Instances {
			if !in.Healthy && !slices.Contains(descs, in.HealthDescription) {
				descs = append(descs, in.HealthDescription)
			}
		}
	}
	for _, want := range []string{"max_tasks_per_gpu = 3", "no budget left", "budget shrank below", "borrowing past their guarantees", "allocation waits for memory"} {
		if !strings.Contains(strings.Join(descs, "\n"), want) {
			t.Errorf("the ledger gave no description saying %q (got %q): the test no longer reaches it", want, descs)
		}
	}
	wantDocumentedHealth(t, descs...)
}

// While the ledger holds no GPU yet (it cannot open), the listing shows the backend's GPUs as
// unitless groups, in index order: the stream sends a listing only when it differs from the
// last, so an order that changed from one listing to the next re-sent the same GPUs.
func TestGPUsShownBeforeTheLedgerOpensKeepTheirOrder(t *testing.T) {
	rt := &runtime{cfg: Config{StateDir: t.TempDir()}, backend: &gpu.Simulated{}, ledgerDir: t.TempDir(),
		ledgerErr: errors.New("the cause"), devices: map[string]gpu.Device{}}
	var want []string
	for i := range 6 {
		uuid := gpu.SimUUID(i, "H100")
		rt.devices[uuid] = gpu.Device{UUID: uuid, Index: i, Model: "H100", MemoryBytes: 80 * size.GiB, Healthy: true}
		want = append(want, groupName("H100", i))
	}
	for range 10 {
		var got []string
		for _, g := range rt.fingerprint().GetDeviceGroup() {
			got = append(got, g.GetDeviceName())
		}
		if !slices.Equal(got, want) {
			t.Fatalf("groups %v, want %v", got, want)
		}
	}
}
