package gpuacc

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/enforcer"
	"github.com/gpufrac/gpufrac/ledger"
	"github.com/gpufrac/gpufrac/policy"
	"github.com/gpufrac/gpufrac/size"
)

// fenceResult is the JSON line testdata/fence.py writes.
type fenceResult struct {
	Mode        string  `json:"mode"`
	Outcome     string  `json:"outcome"`
	AllocatedMB int     `json:"allocated_mb"`
	Error       string  `json:"error"`
	InfoFree    int64   `json:"info_free"`
	InfoTotal   int64   `json:"info_total"`
	Alive       bool    `json:"alive"`
	Child       string  `json:"child"`
	MS          float64 `json:"ms"`
	CUDAPairUS  float64 `json:"cuda_pair_us"`
	TorchPairUS float64 `json:"torch_pair_us"`
	ChildExit   int     `json:"child_exit"`
}

func (j *job) fenceResult(tb testing.TB) fenceResult {
	tb.Helper()
	var r fenceResult
	b, err := os.ReadFile(j.result)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		tb.Fatalf("%s: no result (%v): %s", j.name, err, tail(j.out.String()))
	}
	return r
}

// Every allocation path PyTorch and a raw CUDA program use stops at the task's cap inside the
// process, which lives on; cudaMemGetInfo shows the task its cap.
func TestFenceAllocators(t *testing.T) {
	cases := []struct {
		name string
		env  []string
		args []string
	}{
		{"caching", nil, nil},
		{"cudaMallocAsync", []string{"PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"}, nil},
		{"expandable", []string{"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}, nil},
		{"ctypes-cudaMalloc", nil, []string{"--raw"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarnessFence(t, policy.ModeIsolated, 10*time.Millisecond, true)
			h.start()
			const capBytes = 4 * size.GiB
			r := h.reserve(capBytes, "fill")
			j := h.runScript(r, "fill", "fence.py", c.env, append([]string{"fill", "--chunk-mb", "256", "--target-mb", "12288"}, c.args...)...)
			code, sig := j.wait(t, 120*time.Second)
			res := j.fenceResult(t)
			record(t, map[string]any{"allocated_mb": res.AllocatedMB, "cap_mb": capBytes / size.MiB, "error": res.Error,
				"info_total": res.InfoTotal, "info_free": res.InfoFree, "alive": res.Alive, "exit": code})
			if code != 0 || sig != 0 || !res.Alive {
				t.Fatalf("the process should live on after the refusal: exit %d %v alive %v: %s", code, sig, res.Alive, tail(j.out.String()))
			}
			if res.AllocatedMB > int(capBytes/size.MiB) || res.AllocatedMB < int(capBytes/size.MiB)-512 || res.Error == "" {
				t.Errorf("stopped at %d MiB (%q), want the 4096 MiB cap", res.AllocatedMB, res.Error)
			}
			if res.InfoTotal != int64(capBytes) || res.InfoFree > int64(capBytes) {
				t.Errorf("mem_get_info = (%d free, %d total), want the task's cap as total", res.InfoFree, res.InfoTotal)
			}
			if v := h.violation(r.Token, 10*time.Second); v.Action != enforcer.ActionOOMInProcess || !strings.Contains(v.Detail, "fence") {
				t.Errorf("violation %+v: want oom-in-process by the fence", v)
			}
		})
	}
}

// Two CUDA processes of one task share its cap.
func TestFenceTwoProcessesOfOneTask(t *testing.T) {
	h := newHarnessFence(t, policy.ModeIsolated, 10*time.Millisecond, true)
	h.start()
	r := h.reserve(4*size.GiB, "pair")
	j := h.runScript(r, "pair", "fence.py", nil, "pair", "--mb", "2560")
	code, _ := j.wait(t, 120*time.Second)
	res := j.fenceResult(t)
	record(t, map[string]any{"child": res.Child, "exit": code})
	if code != 0 || res.Child != "oom" {
		t.Fatalf("parent 2.5 GiB, child 2.5 GiB under a 4 GiB cap: child %q, exit %d: %s", res.Child, code, tail(j.out.String()))
	}
}

// A child that drops its reservation from its environment is still its task's: the fence places
// it by its ancestry and refuses it at the cap, inside itself. A child that drops the preload
// leaves the fence, and is the watchdog's.
func TestFenceEscapeIsTheWatchdogs(t *testing.T) {
	for _, drop := range []string{"preload", "token"} {
		t.Run(drop, func(t *testing.T) {
			h := newHarnessFence(t, policy.ModeIsolated, 10*time.Millisecond, true)
			h.start()
			r := h.reserve(4*size.GiB, "escape")
			j := h.runScript(r, "escape", "fence.py", nil, "escape", "--drop", drop, "--mb", "6144", "--seconds", "30")
			v := h.violation(r.Token, 60*time.Second)
			code, _ := j.wait(t, 60*time.Second)
			record(t, map[string]any{"action": v.Action, "peak_mb": v.PeakBytes / size.MiB, "detail": v.Detail, "exit": code})
			switch drop {
			case "preload":
				if v.Action != enforcer.ActionSIGKILL || !strings.Contains(v.Detail, "allocation fence saw no allocation") {
					t.Errorf("violation %+v: want a SIGKILL by the watchdog, naming the fence's blind spot", v)
				}
			case "token":
				if v.Action != enforcer.ActionOOMInProcess || !strings.Contains(v.Detail, "fence") || code == 0 {
					t.Errorf("violation %+v, exit %d: want the child refused by the fence inside itself", v, code)
				}
			}
		})
	}
}

// The scene of gpu-facts.md: five honest jobs growing to their caps and a runaway, caps summing
// to nearly the budget. With the fence no neighbour is harmed and the runaway fails inside itself.
// In the borrowing row (mps mode, `--borrow wait`) the runaway's MPS pinned limit is the whole
// budget, so the fence is the only thing between it and the honest jobs' guarantees: it may
// borrow what no guarantee holds, wait for more, and must then fail inside itself.
func TestFenceFullGPU(t *testing.T) {
	const runawayCap = 8 * size.GiB
	for _, tc := range []struct {
		name   string
		mode   policy.Mode
		borrow bool
	}{
		{"isolated", policy.ModeIsolated, false},
		{"mps", policy.ModeMPS, false},
		{"mps-borrow", policy.ModeMPS, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessFenceWith(t, tc.mode, 10*time.Millisecond, true, func(fc *enforcer.FenceConfig) {
				if tc.borrow {
					fc.Borrow(enforcer.BorrowWait, 5*time.Second)
				}
			})
			if tc.mode == policy.ModeMPS {
				if err := h.enf.PrepareGPU(context.Background(), h.uuid); err != nil {
					t.Fatal(err)
				}
				defer func() { _ = h.enf.Shutdown(context.Background()) }()
			}
			h.start()
			st, err := h.led.State(h.uuid)
			if err != nil {
				t.Fatal(err)
			}
			honestCap := fullGPUHonestCap(st.BudgetBytes, runawayCap)
			var honest []*job
			for i := range 5 {
				name := fmt.Sprintf("honest%d", i)
				honest = append(honest, h.runScript(h.reserve(honestCap, name), name, "fence.py", nil,
					"grow", "--to-mb", fmt.Sprint(int64(honestCap*7/8/size.MiB)), "--step-mb", "512", "--interval", "0.2", "--seconds", "6"))
			}
			var opts []ledger.ReserveOption
			if tc.borrow {
				opts = append(opts, ledger.WithLimit(st.BudgetBytes))
			}
			rr, err := h.led.ReserveBytes(h.uuid, runawayCap, ledger.Task{JobName: "runaway", TaskName: "main"}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			run := h.runScript(rr, "runaway", "fence.py", nil, "runaway", "--after", "4", "--chunk-mb", "2048")
			harmed := 0
			for _, j := range honest {
				if code, sig := j.wait(t, 180*time.Second); code != 0 {
					harmed++
					t.Errorf("%s harmed: exit %d %v: %s", j.name, code, sig, tail(j.out.String()))
				}
			}
			code, sig := run.wait(t, 60*time.Second)
			res := run.fenceResult(t)
			line := map[string]any{"mode": tc.mode, "borrow": tc.borrow, "harmed": harmed, "runaway_exit": code,
				"runaway_mb": res.AllocatedMB, "runaway_ms": res.MS}
			if code != 1 || sig != 0 || res.Outcome != "oom" {
				t.Errorf("the runaway should fail inside itself: exit %d %v %+v", code, sig, res)
			}
			if tc.borrow {
				// What nobody was promised: the budget less every guarantee. The fence also keeps
				// the tasks' contexts out of it, so the runaway's tensors stay well under this.
				free := st.BudgetBytes - 5*honestCap
				line["borrowable_mb"] = free / size.MiB
				if got := size.Bytes(res.AllocatedMB) * size.MiB; got > free {
					t.Errorf("the runaway allocated %s: more than the %s no guarantee holds", got, free)
				}
				record(t, line)
				return
			}
			v := h.violation(rr.Token, 10*time.Second)
			over := v.PeakBytes - min(v.PeakBytes, rr.CapBytes)
			line["peak_mb"], line["overshoot_mb"], line["action"] = v.PeakBytes/size.MiB, over/size.MiB, v.Action
			record(t, line)
			if over > enforcer.DefaultAllowance {
				t.Errorf("the runaway reached %s past its %s cap: more than the context allowance", over, rr.CapBytes)
			}
		})
	}
}

// fullGPUHonestCap is each of the five honest jobs' cap in the full-GPU scene: 24 GiB, as
// measured on the H200 (gpu-facts.md), or on a smaller GPU the whole GiB that lets five of them
// and the runaway fill the budget but for 2 GiB (an H100's 77.65 GiB gives 13 GiB); each job
// grows to 7/8 of it.
func fullGPUHonestCap(budget, runawayCap size.Bytes) size.Bytes {
	fit := (budget - runawayCap - 2*size.GiB) / 5 / size.GiB * size.GiB
	return min(24*size.GiB, fit)
}

// BenchmarkFenceAllocFree is the fence's cost on the allocation path: cudaMalloc/cudaFree pairs
// through ctypes and torch.empty/del with the caching allocator off, with and without the fence,
// alternated five times; the metrics are the ratios of the medians (fenced / plain).
func BenchmarkFenceAllocFree(b *testing.B) {
	h := newHarnessFence(b, policy.ModeIsolated, 100*time.Millisecond, true)
	h.start()
	r := h.reserve(8*size.GiB, "cost")
	env := []string{"PYTORCH_NO_CUDA_MEMORY_CACHING=1"}
	var plainCUDA, fencedCUDA, plainTorch, fencedTorch []float64
	for i := range 5 {
		for _, fenced := range []bool{false, true} {
			res := r
			if !fenced {
				res.Token = ""
			}
			j := h.runScript(res, fmt.Sprintf("cost%d%v", i, fenced), "fence.py", env, "cost", "--n", "20000", "--kb", "64")
			if code, _ := j.wait(b, 300*time.Second); code != 0 {
				b.Fatalf("cost run failed: %s", tail(j.out.String()))
			}
			c := j.fenceResult(b)
			if fenced {
				fencedCUDA, fencedTorch = append(fencedCUDA, c.CUDAPairUS), append(fencedTorch, c.TorchPairUS)
			} else {
				plainCUDA, plainTorch = append(plainCUDA, c.CUDAPairUS), append(plainTorch, c.TorchPairUS)
			}
		}
	}
	med := func(x []float64) float64 { sort.Float64s(x); return x[len(x)/2] }
	record(b, map[string]any{"plain_cuda_us": plainCUDA, "fenced_cuda_us": fencedCUDA, "plain_torch_us": plainTorch,
		"fenced_torch_us": fencedTorch, "cuda_ratio": med(fencedCUDA) / med(plainCUDA), "torch_ratio": med(fencedTorch) / med(plainTorch)})
	b.ReportMetric(med(fencedCUDA)/med(plainCUDA), "cuda-ratio")
	b.ReportMetric(med(fencedTorch)/med(plainTorch), "torch-ratio")
}

// Under MPS with borrowing, a staged job that must make way for a borrower is ended by a refusal
// inside it, not by a signal, which can fault every client of the GPU (gpu-facts.md): gpufrac
// run withdraws its promise (ledger.Withdraw, then the fence's table), and PyTorch, blocked in
// its first large allocation in the fence's staged wait, gets CUDA's out-of-memory error and
// exits by itself. Two busy MPS neighbours finish with their solo results.
func TestMPSWithdrawnStagedJobEndsInsideItself(t *testing.T) {
	h := newHarnessFenceWith(t, policy.ModeMPS, 10*time.Millisecond, true, func(fc *enforcer.FenceConfig) {
		fc.Borrow(enforcer.BorrowWait, 5*time.Second)
	})
	if err := h.enf.PrepareGPU(context.Background(), h.uuid); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.enf.Shutdown(context.Background()) }()
	h.start()
	nb := h.startNeighbours()
	nb.ready(t)
	st, err := h.led.State(h.uuid)
	if err != nil {
		t.Fatal(err)
	}
	// Staged as gpufrac run stages under MPS with borrowing: a unit, a 16 GiB promise, and the
	// budget as its limit (its client's pinned limit, fixed at its start).
	staged, err := h.led.ReserveBytes(h.uuid, size.GiB, ledger.Task{JobName: "staged", TaskName: "main"},
		ledger.WithStage(16*size.GiB), ledger.WithLimit(st.BudgetBytes))
	if err != nil {
		t.Fatal(err)
	}
	j := h.runScript(staged, "staged", "fence.py", nil, "grow", "--to-mb", "8192", "--step-mb", "2048", "--interval", "0.1", "--seconds", "1")
	deadline := time.Now().Add(90 * time.Second) // Python, torch and a CUDA context first
	for {
		if _, waits := h.enf.FenceWaiters(h.uuid); slices.Contains(waits, staged.Token) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the staged job never waited in the fence for its grant: %s", tail(j.out.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t0 := time.Now()
	if _, err := h.led.Withdraw(staged.Token); err != nil {
		t.Fatal(err)
	}
	st, err = h.led.State(h.uuid)
	if err == nil {
		err = h.enf.SyncFence(st)
	}
	if err != nil {
		t.Fatalf("withdrawing the staged job's promise: %v", err)
	}
	code, sig := j.wait(t, 30*time.Second)
	took := time.Since(t0)
	res := j.fenceResult(t)
	okA, okB, whyA, whyB := nb.finished(t)
	var wide []string
	for _, ev := range h.eventsOf(enforcer.EventGPUHealth) {
		if ev.Stage == enforcer.StageUnhealthy {
			wide = append(wide, ev.Message)
		}
	}
	record(t, map[string]any{"staged_exit": code, "staged_signal": sig.String(), "staged_outcome": res.Outcome,
		"staged_error": res.Error, "exit_after_withdraw_ms": took.Milliseconds(), "gpu_health_events": wide,
		"neighbour_a": whyA, "neighbour_b": whyB})
	if code != 1 || sig != 0 || res.Outcome != "oom" || res.AllocatedMB != 0 {
		t.Errorf("the withdrawn job: exit %d %v %+v; want its own out-of-memory exit 1 before any allocation", code, sig, res)
	}
	if len(wide) > 0 {
		t.Errorf("GPU-wide events: %v", wide)
	}
	if !okA || !okB {
		t.Errorf("neighbours harmed: %s; %s", whyA, whyB)
	}
}

// The full-GPU scene fits the GPU it runs on: the H200's 24 GiB jobs, an H100's 13 GiB ones.
func TestFullGPUSceneFitsTheBudget(t *testing.T) {
	for _, tc := range []struct {
		budget, want size.Bytes
	}{
		{budget: 139 * size.GiB, want: 24 * size.GiB},
		{budget: 77*size.GiB + 665*size.MiB, want: 13 * size.GiB},
	} {
		got := fullGPUHonestCap(tc.budget, 8*size.GiB)
		if got != tc.want || 5*got+8*size.GiB > tc.budget {
			t.Errorf("budget %s: honest cap %s, want %s, five of them and the runaway within the budget", tc.budget, got, tc.want)
		}
	}
}
