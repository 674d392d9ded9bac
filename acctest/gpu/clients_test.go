package gpuacc

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// clientRow is one real client of the matrix (testdata/clients/client.py).
type clientRow struct {
	name string
	mode string   // client.py's mode
	env  []string // added to the task's environment
	musl bool     // started by the musl helper (testdata/clients/musl_helper.c), which execs Python
	// finish: the row asks for no more than its cap, so it must get it all ("finished"), not
	// merely fail inside itself
	finish bool
}

var clientRows = []clientRow{
	{name: "torch-caching", mode: "torch"},
	{name: "torch-cudaMallocAsync", mode: "torch", env: []string{"PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"}},
	// Steps of 3/4 of the cap, freed in between: PyTorch's cudaMallocAsync keeps what a step frees
	// in its pool, and the next step reuses it. Charged again on top of the pool's charge, the
	// second step was refused within the cap (enforcer/fence TestPoolReuseWithinTheCap).
	{name: "torch-cudaMallocAsync-steps", mode: "steps", env: []string{"PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"}, finish: true},
	{name: "torch-caching-steps", mode: "steps", finish: true},
	{name: "torch-expandable", mode: "torch", env: []string{"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}},
	{name: "raw-cudaMalloc", mode: "raw"},
	{name: "jax-prealloc", mode: "jax"},
	{name: "jax-no-prealloc", mode: "jax", env: []string{"XLA_PYTHON_CLIENT_PREALLOCATE=false"}},
	{name: "cupy", mode: "cupy"},
	{name: "token-dropping-child", mode: "dropchild"},
	{name: "two-processes", mode: "twoproc"},
	{name: "musl-helper", mode: "torch", musl: true},
}

const (
	matrixCap    = 8 * size.GiB
	matrixLimit  = 32 * size.GiB // a borrower's limit: the 12 GiB target fits
	matrixTarget = 12288         // MiB each client asks for: 1.5x its cap
)

// clientResult is the JSON line client.py writes.
type clientResult struct {
	Outcome      string         `json:"outcome"`
	GrantedMB    int64          `json:"granted_mb"`
	Error        string         `json:"error"`
	InfoFree     int64          `json:"info_free"`
	InfoTotal    int64          `json:"info_total"`
	TotalMemory  int64          `json:"total_memory"`
	BytesLimit   int64          `json:"bytes_limit"`
	PairUS       float64        `json:"pair_us"`
	AsyncPairUS  float64        `json:"async_pair_us"`
	ChildExit    int            `json:"child_exit"`
	Child        map[string]any `json:"child"`
	XLAFraction  string         `json:"xla_fraction"`
	ParentHeldMB int64          `json:"parent_held_mb"`
}

func readClient(path string) (clientResult, error) {
	var r clientResult
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	return r, err
}

// muslLauncher is musl's loader and the helper, from $GPUFRAC_MUSL_DIR (clients.sh --build puts
// them in bin/musl): the GPU machine has no musl of its own, so its loader is carried too.
func muslLauncher() ([]string, error) {
	dir := os.Getenv("GPUFRAC_MUSL_DIR")
	if dir == "" {
		return nil, fmt.Errorf("GPUFRAC_MUSL_DIR is not set (clients.sh --build makes bin/musl)")
	}
	l := []string{filepath.Join(dir, "ld-musl-x86_64.so.1"), filepath.Join(dir, "musl-helper")}
	for _, p := range l {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("musl helper: %w (run clients.sh --build)", err)
		}
	}
	return l, nil
}

// neighbourEvents counts the failures the neighbour wrote (allocations inside its guarantee
// refused, its data changed).
func neighbourEvents(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

func violationOf(h *harness, token string) (ledger.Violation, bool) {
	for _, v := range h.led.Violations() {
		if v.Token == token {
			return v, true
		}
	}
	return ledger.Violation{}, false
}

// TestClientMatrix runs real clients inside an 8 GiB task, each asking for 12 GiB, with
// borrowing off and on, beside a neighbour that holds 4 GiB and allocates 2 GiB more inside its
// own 8 GiB guarantee every 0.25 s. For each row it records what the client believed the GPU held,
// what it was granted, how it ended and whether the neighbour was touched; then the allocation
// cost with and without the fence. testdata/clients.sh drives it on the GPU machine.
func TestClientMatrix(t *testing.T) {
	needGPU(t)
	start := time.Now()
	for _, borrow := range []bool{false, true} {
		t.Run(fmt.Sprintf("borrow=%v", borrow), func(t *testing.T) {
			h := newHarnessFenceWith(t, policy.ModeIsolated, 50*time.Millisecond, true, func(fc *enforcer.FenceConfig) {
				if borrow {
					fc.Borrow(enforcer.BorrowWait, 5*time.Second)
				}
			})
			h.start()
			dir := t.TempDir()
			events, stop := filepath.Join(dir, "neighbour.events"), filepath.Join(dir, "neighbour.stop")
			nres := h.reserve(matrixCap, "neighbour")
			nb := h.runScript(nres, "neighbour", "clients/client.py", nil, "neighbour", "--hold-mb", "4096",
				"--probe-mb", "2048", "--events", events, "--stop-file", stop)
			waitResult(t, nb, 90*time.Second)
			for _, row := range clientRows {
				t.Run(row.name, func(t *testing.T) {
					runRow(t, h, row, borrow, nb, nres.Token, events)
				})
			}
			if err := os.WriteFile(stop, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if code, sig := nb.wait(t, 30*time.Second); code != 0 {
				t.Errorf("the neighbour ended with exit %d %v: %s", code, sig, tail(nb.out.String()))
			}
		})
	}
	t.Run("cost", func(t *testing.T) { allocCost(t) })
	record(t, map[string]any{"matrix_wall_s": time.Since(start).Seconds()})
}

// waitResult waits for a job's first result line (the neighbour's "ready").
func waitResult(t *testing.T, j *job, limit time.Duration) {
	t.Helper()
	deadline := time.After(limit)
	for {
		if _, err := os.Stat(j.result); err == nil {
			return
		}
		select {
		case <-j.done:
			t.Fatalf("%s ended before it was ready: %s", j.name, tail(j.out.String()))
		case <-deadline:
			t.Fatalf("%s not ready within %s", j.name, limit)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func runRow(t *testing.T, h *harness, row clientRow, borrow bool, nb *job, nbToken, events string) {
	var opts []ledger.ReserveOption
	if borrow {
		opts = append(opts, ledger.WithLimit(matrixLimit))
	}
	r, err := h.led.ReserveBytes(h.uuid, matrixCap, ledger.Task{JobName: row.name, TaskName: "main"}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.led.Release(r.Token, "row done") }()
	var launcher []string
	if row.musl {
		if launcher, err = muslLauncher(); err != nil {
			t.Fatal(err)
		}
	}
	before := neighbourEvents(events)
	t0 := time.Now()
	j := h.runVia(r, row.name, launcher, "clients/client.py", row.env, row.mode, "--target-mb", fmt.Sprint(matrixTarget),
		"--hold-mb", "2048")
	code, sig := j.wait(t, 150*time.Second)
	res, rerr := readClient(j.result)
	v, violated := violationOf(h, r.Token)
	nv, nbViolated := violationOf(h, nbToken)
	touched := neighbourEvents(events) > before || nbViolated
	select {
	case <-nb.done:
		touched = true
	default:
	}
	line := map[string]any{"row": row.name, "borrow": borrow, "exit": code, "signal": sig.String(),
		"wall_s": time.Since(t0).Seconds(), "cap_mb": matrixCap / size.MiB, "target_mb": matrixTarget,
		"believed": map[string]any{"mem_get_info_free": res.InfoFree, "mem_get_info_total": res.InfoTotal,
			"total_memory": res.TotalMemory, "bytes_limit": res.BytesLimit},
		"granted_mb": res.GrantedMB, "outcome": res.Outcome, "error": res.Error, "neighbour_touched": touched}
	if violated {
		line["watchdog"] = string(v.Action) + ": " + v.Detail
	}
	if nbViolated {
		line["neighbour_violation"] = string(nv.Action) + ": " + nv.Detail
	}
	if res.Child != nil {
		line["child"] = res.Child
	}
	record(t, line)

	if rerr != nil || code == 127 {
		t.Fatalf("no result (exit %d, signal %v, watchdog %q): %v: %s", code, sig, line["watchdog"], rerr, tail(j.out.String()))
	}
	if res.Outcome != "finished" && (row.finish || res.Outcome != "oom-inside") {
		want := "it to finish or fail inside itself"
		if row.finish {
			want = "it to finish: it asked for no more than its cap"
		}
		t.Errorf("outcome %q (exit %d %v, %s): want %s", res.Outcome, code, sig, res.Error, want)
	}
	if touched {
		t.Errorf("the neighbour was touched: %s", tail(string(mustRead(events))))
	}
	if violated && v.Action == enforcer.ActionSIGKILL {
		t.Errorf("the watchdog killed the task: %s", v.Detail)
	}
	if !borrow && res.GrantedMB > int64(matrixCap/size.MiB) {
		t.Errorf("granted %d MiB past its %s cap without borrowing", res.GrantedMB, matrixCap)
	}
	capB := int64(matrixCap)
	if res.InfoTotal != 0 && res.InfoTotal != capB {
		t.Errorf("mem_get_info total %d, want the cap %d", res.InfoTotal, capB)
	}
	if res.TotalMemory != 0 && res.TotalMemory != capB {
		t.Errorf("total_memory (cuDeviceTotalMem) %d, want the cap %d", res.TotalMemory, capB)
	}
	if row.mode == "jax" && (res.BytesLimit < capB*70/100 || res.BytesLimit > capB) {
		t.Errorf("JAX bytes_limit %d: want about 75%% of the %d cap", res.BytesLimit, capB)
	}
}

func mustRead(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}

// allocCost times cudaMalloc/cudaFree and cudaMallocAsync/cudaFreeAsync pairs without the fence
// (no LD_PRELOAD) and with it, alternated three times in one run; the figures are the ratios of
// the medians.
func allocCost(t *testing.T) {
	h := newHarnessFence(t, policy.ModeIsolated, 100*time.Millisecond, true)
	h.start()
	r := h.reserve(matrixCap, "cost")
	var plain, fenced, plainAsync, fencedAsync []float64
	for i := range 3 {
		for _, on := range []bool{false, true} {
			res := r
			if !on {
				res.Token = "" // runScript hands no task environment: no LD_PRELOAD
			}
			j := h.runScript(res, fmt.Sprintf("cost%d-%v", i, on), "clients/client.py", nil, "cost", "--n", "20000")
			if code, _ := j.wait(t, 120*time.Second); code != 0 {
				t.Fatalf("cost run failed: %s", tail(j.out.String()))
			}
			c, err := readClient(j.result)
			if err != nil || c.PairUS <= 0 {
				t.Fatalf("cost result: %v %+v", err, c)
			}
			if on {
				fenced, fencedAsync = append(fenced, c.PairUS), append(fencedAsync, c.AsyncPairUS)
			} else {
				plain, plainAsync = append(plain, c.PairUS), append(plainAsync, c.AsyncPairUS)
			}
		}
	}
	med := func(x []float64) float64 { sort.Float64s(x); return x[len(x)/2] }
	record(t, map[string]any{"row": "alloc-cost", "plain_pair_us": plain, "fenced_pair_us": fenced,
		"ratio": med(fenced) / med(plain), "plain_async_pair_us": plainAsync, "fenced_async_pair_us": fencedAsync,
		"async_ratio": med(fencedAsync) / med(plainAsync)})
}

// The matrix's parts that need no GPU: every row's client mode is one client.py knows (its
// --dry-run parses the arguments the matrix passes) and the musl helper builds. On the GPU
// machine clients.sh --dry-run runs this first.
func TestClientMatrixRows(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH: the client matrix's Python clients cannot be checked here")
	}
	seen := map[string]bool{}
	for _, row := range clientRows {
		if seen[row.name] {
			t.Errorf("row %s twice", row.name)
		}
		seen[row.name] = true
		out, err := exec.Command(py, filepath.Join("testdata", "clients", "client.py"), row.mode, "--target-mb",
			fmt.Sprint(matrixTarget), "--hold-mb", "2048", "--dry-run").CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"outcome": "dry-run"`) {
			t.Errorf("row %s: client.py %s --dry-run: %v: %s", row.name, row.mode, err, out)
		}
	}
	mcc, err := exec.LookPath("musl-gcc")
	if err != nil {
		t.Log("musl-gcc not on PATH: the musl helper was not built here")
		return
	}
	bin := filepath.Join(t.TempDir(), "musl-helper")
	if out, err := exec.Command(mcc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", bin,
		filepath.Join("testdata", "clients", "musl_helper.c")).CombinedOutput(); err != nil {
		t.Fatalf("musl helper: %v: %s", err, out)
	}
	out, err := exec.Command(bin, "true").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "musl-helper[") {
		t.Fatalf("musl helper did not run and exec: %v: %s", err, out)
	}
}
