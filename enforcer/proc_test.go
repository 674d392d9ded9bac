package enforcer

import (
	"testing"

	"github.com/gpufrac/gpufrac/attribution"
	"github.com/gpufrac/gpufrac/enforcer/mps"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/procfs"
	"github.com/gpufrac/gpufrac/size"
	"github.com/gpufrac/gpufrac/taskenv"
)

// The names a task's processes carry, for the tests that start such processes, and how the
// watchdog says it tied one by its own environment.
const (
	envNomadJob  = attribution.EnvNomadJob
	envNomadTask = attribution.EnvNomadTask
	envNomadNS   = attribution.EnvNomadNS
	EnvTemplate  = taskenv.Template
	viaEnviron   = attribution.ViaEnviron
)

// What TaskEnv hands a task is what the watchdog's attribution reads back: the token, the
// per-GPU key, the MPS pipe and pinned limit, so a rename on either side fails here.
func TestAttributionReadsTaskEnv(t *testing.T) {
	const uuid = "GPU-0a1b"
	r := ledger.Reservation{Token: "tok-1234567890", GPU: uuid, CapBytes: 8 * size.GiB}
	g := ledger.GPUState{GPUInfo: ledger.GPUInfo{UUID: uuid, TotalBytes: 80 * size.GiB}, Mode: policy.ModeMPS}
	var env []string
	for k, v := range TaskEnv(r, g, EnvOptions{MPSPipeDir: "/run/mps/pipe", MPSLogDir: "/run/mps/log"}) {
		env = append(env, k+"="+v)
	}
	procs := procfs.NewTable(procfs.Proc{PID: 5, PPID: 1, Env: append(env, EnvReservation+"=tok-of-another-gpu")})
	a := attribution.New(procs)
	id, err := a.Identity(5)
	if err != nil {
		t.Fatal(err)
	}
	if id.PipeDir != "/run/mps/pipe" {
		t.Errorf("MPS pipe %q", id.PipeDir)
	}
	if lim, ok := mps.PinnedLimit(id.MPSLimit, uuid); !ok || lim != r.CapBytes {
		t.Errorf("pinned limit %q read as %s, %v; want %s", id.MPSLimit, lim, ok, r.CapBytes)
	}
	// GPUFRAC_RESERVATION names another GPU's reservation; the per-GPU key still ties it here.
	got := a.Attribute(5, uuid, attribution.Reserved([]ledger.Reservation{r}))
	if got.Token != r.Token || got.Via != viaEnviron {
		t.Errorf("attributed %+v, want %s via the per-GPU key", got, ledger.RedactToken(r.Token))
	}
}
